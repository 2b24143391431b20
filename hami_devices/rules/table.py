"""The placement rules, each written once, as rows of a table.

A row is a reason code, the kind of fact it judges, and its test over the
columns of a view (``rules.columns``).  A row that limits an amount says so as
``Limit``: what is used, what the part needs and what may be held, in one
resource; its test is ``used + need > cap``, and how much is short is
``used + need - cap``.  Every consumer -- the allocator's re-check of one
device, the engine's filter over a whole cluster, refusals and node verdicts,
the queues' eviction planning, the DRA allocator -- runs these rows through
``rules.evaluate``; none writes a rule of its own.

A rule is typed by the view it reads (``DeviceView`` or ``NodeView``) and by
what it judges: a ``RequestPart`` (``MATCH`` rows), nothing (``STATE`` rows:
any argument will do), a ``Demand`` (``ROUND`` and ``FIT``
rows), a ``HostDemand`` or an ``Apart``.  The rows come in groups of one
argument type, which the type checker holds every caller to; the whole device
table, ``DEVICE_RULES``, mixes them, so it is for listing codes, kinds and
limits, not for evaluating.

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
from typing import Any, Generic, Never, TypeVar

import numpy as np

from hami_devices.errors import ReasonCode
from hami_devices.models import PRECISIONS, RequestPart
from hami_devices.rules.columns import BoolArray, DeviceView, IntArray, NodeView
from hami_devices.rules.demand import Apart, Demand, HostDemand

UNLIMITED = 2**62
"""A cap that no amount reaches (and an amount that reaches every cap)."""

V = TypeVar("V", contravariant=True)
"""The view a rule reads."""
A = TypeVar("A", contravariant=True)
"""What a rule judges; a rule of ``object`` judges whatever it is given."""


class Kind(StrEnum):
    MATCH = "match"  # the device's static facts against the part's selectors
    STATE = "state"  # the device's state alone, whatever the part asks
    ROUND = "round"  # the vendor's rounding found no grant for the part on the device
    FIT = "fit"  # what the rounded part needs against what is left


@dataclass(frozen=True)
class Limit(Generic[V, A]):
    """``used + need <= cap`` in one resource (MiB, cores, sharers, exclusive holders, host CPU ...)."""

    resource: str
    used: Callable[[V], IntArray | BoolArray]  # a bool column counts 0 or 1 holders in the sums
    need: Callable[[A], IntArray | int]  # of the demand alone: what a part takes does not depend on where it lands
    cap: Callable[[V], IntArray | int]

    def within(self, view: V, demand: A) -> BoolArray:
        return self.used(view) + self.need(demand) <= self.cap(view)

    def short(self, view: V, demand: A) -> IntArray:
        """How much is missing per row (0 or less: it fits)."""
        return self.used(view) + self.need(demand) - self.cap(view)


@dataclass(frozen=True)
class Rule(Generic[V, A]):
    code: ReasonCode
    kind: Kind
    test: Callable[[V, A], BoolArray | None] | None = None
    """Rows that fail (None: the part sets no such constraint, every row passes)."""
    limit: Limit[V, A] | None = None
    codes: Callable[[A], IntArray | None] | None = None
    """Per row that fails, a finer reason its judge gave (a position in ``DEVICE_CODES``, -1: none), reported
    instead of ``code``: the vendor's rounding says why it found no grant."""

    def fails(self, view: V, arg: A) -> BoolArray | None:
        if self.limit is not None:
            return ~self.limit.within(view, arg)
        assert self.test is not None
        return self.test(view, arg)

    def narrow(self, view: V, arg: A, ok: BoolArray) -> None:
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


def _precision(view: DeviceView, part: RequestPart) -> BoolArray | None:
    if part.precision is None:
        return None
    column = PRECISIONS.index(part.precision)
    return view.has_traits & (view.tflops[:, column] <= 0)


def _numa(view: DeviceView, part: RequestPart) -> BoolArray | None:
    return None if part.numa_node is None else view.numa != part.numa_node


def _vendor(view: DeviceView, part: RequestPart) -> BoolArray | None:
    return _named(view.vendor, view.names.vendor_ids, part.vendors, part.exclude_vendors)


def _model(view: DeviceView, part: RequestPart) -> BoolArray | None:
    return _named(view.model, view.names.model_ids_matching, part.models, part.exclude_models)


def _uuid(view: DeviceView, part: RequestPart) -> BoolArray | None:
    if not part.uuids and not part.exclude_uuids:
        return None
    return _named(view.rows, view.names.uuid_rows, part.uuids, part.exclude_uuids)


def _refused(view: DeviceView, demand: Demand) -> BoolArray:
    return demand.refused


def _rounding_codes(demand: Demand) -> IntArray | None:
    return demand.codes


def _unhealthy(view: DeviceView, _: object) -> BoolArray:
    return ~view.healthy


def _unschedulable(view: NodeView, _: object) -> BoolArray:
    return ~view.node_ok


def _unselected(view: NodeView, host: HostDemand) -> BoolArray | None:
    """Nodes that lack one of the labels the request's ``node_selector`` names."""
    if not host.node_selector:
        return None
    bad = np.zeros(len(view), dtype=bool)
    for key, value in host.node_selector:
        bad |= ~view.names.label_matches(key, value)[view.at]
    return bad


def _untolerated(view: NodeView, host: HostDemand) -> BoolArray | None:
    """Nodes carrying a taint the request does not tolerate."""
    bad: BoolArray | None = None
    for taint, carried in view.names.node_taints():
        if not host.tolerates(taint):
            on = carried[view.at]
            bad = on if bad is None else bad | on
    return bad


