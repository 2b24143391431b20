"""The rule table's inputs and its evaluator's answers, asked in-process with hand-derived figures: the one-device
columns ``hd.allocate`` re-checks a grant with, the view that reads them, what a part demands of each row, and the
amount-short forms that the queues' prefilter and eviction planning read."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from hami_devices.accounting import DeviceUsage
from hami_devices.errors import ReasonCode
from hami_devices.models import DeviceInfo, Grant, Health, RequestPart
from hami_devices.rounding import DefaultRule
from hami_devices.rules import (
    DEVICE_CODES,
    DEVICE_RULES,
    FIT_RULES,
    MATCH_RULES,
    NODE_RULES,
    ROUND_RULES,
    STATE_RULES,
    Demand,
    DeviceView,
    Kind,
    NodeView,
    Rule,
    evaluate,
    first_failure,
    fits_after,
    memory_need,
    one_device,
    shortfall,
)
from hami_devices.rules.columns import Rows
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.traits import find

T4 = DeviceInfo(uuid="GPU-t4", index=0, vendor="nvidia", model="T4", node="n0", memory_mib=15_360)
T4_TRAITS = find("nvidia", "T4")


def _view(info: DeviceInfo = T4, usage: DeviceUsage | None = None) -> DeviceView:
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


# ---------------------------------------------------------------- the views


def test_a_views_length_and_rows_follow_its_slice_or_index() -> None:
    assert len(Rows(slice(2, 5))) == 3 and Rows(slice(2, 5)).rows.tolist() == [2, 3, 4]
    assert len(Rows(slice(None, 4))) == 4 and Rows(slice(None, 4)).rows.tolist() == [0, 1, 2, 3]
    picked = Rows(np.array([5, 1]))
    assert len(picked) == 2 and picked.rows.tolist() == [5, 1]


def test_a_clusters_views_hold_its_columns_at_the_rows_asked() -> None:
    """Every column a rule reads is the cluster's column of the same name, at the view's rows."""
    cluster = ClusterState()
    infos = [T4.model_copy(update={"uuid": f"GPU-{i}", "index": i, "node": f"n{i // 2}", "memory_mib": 1_000 * (i + 1)})
             for i in range(4)]
    cluster.add_node("n0", 8_000, 16_000, infos[:2])
    cluster.add_node("n1", 4_000, 32_000, infos[2:])
    cluster.assume("n1", [Grant.on(infos[2], 0, 300, 0)], host_cpu_milli=500, host_memory_mib=64)
    at = np.array([2, 0])
    view = cluster.view(at)
    names = [f.name for f in dataclasses.fields(DeviceView) if f.name not in ("at", "names")]
    assert len(names) == 15
    for name in names:
        assert np.array_equal(getattr(view, name), getattr(cluster, name)[at]), name
    assert view.mem_total.tolist() == [3_000, 1_000] and view.sharers.tolist() == [1, 0]
    assert len(cluster.view()) == 4 and view.names is cluster
    nodes = cluster.node_view(np.array([1]))
    assert (nodes.node_cpu_used.tolist(), nodes.node_cpu_total.tolist()) == ([500], [4_000])
    assert (nodes.node_mem_used.tolist(), nodes.node_mem_total.tolist()) == ([64], [32_000])
    assert nodes.node_ok.tolist() == [True] and nodes.rows.tolist() == [1]


def test_as_if_empty_clears_usage_and_state_and_keeps_each_columns_type() -> None:
    info = T4.model_copy(update={"health": Health.UNHEALTHY})
    held = DeviceUsage().plus(Grant.on(info, 0, 1_000, 30, exclusive=True))
    view = _view(info, held)
    empty = view.as_if_empty()
    for column, dtype in ((empty.mem_used, np.int64), (empty.cores_used, np.int64), (empty.sharers, np.int64)):
        assert column.tolist() == [0] and column.dtype == dtype
    assert empty.exclusive.tolist() == [False] and empty.exclusive.dtype == np.bool_
    assert empty.healthy.tolist() == [True] and empty.healthy.dtype == np.bool_
    assert view.mem_used.tolist() == [1_000] and view.healthy.tolist() == [False]  # the view itself is kept
    assert empty.mem_cap is view.mem_cap and empty.names is view.names and empty.at is view.at

    class NoNames:
        def label_matches(self, key: str, value: str) -> Any:
            raise AssertionError("not asked")

        def node_taints(self) -> list[Any]:
            return []

    total = np.array([4_000, 8_000], dtype=np.int64)
    nodes = NodeView(slice(0, 2), NoNames(), np.array([False, True]), np.array([1_000, 0]), total,
                     np.array([5, 7]), total)
    emptied = nodes.as_if_empty()
    assert emptied.node_ok.tolist() == [True, True] and emptied.node_ok.dtype == np.bool_
    assert emptied.node_cpu_used.tolist() == [0, 0] and emptied.node_mem_used.tolist() == [0, 0]
    assert emptied.node_cpu_total is total and nodes.node_ok.tolist() == [False, True]


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


def _round_rule() -> Rule[DeviceView, Demand]:
    (rule,) = ROUND_RULES
    return rule


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


def _fit_view_and_demand(memory: int, cores: int) -> tuple[DeviceView, Demand]:
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


def test_an_exclusive_part_is_short_by_every_sharer_of_the_device_and_a_shared_part_by_none() -> None:
    two_sharers = DeviceUsage().plus(Grant.on(T4, 0, 1_000, 10)).plus(Grant.on(T4, 1, 1_000, 10))
    view = _view(usage=two_sharers)
    alone = Demand(np.array([1_000]), 0, True, np.array([False]))
    shared = Demand(np.array([1_000]), 0, False, np.array([False]))
    resource, short = shortfall(FIT_RULES, view, alone)[ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE]
    assert (resource, short.tolist()) == ("sharers", [2])
    assert fits_after(FIT_RULES, view, alone, {"sharers": np.array([1])}).tolist() == [False]
    assert fits_after(FIT_RULES, view, alone, {"sharers": np.array([2])}).tolist() == [True]
    assert shortfall(FIT_RULES, view, shared)[ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE][1][0] <= 0
    assert fits_after(FIT_RULES, view, shared, {}).tolist() == [True]


# ---------------------------------------------------------------- the table's groups


def test_each_group_holds_the_rows_of_its_kind_and_the_table_reports_in_kind_order() -> None:
    groups = {Kind.MATCH: MATCH_RULES, Kind.STATE: STATE_RULES, Kind.ROUND: ROUND_RULES, Kind.FIT: FIT_RULES}
    for kind, group in groups.items():
        assert group and all(r.kind == kind for r in group), kind
    assert (*MATCH_RULES, *STATE_RULES, *ROUND_RULES, *FIT_RULES) == DEVICE_RULES
    assert [r.kind for r in NODE_RULES] == [Kind.MATCH, Kind.MATCH, Kind.STATE, Kind.FIT, Kind.FIT]
