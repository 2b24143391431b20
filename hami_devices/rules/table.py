"""The placement rules, each written once, as rows of a table.

A row is a reason code, the kind of fact it judges, and its test over the
columns the rules read (``rules.columns``).  A row that limits an amount says
so as ``Limit``: what is used, what the part needs and what may be held, in
one resource; its test is ``used + need > cap``, and how much is short is
``used + need - cap``.  Every consumer -- the allocator's re-check of one
device, the engine's filter over a whole cluster, refusals and node verdicts,
the queues' eviction planning, the DRA allocator -- runs these rows through
``rules.evaluate``; none writes a rule of its own.

Order matters only for reports: a device's reason is the first row it fails.
``MATCH`` rows (the device's facts against the part's selectors) come first,
then ``STATE`` rows (the device's state, whatever is asked), then the vendor's
rounding of the part onto the device (``ROUND``), then ``FIT`` rows (what the
rounded part needs against what is left).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from hami_devices.errors import ReasonCode
from hami_devices.models import PRECISIONS, RequestPart
from hami_devices.rules.columns import BoolArray, ColumnView, IntArray, NodeNames

if TYPE_CHECKING:
    from hami_devices.rules.demand import Apart, Demand, HostDemand

UNLIMITED = 2**62
"""A cap that no amount reaches."""


class Kind(StrEnum):
    MATCH = "match"  # the device's static facts against the part's selectors
    STATE = "state"  # the device's state alone, whatever the part asks
    ROUND = "round"  # the vendor's rounding found no grant for the part on the device
    FIT = "fit"  # what the rounded part needs against what is left


@dataclass(frozen=True)
class Limit:
    """``used + need <= cap`` in one resource (MiB, cores, sharers, exclusive holders, host CPU ...)."""

    resource: str
    used: Callable[[ColumnView], Any]
    need: Callable[[Any], Any]  # of the demand alone: what a part takes does not depend on where it lands
    cap: Callable[[ColumnView, Any], Any]

    def within(self, view: ColumnView, demand: Any) -> BoolArray:
        return self.used(view) + self.need(demand) <= self.cap(view, demand)  # type: ignore[no-any-return]

    def short(self, view: ColumnView, demand: Any) -> IntArray:
        """How much is missing per row (0 or less: it fits)."""
        return self.used(view) + self.need(demand) - self.cap(view, demand)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Rule:
    code: ReasonCode
    kind: Kind
    test: Callable[[ColumnView, Any], BoolArray | None] | None = None
    """Rows that fail (None: the part sets no such constraint, every row passes)."""
    limit: Limit | None = None

    def fails(self, view: ColumnView, arg: Any) -> BoolArray | None:
        if self.limit is not None:
            return ~self.limit.within(view, arg)
        assert self.test is not None
        return self.test(view, arg)

    def narrow(self, view: ColumnView, arg: Any, ok: BoolArray) -> None:
        """``ok &= this rule passes`` (in place)."""
        if self.limit is not None:
            ok &= self.limit.within(view, arg)
            return
        assert self.test is not None
        bad = self.test(view, arg)
        if bad is not None:
            ok &= ~bad


def _named(ids: IntArray, resolve: Callable[[Sequence[str]], list[int]], include: Sequence[str],
           exclude: Sequence[str]) -> BoolArray | None:
    """Rows whose id is not among ``include`` (when given) or is among ``exclude``."""
    if not include and not exclude:
        return None
    bad = ~np.isin(ids, resolve(include)) if include else np.zeros(ids.shape, dtype=bool)
    if exclude:
        bad |= np.isin(ids, resolve(exclude))
    return bad


def _precision(view: ColumnView, part: RequestPart) -> BoolArray | None:
    if part.precision is None:
        return None
    column = PRECISIONS.index(part.precision)
    return view.has_traits & (view.tflops[:, column] <= 0)  # type: ignore[no-any-return]


def _numa(view: ColumnView, part: RequestPart) -> BoolArray | None:
    return None if part.numa_node is None else view.numa != part.numa_node


def _vendor(view: ColumnView, part: RequestPart) -> BoolArray | None:
    return _named(view.vendor, view.names.vendor_ids, part.vendors, part.exclude_vendors)


def _model(view: ColumnView, part: RequestPart) -> BoolArray | None:
    return _named(view.model, view.names.model_ids_matching, part.models, part.exclude_models)


def _uuid(view: ColumnView, part: RequestPart) -> BoolArray | None:
    if not part.uuids and not part.exclude_uuids:
        return None
    return _named(view.rows, view.names.uuid_rows, part.uuids, part.exclude_uuids)


def _refused(view: ColumnView, demand: Demand) -> BoolArray:
    return demand.refused


def _unhealthy(view: ColumnView, _: object) -> BoolArray:
    return ~view.healthy  # type: ignore[no-any-return]


def _unschedulable(view: ColumnView, _: object) -> BoolArray:
    return ~view.node_ok  # type: ignore[no-any-return]


def _unselected(view: ColumnView, host: HostDemand) -> BoolArray | None:
    """Nodes that lack one of the labels the request's ``node_selector`` names."""
    if not host.node_selector:
        return None
    names: NodeNames = view.names
    bad = np.zeros(len(view), dtype=bool)
    for key, value in host.node_selector:
        bad |= ~names.label_matches(key, value)[view.at]
    return bad