def _beside_sibling(view: NodeView, apart: Apart) -> BoolArray | None:
    """Nodes holding a part this part must not share a node with."""
    return None if apart.nodes.size == 0 else np.isin(view.rows, apart.nodes)


def _every_sharer_if_exclusive(d: Demand) -> IntArray | int:
    """An exclusive part counts as every sharer a device could hold, so it fits only where there is none yet;
    any other part takes no notice of the sharers."""
    return np.where(d.exclusive, UNLIMITED, 0)


# In the limits, ``v`` is the view (what is used, what may be held) and ``d`` what is judged (what it needs).

MATCH_RULES: tuple[Rule[DeviceView, RequestPart], ...] = (
    Rule(ReasonCode.CARD_VENDOR_MISMATCH, Kind.MATCH, _vendor),
    Rule(ReasonCode.CARD_TYPE_MISMATCH, Kind.MATCH, _model),
    Rule(ReasonCode.CARD_UUID_MISMATCH, Kind.MATCH, _uuid),
    Rule(ReasonCode.CARD_PRECISION_UNSUPPORTED, Kind.MATCH, _precision),
    Rule(ReasonCode.CARD_NUMA_MISMATCH, Kind.MATCH, _numa),
)
# STATE rows judge nothing of what they are given.  Typed ``Any`` rather than ``object`` so that they join any
# other group (``(*STATE_RULES, *FIT_RULES)``): mypy joins rules of two different argument types to ``object``.
STATE_RULES: tuple[Rule[DeviceView, Any], ...] = (
    Rule(ReasonCode.CARD_UNHEALTHY, Kind.STATE, _unhealthy),
    Rule(
        ReasonCode.CARD_EXCLUSIVELY_HELD,
        Kind.STATE,
        limit=Limit("exclusive", lambda v: v.exclusive, lambda d: 0, lambda v: 0),
    ),
    Rule(
        ReasonCode.CARD_SPLIT_EXHAUSTED,
        Kind.STATE,
        limit=Limit("sharers", lambda v: v.sharers, lambda d: 1, lambda v: v.split),
    ),
)
ROUND_RULES: tuple[Rule[DeviceView, Demand], ...] = (
    Rule(ReasonCode.CARD_PARTITION_UNAVAILABLE, Kind.ROUND, _refused, codes=_rounding_codes),
)
FIT_RULES: tuple[Rule[DeviceView, Demand], ...] = (
    Rule(
        ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE,
        Kind.FIT,
        limit=Limit("sharers", lambda v: v.sharers, _every_sharer_if_exclusive, lambda v: UNLIMITED),
    ),
    Rule(
        ReasonCode.CARD_INSUFFICIENT_MEMORY,
        Kind.FIT,
        # a shared grant's context is booked on top of its share: it takes the card's memory too
        limit=Limit("memory", lambda v: v.mem_used, lambda d: d.booked, lambda v: v.mem_cap),
    ),
    Rule(
        ReasonCode.CARD_INSUFFICIENT_CORE,
        Kind.FIT,
        limit=Limit("cores", lambda v: v.cores_used, lambda d: d.cores, lambda v: v.core_cap),
    ),
)

DEVICE_RULES: tuple[Rule[DeviceView, Never], ...] = (*MATCH_RULES, *STATE_RULES, *ROUND_RULES, *FIT_RULES)
"""What one device must satisfy to take one part of a request, in reporting order (mixed arguments: for
listing; evaluate the groups)."""

NODE_RULES: tuple[Rule[NodeView, HostDemand], ...] = (
    Rule(ReasonCode.NODE_SELECTOR_MISMATCH, Kind.MATCH, _unselected),
    Rule(ReasonCode.NODE_TAINT_NOT_TOLERATED, Kind.MATCH, _untolerated),
    Rule(ReasonCode.NODE_UNSCHEDULABLE, Kind.STATE, _unschedulable),
    Rule(
        ReasonCode.NODE_INSUFFICIENT_CPU,
        Kind.FIT,
        limit=Limit("host_cpu_milli", lambda v: v.node_cpu_used, lambda d: d.cpu_milli, lambda v: v.node_cpu_total),
    ),
    Rule(
        ReasonCode.NODE_INSUFFICIENT_MEMORY,
        Kind.FIT,
        limit=Limit("host_memory_mib", lambda v: v.node_mem_used, lambda d: d.memory_mib, lambda v: v.node_mem_total),
    ),
)
"""What the node hosting (a process of) a request must satisfy."""

PART_NODE_RULES: tuple[Rule[NodeView, Apart], ...] = (Rule(ReasonCode.NODE_ANTI_AFFINITY, Kind.MATCH, _beside_sibling),)
"""What the node of one part must satisfy given where the request's other parts went."""

BEFORE_ROUNDING: tuple[Rule[DeviceView, RequestPart], ...] = (*MATCH_RULES, *STATE_RULES)
GRANT_RULES: tuple[Rule[DeviceView, Demand], ...] = (*STATE_RULES, *FIT_RULES)
"""What a given grant must satisfy on a device (booking a placement decided elsewhere)."""

DEVICE_CODES: tuple[ReasonCode, ...] = tuple(r.code for r in DEVICE_RULES)
"""Device reason codes in the order they are reported."""
NODE_CODES: tuple[ReasonCode, ...] = tuple(r.code for r in NODE_RULES)
PART_NODE_CODES: tuple[ReasonCode, ...] = tuple(r.code for r in PART_NODE_RULES)
USAGE_CODES: frozenset[ReasonCode] = frozenset(
    [r.code for r in DEVICE_RULES if r.limit is not None] + [r.code for r in NODE_RULES if r.limit is not None]
)
"""Codes that say what others hold right now: they go away as allocations are released."""
