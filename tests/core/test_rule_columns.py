"""The rule table's inputs and its evaluator's answers, asked in-process with hand-derived figures: the one-device
columns ``hd.allocate`` re-checks a grant with, the view that reads them, what a part demands of each row, and the
amount-short forms that the queues' prefilter and eviction planning read."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hami_devices.accounting import DeviceUsage
from hami_devices.errors import ReasonCode
from hami_devices.models import DeviceInfo, Grant, RequestPart
from hami_devices.rounding import DefaultRule
from hami_devices.rules import (
    DEVICE_CODES,
    DEVICE_RULES,
    FIT_RULES,
    ColumnView,
    Demand,
    Kind,
    evaluate,
    first_failure,
    fits_after,
    memory_need,
    one_device,
    shortfall,
)
from hami_devices.rules.columns import AsIfEmpty
from hami_devices.traits import find

T4 = DeviceInfo(uuid="GPU-t4", index=0, vendor="nvidia", model="T4", node="n0", memory_mib=15_360)
T4_TRAITS = find("nvidia", "T4")


def _view(info: DeviceInfo = T4, usage: DeviceUsage | None = None) -> ColumnView:
    return one_device(info, usage or DeviceUsage(), 1.0, 100)


# ---------------------------------------------------------------- one device's columns


def test_a_device_without_numa_or_traits_reads_as_unknown_numa_and_no_peak() -> None:
    view = _view()
    assert len(view) == 1 and view.rows.tolist() == [0]
    assert view.numa.tolist() == [-1]
    assert view.has_traits.tolist() == [False] and view.has_traits.dtype == np.bool_
    assert view.tflops.shape[0] == 1 and not view.tflops.any()
    assert view.mem_total.tolist() == [15_360] and view.mem_total.dtype == np.int64
    assert view.healthy.tolist() == [True] and view.healthy.dtype == np.bool_
    assert view.exclusive.tolist() == [False] and view.exclusive.dtype == np.bool_


def test_a_device_with_numa_traits_and_an_exclusive_holder_reads_them_all() -> None:
    assert T4_TRAITS is not None
    info = T4.model_copy(update={"numa_node": 1, "traits": T4_TRAITS})
    held = DeviceUsage().plus(Grant.on(info, 0, 1_000, 100, exclusive=True))
    view = _view(info, held)
    assert view.numa.tolist() == [1]
    assert view.has_traits.tolist() == [True]
    assert view.exclusive.tolist() == [True]
    assert view.sharers.tolist() == [1] and view.mem_used.tolist() == [1_000] and view.cores_used.tolist() == [100]
    assert evaluate(info, DefaultRule(), RequestPart(memory_mib=100, cores=0), 0, held) == [
        ReasonCode.CARD_EXCLUSIVELY_HELD
    ]


def test_a_numa_selector_reads_the_devices_own_node() -> None:
    on_one = T4.model_copy(update={"numa_node": 1})
    on_it = RequestPart(memory_mib=100, numa_node=1)
    assert isinstance(evaluate(on_one, DefaultRule(), on_it, 0, DeviceUsage()), Grant)
    assert evaluate(on_one, DefaultRule(), RequestPart(memory_mib=100, numa_node=0), 0, DeviceUsage()) == [
        ReasonCode.CARD_NUMA_MISMATCH
    ]
    assert evaluate(T4, DefaultRule(), RequestPart(memory_mib=100, numa_node=0), 0, DeviceUsage()) == [
        ReasonCode.CARD_NUMA_MISMATCH
    ]


def test_a_device_answers_to_its_catalog_models_name_as_well_as_its_own() -> None:
    """A vGPU reports its own product name; once matched to the T4's catalog entry it answers to "T4" and to
    the catalog's aliases too."""
    assert T4_TRAITS is not None
    vgpu = T4.model_copy(update={"model": "GRID T4-16Q", "traits": T4_TRAITS})
    for name in ("T4", "Tesla T4", "GRID T4-16Q"):
        assert isinstance(evaluate(vgpu, DefaultRule(), RequestPart(memory_mib=100, models=[name]), 0,
                                  DeviceUsage()), Grant), name
    no_aliases = T4.model_copy(update={"model": "GRID T4-16Q", "traits": T4_TRAITS.model_copy(update={"aliases": []})})
    assert isinstance(evaluate(no_aliases, DefaultRule(), RequestPart(memory_mib=100, models=["T4"]), 0,
                               DeviceUsage()), Grant)


def test_a_precision_the_device_runs_slowly_is_still_supported() -> None:
    """The precision rule refuses only a precision the spec sheet leaves out (0 TFLOPS), not a slow one."""
    assert T4_TRAITS is not None
    slow_tf32 = T4_TRAITS.model_copy(update={"peak_tflops": {**T4_TRAITS.peak_tflops, "tf32": 0.25}})
    info = T4.model_copy(update={"traits": slow_tf32})
    assert isinstance(evaluate(info, DefaultRule(), RequestPart(memory_mib=100, precision="tf32"), 0,
                               DeviceUsage()), Grant)
    assert evaluate(info, DefaultRule(), RequestPart(memory_mib=100, precision="fp8"), 0, DeviceUsage()) == [
        ReasonCode.CARD_PRECISION_UNSUPPORTED
    ]