def _untolerated(view: ColumnView, host: HostDemand) -> BoolArray | None:
    """Nodes carrying a taint the request does not tolerate."""
    names: NodeNames = view.names
    bad: BoolArray | None = None
    for taint, carried in names.node_taints():
        if not host.tolerates(taint):
            on = carried[view.at]
            bad = on if bad is None else bad | on
    return bad


def _beside_sibling(view: ColumnView, apart: Apart) -> BoolArray | None:
    """Nodes holding a part this part must not share a node with."""
    return None if apart.nodes.size == 0 else np.isin(view.rows, apart.nodes)


# The amounts the limits compare: what is used (of the columns ``v``), what the demand needs (of the demand
# ``d`` alone: a rules.Demand for devices, a rules.HostDemand for nodes, nothing for STATE rows) and the cap.


def _holders(v: ColumnView) -> BoolArray:
    return v.exclusive  # type: ignore[no-any-return]  # a bool counts 0 or 1 holders in the sums


def _sharers(v: ColumnView) -> IntArray:
    return v.sharers  # type: ignore[no-any-return]


def _nothing(d: object) -> int:
    return 0


def _none_allowed(v: ColumnView, d: object) -> int:
    return 0


def _one_more(d: object) -> int:
    return 1


def _split(v: ColumnView, d: object) -> IntArray:
    return v.split  # type: ignore[no-any-return]


def _alone_if_exclusive(v: ColumnView, d: Demand) -> IntArray:
    """An exclusive part needs the device empty; any other part takes no notice of the sharers."""
    return np.where(d.exclusive, 0, UNLIMITED)


def _mem_used(v: ColumnView) -> IntArray:
    return v.mem_used  # type: ignore[no-any-return]


def _mem_need(d: Demand) -> IntArray:
    return d.booked  # a shared grant's context is booked on top of its share: it takes the card's memory too


def _mem_cap(v: ColumnView, d: Demand) -> IntArray:
    return v.mem_cap  # type: ignore[no-any-return]


def _cores_used(v: ColumnView) -> IntArray:
    return v.cores_used  # type: ignore[no-any-return]


def _cores_need(d: Demand) -> IntArray | int:
    return d.cores


def _core_cap(v: ColumnView, d: Demand) -> IntArray:
    return v.core_cap  # type: ignore[no-any-return]


def _cpu_used(v: ColumnView) -> IntArray:
    return v.node_cpu_used  # type: ignore[no-any-return]


def _cpu_need(d: HostDemand) -> int:
    return d.cpu_milli


def _cpu_total(v: ColumnView, d: HostDemand) -> IntArray:
    return v.node_cpu_total  # type: ignore[no-any-return]


def _host_mem_used(v: ColumnView) -> IntArray:
    return v.node_mem_used  # type: ignore[no-any-return]


def _host_mem_need(d: HostDemand) -> int:
    return d.memory_mib


def _host_mem_total(v: ColumnView, d: HostDemand) -> IntArray:
    return v.node_mem_total  # type: ignore[no-any-return]


DEVICE_RULES: tuple[Rule, ...] = (
    Rule(ReasonCode.CARD_VENDOR_MISMATCH, Kind.MATCH, _vendor),
    Rule(ReasonCode.CARD_TYPE_MISMATCH, Kind.MATCH, _model),
    Rule(ReasonCode.CARD_UUID_MISMATCH, Kind.MATCH, _uuid),
    Rule(ReasonCode.CARD_PRECISION_UNSUPPORTED, Kind.MATCH, _precision),
    Rule(ReasonCode.CARD_NUMA_MISMATCH, Kind.MATCH, _numa),
    Rule(ReasonCode.CARD_UNHEALTHY, Kind.STATE, _unhealthy),
    Rule(ReasonCode.CARD_EXCLUSIVELY_HELD, Kind.STATE, limit=Limit("exclusive", _holders, _nothing, _none_allowed)),
    Rule(ReasonCode.CARD_SPLIT_EXHAUSTED, Kind.STATE, limit=Limit("sharers", _sharers, _one_more, _split)),
    Rule(ReasonCode.CARD_PARTITION_UNAVAILABLE, Kind.ROUND, _refused),
    Rule(
        ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE,
        Kind.FIT,
        limit=Limit("sharers", _sharers, _nothing, _alone_if_exclusive),
    ),
    Rule(ReasonCode.CARD_INSUFFICIENT_MEMORY, Kind.FIT, limit=Limit("memory", _mem_used, _mem_need, _mem_cap)),
    Rule(ReasonCode.CARD_INSUFFICIENT_CORE, Kind.FIT, limit=Limit("cores", _cores_used, _cores_need, _core_cap)),
)
"""What one device must satisfy to take one part of a request."""

NODE_RULES: tuple[Rule, ...] = (
    Rule(ReasonCode.NODE_SELECTOR_MISMATCH, Kind.MATCH, _unselected),
    Rule(ReasonCode.NODE_TAINT_NOT_TOLERATED, Kind.MATCH, _untolerated),
    Rule(ReasonCode.NODE_UNSCHEDULABLE, Kind.STATE, _unschedulable),
    Rule(ReasonCode.NODE_INSUFFICIENT_CPU, Kind.FIT, limit=Limit("host_cpu_milli", _cpu_used, _cpu_need, _cpu_total)),
    Rule(
        ReasonCode.NODE_INSUFFICIENT_MEMORY,
        Kind.FIT,
        limit=Limit("host_memory_mib", _host_mem_used, _host_mem_need, _host_mem_total),
    ),
)
"""What the node hosting (a process of) a request must satisfy."""

PART_NODE_RULES: tuple[Rule, ...] = (Rule(ReasonCode.NODE_ANTI_AFFINITY, Kind.MATCH, _beside_sibling),)
"""What the node of one part must satisfy given where the request's other parts went (a ``demand.Apart``)."""


def rules_of(table: Sequence[Rule], *kinds: Kind) -> tuple[Rule, ...]:
    # Run only at import, before mutmut switches a mutant on, so no mutant of it can be judged (the
    # rule groups it builds are tested through every evaluation).
    return tuple(r for r in table if r.kind in kinds)  # pragma: no mutate


DEVICE_CODES: tuple[ReasonCode, ...] = tuple(r.code for r in DEVICE_RULES)
"""Device reason codes in the order they are reported."""
NODE_CODES: tuple[ReasonCode, ...] = tuple(r.code for r in NODE_RULES)
PART_NODE_CODES: tuple[ReasonCode, ...] = tuple(r.code for r in PART_NODE_RULES)
USAGE_CODES: frozenset[ReasonCode] = frozenset(
    r.code for r in (*DEVICE_RULES, *NODE_RULES) if r.limit is not None
)
"""Codes that say what others hold right now: they go away as allocations are released."""