@pytest.mark.parametrize("field", ["vendors", "models"])
def test_a_device_outside_the_included_names_fails_whatever_is_excluded(field: str) -> None:
    other = {"vendors": ("ascend", "cambricon"), "models": ("A100", "H100")}[field]
    code = {"vendors": ReasonCode.CARD_VENDOR_MISMATCH, "models": ReasonCode.CARD_TYPE_MISMATCH}[field]
    part = RequestPart.model_validate({"memory_mib": 100, field: [other[0]], f"exclude_{field}": [other[1]]})
    assert evaluate(T4, DefaultRule(), part, 0, DeviceUsage()) == [code]


# ---------------------------------------------------------------- the view


class _Counting:
    """A column source that counts its reads."""

    def __init__(self) -> None:
        self.reads = 0
        self._hidden = np.arange(6)

    @property
    def mem_used(self) -> Any:
        self.reads += 1
        return np.arange(6) * 10


def test_a_view_reads_each_column_once_and_never_a_private_one() -> None:
    source = _Counting()
    view = ColumnView(source, slice(2, 5), None)
    assert view.mem_used.tolist() == [20, 30, 40]
    assert view.mem_used.tolist() == [20, 30, 40]
    assert source.reads == 1
    with pytest.raises(AttributeError) as missing:
        view._hidden  # noqa: B018
    assert missing.value.args == ("_hidden",)


def test_a_views_length_and_rows_follow_its_slice_or_index() -> None:
    source = _Counting()
    assert len(ColumnView(source, slice(2, 5), None)) == 3
    assert ColumnView(source, slice(2, 5), None).rows.tolist() == [2, 3, 4]
    assert len(ColumnView(source, slice(None, 4), None)) == 4
    picked = ColumnView(source, np.array([5, 1]), None)
    assert len(picked) == 2 and picked.mem_used.tolist() == [50, 10]


def test_as_if_empty_clears_usage_and_state_and_keeps_each_columns_type() -> None:
    class Source:
        mem_used = np.array([5, 7], dtype=np.int64)
        exclusive = np.array([True, False])
        healthy = np.array([False, True])
        node_ok = np.array([False])
        mem_cap = np.array([100, 200], dtype=np.int64)

    empty = AsIfEmpty(Source())
    assert empty.mem_used.tolist() == [0, 0] and empty.mem_used.dtype == np.int64
    assert empty.exclusive.tolist() == [False, False] and empty.exclusive.dtype == np.bool_
    assert empty.healthy.tolist() == [True, True] and empty.healthy.dtype == np.bool_
    assert empty.node_ok.tolist() == [True]
    assert empty.mem_cap is Source.mem_cap
    assert empty.mem_used is empty.mem_used and empty.healthy is empty.healthy  # each built once


# ---------------------------------------------------------------- what a part demands


def test_taking_rows_of_a_demand_takes_every_per_row_field() -> None:
    demand = Demand(
        memory=np.array([1, 2, 3]),
        cores=np.array([10, 20, 30]),
        exclusive=np.array([True, False, True]),
        refused=np.array([False, True, False]),
        codes=np.array([-1, 5, -1]),
    )
    taken = demand.take(np.array([2, 1]))
    assert taken.memory.tolist() == [3, 2]
    assert isinstance(taken.cores, np.ndarray) and taken.cores.tolist() == [30, 20]
    assert isinstance(taken.exclusive, np.ndarray) and taken.exclusive.tolist() == [True, False]
    assert taken.refused.tolist() == [False, True]
    assert taken.codes is not None and taken.codes.tolist() == [-1, 5]
    scalar = Demand(np.array([1, 2]), 40, True, np.zeros(2, dtype=bool)).take(slice(1, 2))
    assert (scalar.cores, scalar.exclusive, scalar.codes) == (40, True, None)


def test_a_plain_demand_carries_the_parts_exclusivity_and_refuses_nothing() -> None:
    contexts = np.array([518, 0, 7])
    demand = Demand.plain(RequestPart(memory_mib=100, cores=100), np.array([100, 100, 100]), contexts)  # exclusive
    assert demand.exclusive is True and demand.cores == 100
    assert demand.refused.dtype == np.bool_ and demand.refused.tolist() == [False, False, False]
    assert demand.booked.tolist() == [100, 100, 100]  # the whole card holds its context inside


def test_a_shared_plain_demand_books_one_context_of_each_rows_model_on_top() -> None:
    demand = Demand.plain(RequestPart(memory_mib=100, cores=30), np.array([100, 100, 100]), np.array([518, 0, 7]))
    assert demand.memory.tolist() == [100, 100, 100] and demand.booked.tolist() == [618, 100, 107]
    assert Demand.plain(RequestPart(memory_mib=100, cores=30), np.array([100]), np.array([518])).take(
        slice(0, 1)
    ).booked.tolist() == [618]


def test_the_demand_of_grants_is_typed_even_when_there_are_none() -> None:
    none = Demand.of_grants([])
    for column, dtype in ((none.memory, np.int64), (none.cores, np.int64), (none.exclusive, np.bool_),
                          (none.refused, np.bool_)):
        assert isinstance(column, np.ndarray) and column.dtype == dtype and column.size == 0
    two = Demand.of_grants([Grant.on(T4, 0, 1_000, 30), Grant.on(T4, 1, 15_360, 100, exclusive=True)])
    assert two.memory.tolist() == [1_000, 15_360]
    assert isinstance(two.cores, np.ndarray) and two.cores.tolist() == [30, 100]
    assert isinstance(two.exclusive, np.ndarray) and two.exclusive.tolist() == [False, True]
    assert two.refused.dtype == np.bool_ and two.refused.tolist() == [False, False]


def test_a_memory_need_keeps_the_shape_and_integer_type_of_the_totals() -> None:
    totals = np.array([[16_000, 8_000], [16_000, 4_000]])
    half = memory_need(RequestPart(memory_percent=50.0), totals)
    assert half.dtype == np.int64 and half.tolist() == [[8_000, 4_000], [8_000, 2_000]]
    fixed = memory_need(RequestPart(memory_mib=300), totals)
    assert fixed.dtype == np.int64 and fixed.tolist() == [[300, 300], [300, 300]]


# ---------------------------------------------------------------- first failure and the amounts short


def _round_rule() -> Any:
    return next(r for r in DEVICE_RULES if r.kind == Kind.ROUND)


@pytest.mark.parametrize(("own", "expected"), [(3, 3), (0, 0), (-1, None)])
def test_a_refused_rounding_reports_its_own_code_where_it_gave_one(own: int, expected: int | None) -> None:
    index = {code: i for i, code in enumerate(DEVICE_CODES)}
    rule = _round_rule()
    demand = Demand(np.array([0]), 0, False, np.array([True]), codes=np.array([own]))
    codes = np.array([-1])
    first_failure([rule], _view(), demand, codes, index)
    assert codes.tolist() == [index[rule.code] if expected is None else expected]


def test_a_row_already_coded_keeps_its_code() -> None:
    index = {code: i for i, code in enumerate(DEVICE_CODES)}
    demand = Demand(np.array([0]), 0, False, np.array([True]), codes=np.array([3]))
    codes = np.array([7])
    first_failure([_round_rule()], _view(), demand, codes, index)
    assert codes.tolist() == [7]


def _fit_view_and_demand(memory: int, cores: int) -> tuple[ColumnView, Demand]:
    """A T4 holding 15,000 MiB and 90 cores; the part asks ``memory`` and ``cores``."""
    used = DeviceUsage().plus(Grant.on(T4, 0, 15_000, 90))
    return _view(usage=used), Demand.plain(
        RequestPart(memory_mib=memory, cores=cores), np.array([memory]), np.array([T4.context_mib])
    )


def test_the_amount_short_is_what_is_used_plus_what_is_asked_less_the_cap() -> None:
    view, demand = _fit_view_and_demand(1_000, 20)
    short = shortfall(FIT_RULES, view, demand)
    assert short[ReasonCode.CARD_INSUFFICIENT_MEMORY][0] == "memory"
    assert short[ReasonCode.CARD_INSUFFICIENT_MEMORY][1].tolist() == [15_000 + 1_000 - 15_360]
    assert short[ReasonCode.CARD_INSUFFICIENT_CORE][0] == "cores"
    assert short[ReasonCode.CARD_INSUFFICIENT_CORE][1].tolist() == [90 + 20 - 100]
    assert set(short) == {r.code for r in FIT_RULES if r.limit is not None}


def test_a_part_fits_after_a_release_only_when_every_shortfall_is_given_back() -> None:
    view, demand = _fit_view_and_demand(1_000, 20)
    assert fits_after(FIT_RULES, view, demand, {"memory": np.array([640]), "cores": np.array([10])}).tolist() == [
        True
    ]
    assert fits_after(FIT_RULES, view, demand, {"memory": np.array([640])}).tolist() == [False]
    assert fits_after(FIT_RULES, view, demand, {"memory": np.array([639]), "cores": np.array([10])}).tolist() == [
        False
    ]
    view, cores_fit = _fit_view_and_demand(1_000, 5)  # cores fit; memory is 640 short, nothing given back
    assert fits_after(FIT_RULES, view, cores_fit, {}).tolist() == [False]
    view, one_mib_short = _fit_view_and_demand(361, 10)
    assert fits_after(FIT_RULES, view, one_mib_short, {}).tolist() == [False]
    assert fits_after(FIT_RULES, view, one_mib_short, {"memory": np.array([1])}).tolist() == [True]
