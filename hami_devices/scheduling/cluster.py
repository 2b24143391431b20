"""Cluster state for the scoring engine, kept incrementally in numpy arrays.

A scheduler builds one ``ClusterState`` and then tells it what happens: a node
joins or leaves, a device turns unhealthy, a placement is assumed (optimistic,
before binding), confirmed, or forgotten.  Each event touches only the rows it
concerns; nothing is rebuilt.

Devices live in fixed-width arrays that grow by doubling; a removed device's
row is marked dead and reused by the next device added.  Static facts
(memory, split count, traits figures) and usage (memory and cores granted,
sharers, exclusive holders) sit side by side so that the engine can filter
and score every device of the cluster with a handful of vector operations.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from hami_devices.accounting import DeviceUsage, planned_grant, rejection_reasons
from hami_devices.errors import HamiError, InvalidRequest, ReasonCode, UnknownAllocation
from hami_devices.matching import model_names
from hami_devices.models import PRECISIONS, DeviceHandle, DeviceInfo, Grant, Health, RequestPart, ResourceRequest
from hami_devices.rounding import DefaultRule, GrantRule
from hami_devices.traits import normalize_model_name

UNBOUNDED = 2**62
"""Host CPU or memory of a node whose capacity nobody told us (a node agent's own devices)."""

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_DEVICE_FIELDS: dict[str, Any] = {
    "alive": False,
    "node": -1,
    "vendor": -1,
    "model": -1,
    "numa": -1,
    "healthy": False,
    "mem_total": 0,
    "mem_used": 0,
    "mem_cap": 0,
    "core_cap": 100,
    "cores_used": 0,
    "sharers": 0,
    "split": 1,
    "exclusive": False,
    "bandwidth": 0.0,
    "link_bw": 0.0,
    "cost": 1.0,
    "year": 0,
    "has_traits": False,
    "plain": True,  # the device's rule gives a part without a partition the plain share (see GrantRule)
    "rule": 0,  # index into ClusterState.rules
    "stamp": 0,  # changes whenever the row's usage, health or device changes (keys the plan cache)
    # Derived, kept up to date by ``_refresh`` on every event that touches a row, so the
    # engine's filter reads them instead of recombining the fields above per request:
    "ready": False,  # alive, healthy, schedulable node, not held exclusively, a sharer slot left
    "mem_free": 0,  # mem_cap - mem_used
}
_FLOAT_FIELDS = {"bandwidth", "link_bw", "cost"}
_BOOL_FIELDS = {"alive", "healthy", "exclusive", "has_traits", "ready", "plain"}


PLAN_MEMOS = 256
"""Parts whose per-row plans ``plan_rows`` keeps as arrays (least recently used dropped first)."""


@dataclass
class PlanMemo:
    """``ClusterState.planned`` for one part over many rows, as arrays indexed by device row.

    An entry is current when ``stamp[row] == cluster.stamp[row]``; ``plan_rows`` makes the
    rows it is given current.  ``ok``: the rule granted; then ``memory``/``cores`` and
    ``grants[row]`` are the grant, else ``first[row]`` is its first reason code.
    """

    layout: int
    stamp: IntArray
    ok: BoolArray
    memory: IntArray
    cores: IntArray
    first: npt.NDArray[np.object_]
    grants: dict[int, Grant] = field(default_factory=dict)

    @classmethod
    def empty(cls, layout: int, size: int) -> PlanMemo:
        return cls(layout, np.full(size, -1, dtype=np.int64), np.zeros(size, dtype=bool),
                   np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64), np.full(size, None, dtype=object))


class PlacementState(StrEnum):
    ASSUMED = "assumed"
    CONFIRMED = "confirmed"


@dataclass
class NodeState:
    name: str
    cpu_milli: int
    memory_mib: int
    labels: dict[str, str]
    devices: list[int] = field(default_factory=list)  # device rows
    cpu_used: int = 0
    memory_used: int = 0
    schedulable: bool = True


@dataclass
class Booking:
    """What one placement holds in the cluster (the engine's ``Placement`` carries the why).

    ``node`` hosts the task; ``host_nodes`` are every node charged the host CPU and
    memory, once each (a placement split over nodes runs a process on each).
    """

    id: str
    node: str
    grants: list[Grant]
    host_cpu_milli: int
    host_memory_mib: int
    preemptible: bool
    state: PlacementState
    request: ResourceRequest | None = None
    host_nodes: tuple[str, ...] = ()


class ClusterState:
    """Nodes, devices and what the bookings hold, as arrays.

    ``rules`` maps a vendor to its ``GrantRule`` (the vendor adapter): how a part is
    rounded onto that vendor's devices and how much of them may be granted.  Devices
    of other vendors use ``DefaultRule(memory_overcommit, core_capacity)``.
    """

    def __init__(
        self,
        memory_overcommit: float = 1.0,
        rules: Mapping[str, GrantRule] | None = None,
        *,
        core_capacity: int = 100,
    ) -> None:
        if memory_overcommit <= 0:
            raise InvalidRequest("memory_overcommit", "must be > 0")
        self.memory_overcommit = memory_overcommit
        self.default_rule: GrantRule = DefaultRule(memory_overcommit, core_capacity)
        self.vendor_rules: dict[str, GrantRule] = dict(rules or {})
        self.rules: list[GrantRule] = [self.default_rule]
        self._rule_index: dict[int, int] = {id(self.default_rule): 0}
        self.usage: list[DeviceUsage] = []  # per row: what the bookings hold, as the accounting rules see it
        self._plans: list[dict[tuple[str, int], tuple[int, Grant | list[ReasonCode]]]] = []
        self._stamps = itertools.count(1)
        self._plan_memos: OrderedDict[tuple[str, int], PlanMemo] = OrderedDict()
        self._last_rows: tuple[tuple[Any, ...], IntArray] | None = None
        self._model_names: dict[int, set[str]] = {}  # model id -> every name a request may use for it
        self.nodes: dict[str, NodeState] = {}
        self._node_names: list[str] = []  # node row -> name ("" when removed)
        self._node_index: dict[str, int] = {}
        self.node_cpu_free = np.zeros(0, dtype=np.int64)
        self.node_mem_free = np.zeros(0, dtype=np.int64)
        self.node_cpu_total = np.zeros(0, dtype=np.int64)
        self.node_mem_total = np.zeros(0, dtype=np.int64)
        self.node_ok = np.zeros(0, dtype=bool)
        # Bumped whenever anything about a node (its devices' usage or health, its host usage,
        # whether it is schedulable) changes, so per-node work can be cached between decisions.
        self.node_version = np.zeros(0, dtype=np.int64)
        self.infos: list[DeviceInfo | None] = []
        self.uuid_index: dict[str, int] = {}
        self._free_rows: list[int] = []
        self._cap = 0
        self.size = 0  # rows in use (alive or dead)
        self.vendors: list[str] = []
        self.models: list[str] = []
        self._vendor_id: dict[str, int] = {}
        self._model_id: dict[str, int] = {}
        self.bookings: dict[str, Booking] = {}
        self.version = 0
        self.layout_version = 0  # bumped when a device row is added or removed (static columns change)
        self._ids = itertools.count(1)
        self._name_rank: IntArray | None = None  # node row -> rank of its name (tie-breaks)
        self._label_columns: dict[str, tuple[dict[str, int], IntArray]] = {}  # label key -> value ids per node row
        self._pairs: dict[tuple[int, int], float] = {}  # topology pair scores by device rows
        self._grow(64)

    # ------------------------------------------------------------------ arrays
    def _grow(self, need: int) -> None:
        if need <= self._cap:
            return
        cap = max(need, 2 * self._cap, 64)
        for name, default in _DEVICE_FIELDS.items():
            dtype: Any = np.float64 if name in _FLOAT_FIELDS else bool if name in _BOOL_FIELDS else np.int64
            new = np.full(cap, default, dtype=dtype)
            if self._cap:
                new[: self._cap] = getattr(self, name)
            setattr(self, name, new)
        tflops = np.zeros((cap, len(PRECISIONS)))
        if self._cap:
            tflops[: self._cap] = self.tflops
        self.tflops: FloatArray = tflops
        self._cap = cap

    # declared for type checkers; set by _grow
    alive: BoolArray
    node: IntArray
    vendor: IntArray
    model: IntArray
    numa: IntArray
    healthy: BoolArray
    mem_total: IntArray
    mem_used: IntArray
    mem_cap: IntArray  # mem_total x the rule's memory factor, kept so scoring never recomputes it
    core_cap: IntArray  # the rule's core capacity
    cores_used: IntArray
    sharers: IntArray
    split: IntArray
    exclusive: BoolArray
    bandwidth: FloatArray
    link_bw: FloatArray
    cost: FloatArray
    year: IntArray
    has_traits: BoolArray
    plain: BoolArray
    rule: IntArray
    stamp: IntArray
    ready: BoolArray
    mem_free: IntArray

    def _refresh(self, row: int) -> None:
        """Recompute the derived columns of one row after its fields changed."""
        self.ready[row] = bool(
            self.alive[row]
            and self.healthy[row]
            and not self.exclusive[row]
            and self.sharers[row] < self.split[row]
            and self.node_ok[self.node[row]]
        )
        self.mem_free[row] = self.mem_cap[row] - self.mem_used[row]
        self.stamp[row] = next(self._stamps)
        if self.node[row] >= 0:
            self.node_version[self.node[row]] += 1

    def _refresh_node(self, node_name: str) -> None:
        for row in self.nodes[node_name].devices:
            self._refresh(row)

    def _intern(self, table: dict[str, int], names: list[str], value: str, key: str) -> int:
        if key not in table:
            table[key] = len(names)
            names.append(value)
        return table[key]

    def vendor_id(self, name: str) -> int:
        return self._vendor_id.get(name.lower(), -2)

    def model_id(self, name: str) -> int:
        return self._model_id.get(normalize_model_name(name), -2)

    def model_ids_matching(self, names: Sequence[str]) -> list[int]:
        """Model ids whose devices answer to any of ``names`` (as ``matching.static_reasons`` decides)."""
        wanted = {normalize_model_name(n) for n in names}
        return [mid for mid, known in self._model_names.items() if known & wanted]

    def knows_vendor(self, name: str) -> bool:
        return name.lower() in self._vendor_id

    def knows_model(self, name: str) -> bool:
        return bool(self.model_ids_matching([name]))

    def rule_of(self, row: int) -> GrantRule:
        return self.rules[int(self.rule[row])]

    def _rule_for(self, vendor: str) -> int:
        rule = self.vendor_rules.get(vendor, self.default_rule)
        key = id(rule)
        if key not in self._rule_index:
            self._rule_index[key] = len(self.rules)
            self.rules.append(rule)
        return self._rule_index[key]

    def planned(self, row: int, part: RequestPart, part_key: str, part_index: int) -> Grant | list[ReasonCode]:
        """The device's rule and the accounting rules applied to ``part`` on ``row`` now (cached per row state).

        This is ``accounting.planned_grant`` (what the allocator commits), called for
        devices the engine cannot evaluate over arrays.
        """
        cache = self._plans[row]
        key = (part_key, part_index)
        stamp = int(self.stamp[row])
        hit = cache.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        result = planned_grant(self.info(row), self.rule_of(row), part, part_index, self.usage[row])
        cache[key] = (stamp, result)
        return result

    def plan_rows(self, rows: IntArray, part: RequestPart, part_key: str, part_index: int) -> PlanMemo:
        """``planned`` for each of ``rows``, as arrays: only rows whose stamp moved since the part was last
        planned there are asked again, so a decision over thousands of rule-planned devices costs a few
        vector operations plus the devices that changed."""
        key = (part_key, part_index)
        memo = self._plan_memos.get(key)
        if memo is None or memo.layout != self.layout_version or memo.stamp.size < self._cap:
            # A new layout may put another device on a row: nothing remembered for it holds.
            memo = self._plan_memos[key] = PlanMemo.empty(self.layout_version, self._cap)
            while len(self._plan_memos) > PLAN_MEMOS:
                self._plan_memos.popitem(last=False)
        else:
            self._plan_memos.move_to_end(key)
        stale = rows[memo.stamp[rows] != self.stamp[rows]]
        for row in stale.tolist():
            result = self.planned(row, part, part_key, part_index)
            memo.stamp[row] = self.stamp[row]
            if isinstance(result, Grant):
                memo.ok[row] = True
                memo.memory[row] = result.memory_mib
                memo.cores[row] = result.cores
                memo.grants[row] = result
            else:
                memo.ok[row] = False
                memo.first[row] = result[0] if result else None
                memo.grants.pop(row, None)
        return memo

    # ------------------------------------------------------------------ nodes
    def add_node(
        self,
        name: str,
        cpu_milli: int,
        memory_mib: int,
        devices: Sequence[DeviceInfo] = (),
        labels: Mapping[str, str] | None = None,
    ) -> None:
        if name in self.nodes:
            raise InvalidRequest("node", f"node {name!r} already in the cluster")
        if cpu_milli < 0 or memory_mib < 0:
            raise InvalidRequest("node", f"node {name!r}: negative CPU or memory")
        row = len(self._node_names)
        self._node_names.append(name)
        self._node_index[name] = row
        self.node_cpu_free = np.append(self.node_cpu_free, cpu_milli)
        self.node_mem_free = np.append(self.node_mem_free, memory_mib)
        self.node_cpu_total = np.append(self.node_cpu_total, cpu_milli)
        self.node_mem_total = np.append(self.node_mem_total, memory_mib)
        self.node_ok = np.append(self.node_ok, True)
        self.node_version = np.append(self.node_version, 0)
        self.nodes[name] = NodeState(name, cpu_milli, memory_mib, dict(labels or {}))
        self._name_rank = None
        self._label_columns.clear()
        for info in devices:
            self.add_device(name, info)
        self.version += 1

    def add_node_spec(self, spec: Any) -> None:
        """Add an inventory ``NodeSpec`` (name, cpu_milli, memory_mib, labels, devices)."""
        self.add_node(spec.name, spec.cpu_milli, spec.memory_mib, spec.devices, spec.labels)

    def remove_node(self, name: str) -> list[Booking]:
        """Remove a node and its devices; returns the bookings that were on it (now forgotten)."""
        node = self._node(name)
        dropped = [
            b
            for b in self.bookings.values()
            if name in (b.host_nodes or (b.node,)) or any(g.node == name for g in b.grants)
        ]
        for booking in dropped:
            self.forget(booking.id)
        for row in list(node.devices):
            self._remove_row(row)
        row = self._node_index.pop(name)
        self._node_names[row] = ""
        self.node_ok[row] = False
        self.node_version[row] += 1
        self._name_rank = None
        del self.nodes[name]
        self.version += 1
        return dropped

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        self._node(name).schedulable = schedulable
        self.node_ok[self._node_index[name]] = schedulable
        self.node_version[self._node_index[name]] += 1
        self._refresh_node(name)
        self.version += 1

    def node_row(self, name: str) -> int:
        return self._node_index[name]

    def node_rows(self, names: Sequence[str]) -> IntArray:
        """The row of each named node; -1 for a name the cluster does not know.

        The last answer is kept: schedulers ask about the same list of nodes decision after decision.
        Rows only change when nodes come or go, which changes one of the two lengths in the key.
        """
        key = (tuple(names), len(self._node_names), len(self.nodes))
        if self._last_rows is not None and self._last_rows[0] == key:
            return self._last_rows[1]
        rows = np.fromiter(map(self._node_index.get, names, itertools.repeat(-1)), dtype=np.int64, count=len(names))
        rows.flags.writeable = False  # shared with later callers
        self._last_rows = (key, rows)
        return rows

    def node_name(self, row: int) -> str:
        return self._node_names[row]

    def name_rank(self) -> IntArray:
        """Rank of each node row's name in sorted order (removed rows rank last)."""
        if self._name_rank is None or len(self._name_rank) != len(self._node_names):
            order = sorted(range(len(self._node_names)), key=lambda i: (self._node_names[i] == "", self._node_names[i]))
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            self._name_rank = rank
        return self._name_rank

    def label_matches(self, key: str, value: str) -> BoolArray:
        """Per node row: does the node carry label ``key`` with ``value``?  (An array per key, kept.)"""
        column = self._label_columns.get(key)
        if column is None:
            ids: dict[str, int] = {}
            values = np.full(len(self._node_names), -1, dtype=np.int64)
            for row, name in enumerate(self._node_names):
                state = self.nodes.get(name)
                if state is not None and key in state.labels:
                    values[row] = ids.setdefault(state.labels[key], len(ids))
            column = self._label_columns[key] = (ids, values)
        ids, values = column
        return values == ids.get(value, -2)  # type: ignore[no-any-return]

    def pair_matrix(self, rows: Sequence[int]) -> FloatArray:
        """Topology pair scores (0..100) among ``rows``; the diagonal is 0."""
        k = len(rows)
        out = np.zeros((k, k))
        for i in range(k):
            for j in range(i + 1, k):
                out[i, j] = out[j, i] = self.pair_score(rows[i], rows[j])
        return out

    def pair_score(self, a: int, b: int) -> float:
        """Topology pair score of device rows ``a`` and ``b`` as ``a`` reports it (else ``b``; else 0), cached."""
        key = (a, b)
        score = self._pairs.get(key)
        if score is None:
            info_a, info_b = self.info(a), self.info(b)
            found = info_a.topology.get(info_b.uuid)
            score = self._pairs[key] = float(info_b.topology.get(info_a.uuid, 0) if found is None else found)
        return score

    @property
    def node_names(self) -> list[str]:
        return self._node_names

    def _node(self, name: str) -> NodeState:
        try:
            return self.nodes[name]
        except KeyError:
            raise InvalidRequest("node", f"unknown node {name!r}") from None

    # ------------------------------------------------------------------ devices
    def add_device(self, node_name: str, info: DeviceInfo) -> int:
        node = self._node(node_name)
        if info.uuid in self.uuid_index:
            raise InvalidRequest("uuid", f"device {info.uuid!r} already in the cluster")
        if self._free_rows:
            row = self._free_rows.pop()
        else:
            self._grow(self.size + 1)
            row = self.size
            self.size += 1
            self.infos.append(None)
            self.usage.append(DeviceUsage())
            self._plans.append({})
        if info.node != node_name:
            info = info.model_copy(update={"node": node_name})
        self.infos[row] = info
        self.uuid_index[info.uuid] = row
        self._pairs.clear()
        node.devices.append(row)
        self.alive[row] = True
        self.node[row] = self._node_index[node_name]
        self.vendor[row] = self._intern(self._vendor_id, self.vendors, info.vendor, info.vendor.lower())
        self.model[row] = self._intern(self._model_id, self.models, info.model, normalize_model_name(info.model))
        # Catalog names and aliases resolve to the same model id, so a request may use any of them.
        for alias in [info.traits.model, *info.traits.aliases] if info.traits else []:
            self._model_id.setdefault(normalize_model_name(alias), int(self.model[row]))
        self._model_names.setdefault(int(self.model[row]), set()).update(model_names(info))
        rule_index = self._rule_for(info.vendor)
        rule = self.rules[rule_index]
        self.rule[row] = rule_index
        self.plain[row] = rule.plain_shares(info)
        self.usage[row] = DeviceUsage()
        self._plans[row] = {}
        self.numa[row] = -1 if info.numa_node is None else info.numa_node
        self.healthy[row] = info.healthy
        self.mem_total[row] = info.memory_mib
        self.mem_used[row] = 0
        self.mem_cap[row] = int(info.memory_mib * rule.memory_factor)
        self.core_cap[row] = rule.core_capacity
        self.cores_used[row] = 0
        self.sharers[row] = 0
        self.split[row] = info.split_count
        self.exclusive[row] = False
        traits = info.traits
        self.has_traits[row] = traits is not None
        self.tflops[row] = [traits.peak_tflops.get(p, 0.0) if traits else 0.0 for p in PRECISIONS]
        self.bandwidth[row] = traits.memory_bandwidth_gbps if traits else 0.0
        self.link_bw[row] = traits.interconnect.bandwidth_gbps if traits else 0.0
        self.cost[row] = traits.relative_cost if traits else 1.0
        self.year[row] = traits.year if traits else 0
        self._refresh(row)
        self.layout_version += 1
        self.version += 1
        return row

    def _remove_row(self, row: int) -> None:
        info = self.infos[row]
        assert info is not None
        node = self.nodes[info.node]
        node.devices.remove(row)
        del self.uuid_index[info.uuid]
        self.infos[row] = None
        self._pairs.clear()
        self.alive[row] = False
        self.healthy[row] = False
        self._refresh(row)
        self.layout_version += 1
        self._free_rows.append(row)

    def set_health(self, uuid: str, health: Health | str, reason: str | None = None) -> None:
        row = self.row(uuid)
        health = Health(health)
        info = self.infos[row]
        assert info is not None
        self.infos[row] = info.model_copy(update={"health": health, "health_reason": reason})
        self.healthy[row] = health == Health.HEALTHY
        self._refresh(row)
        self.version += 1

    def row(self, uuid: str) -> int:
        try:
            return self.uuid_index[uuid]
        except KeyError:
            raise InvalidRequest("uuid", f"unknown device {uuid!r}") from None

    def info(self, row: int) -> DeviceInfo:
        info = self.infos[row]
        if info is None:
            raise InvalidRequest("device", f"device row {row} was removed")
        return info

    def rows_of(self, node_name: str) -> list[int]:
        return list(self._node(node_name).devices)

    def live_rows(self) -> IntArray:
        if not self._free_rows:  # no holes: every row in use is alive
            return np.arange(self.size)
        return np.flatnonzero(self.alive[: self.size])

    def live_index(self) -> IntArray | slice:
        """Like ``live_rows`` but a slice when there are no holes, so that reads are views, not copies."""
        return slice(0, self.size) if not self._free_rows else self.live_rows()

    def mem_capacity(self, rows: IntArray | slice | None = None) -> IntArray:
        return self.mem_cap[slice(0, self.size) if rows is None else rows]

    def free_share_milli(self, rows: IntArray) -> IntArray:
        """Free share of each device in thousandths: the scarcer of memory and cores."""
        mem = 1.0 - self.mem_used[rows] / np.maximum(self.mem_capacity(rows), 1)
        cores = 1.0 - self.cores_used[rows] / np.maximum(self.core_cap[rows], 1)
        share = np.minimum(mem, cores)
        share = np.where(self.exclusive[rows] | ~self.healthy[rows], 0.0, share)
        return np.clip(np.floor(share * 1000 + 1e-9), 0, 1000).astype(np.int64)

    # ------------------------------------------------------------------ bookings
    def assume(
        self,
        node: str,
        grants: Iterable[Grant],
        *,
        host_cpu_milli: int = 0,
        host_memory_mib: int = 0,
        preemptible: bool = False,
        request: ResourceRequest | None = None,
        booking_id: str | None = None,
        state: PlacementState = PlacementState.ASSUMED,
    ) -> Booking:
        """Book a placement optimistically; every grant is checked by the accounting rules first.

        Host CPU and memory are charged once on ``node`` and once on every other node a
        grant lands on.
        """
        grants = list(grants)
        self._node(node)
        rows = [self.row(g.uuid) for g in grants]
        if len(set(rows)) != len(rows):
            raise InvalidRequest("grants", "a device appears twice in one placement")
        host_nodes = tuple(dict.fromkeys([node, *(g.node for g in grants)]))
        for name in host_nodes:
            nrow = self._node_index[self._node(name).name]
            if host_cpu_milli > self.node_cpu_free[nrow] or host_memory_mib > self.node_mem_free[nrow]:
                raise HamiError(f"node {name!r} lacks the host CPU or memory for this placement")
        for row, grant in zip(rows, grants, strict=True):
            problems = rejection_reasons(
                self.info(row),
                self.usage[row],
                grant,
                memory_overcommit=self.rule_of(row).memory_factor,
                core_capacity=int(self.core_cap[row]),
            )
            if problems:
                raise HamiError(f"device {grant.uuid!r} cannot take this grant: {', '.join(problems)}")
        booking = Booking(
            id=booking_id or f"p{next(self._ids)}",
            node=node,
            grants=grants,
            host_cpu_milli=host_cpu_milli,
            host_memory_mib=host_memory_mib,
            preemptible=preemptible,
            state=state,
            request=request,
            host_nodes=host_nodes,
        )
        if booking.id in self.bookings:
            raise InvalidRequest("id", f"placement {booking.id!r} already booked")
        for row, grant in zip(rows, grants, strict=True):
            self.mem_used[row] += grant.memory_mib
            self.cores_used[row] += grant.cores
            self.sharers[row] += 1
            self.exclusive[row] |= grant.exclusive
            self.usage[row] = self.usage[row].plus(grant)
            self._refresh(row)
        for name in host_nodes:
            self._charge_host(name, host_cpu_milli, host_memory_mib)
        self.bookings[booking.id] = booking
        self.version += 1
        return booking

    def rebook(
        self,
        booking: Booking,
        node: str | None = None,
        grants: Iterable[Grant] | None = None,
        *,
        state: PlacementState | None = None,
    ) -> Booking:
        """Book a forgotten ``booking`` again: its id, request, host charge and state, where it was or,
        given ``node`` and ``grants``, moved there."""
        return self.assume(
            node or booking.node,
            booking.grants if grants is None else grants,
            host_cpu_milli=booking.host_cpu_milli,
            host_memory_mib=booking.host_memory_mib,
            preemptible=booking.preemptible,
            request=booking.request,
            booking_id=booking.id,
            state=booking.state if state is None else state,
        )

    def _charge_host(self, name: str, cpu_milli: int, memory_mib: int) -> None:
        nrow = self._node_index[name]
        self.node_version[nrow] += 1
        self.node_cpu_free[nrow] -= cpu_milli
        self.node_mem_free[nrow] -= memory_mib
        self.nodes[name].cpu_used += cpu_milli
        self.nodes[name].memory_used += memory_mib

    def book(self, handle: DeviceHandle, *, node: str | None = None) -> Booking:
        """Mirror an allocation of the ledger (confirmed); the booking id is the handle id.

        ``node`` hosts the task (default: the node of its first grant).
        """
        request = handle.request
        host = node or (handle.grants[0].node if handle.grants else None)
        if host is None:
            raise InvalidRequest("node", f"allocation {handle.id} has no grants: say which node hosts it")
        return self.assume(
            host,
            handle.grants,
            host_cpu_milli=request.host_cpu_milli,
            host_memory_mib=request.host_memory_mib,
            preemptible=request.preemptible,
            request=request,
            booking_id=handle.id,
            state=PlacementState.CONFIRMED,
        )

    def unbook(self, handle: DeviceHandle | str) -> Booking:
        """Forget a mirrored allocation after its release."""
        return self.forget(handle if isinstance(handle, str) else handle.id)

    def sync(self, handles: Iterable[DeviceHandle]) -> None:
        """Make the confirmed bookings exactly ``handles`` (a ledger's, after a restart or a missed event).

        Assumed placements that are not yet in the ledger are kept.
        """
        live = {h.id: h for h in handles}
        for booking in list(self.bookings.values()):
            if booking.state == PlacementState.CONFIRMED and booking.id not in live:
                self.forget(booking.id)
        for handle_id, handle in live.items():
            held = self.bookings.get(handle_id)
            if held is None:
                self.book(handle)
            else:
                held.state = PlacementState.CONFIRMED

    def confirm(self, booking_id: str) -> Booking:
        booking = self._booking(booking_id)
        booking.state = PlacementState.CONFIRMED
        self.version += 1
        return booking

    def forget(self, booking_id: str) -> Booking:
        """Release a placement (assumed or confirmed) exactly; unknown ids raise."""
        booking = self.bookings.pop(booking_id, None)
        if booking is None:
            raise UnknownAllocation(booking_id)
        for grant in booking.grants:
            row = self.uuid_index.get(grant.uuid)
            if row is None:  # device removed meanwhile
                continue
            self.mem_used[row] -= grant.memory_mib
            self.cores_used[row] -= grant.cores
            self.sharers[row] -= 1
            if grant.exclusive:
                self.exclusive[row] = False
            self.usage[row] = self.usage[row].minus(grant)
            self._refresh(row)
        for name in booking.host_nodes or (booking.node,):
            if name in self.nodes:
                self._charge_host(name, -booking.host_cpu_milli, -booking.host_memory_mib)
        self.version += 1
        return booking

    def _booking(self, booking_id: str) -> Booking:
        try:
            return self.bookings[booking_id]
        except KeyError:
            raise UnknownAllocation(booking_id) from None

    # ------------------------------------------------------------------ views
    def whole_free_devices(self) -> int:
        """Healthy devices with nothing granted on them."""
        live = self.live_rows()
        return int((self.healthy[live] & (self.sharers[live] == 0)).sum())

    def usage_of(self, uuid: str) -> DeviceUsage:
        """What the bookings hold on one device, in the accounting rules' terms."""
        return self.usage[self.row(uuid)]

    @classmethod
    def from_inventory(
        cls, inventory: Any, memory_overcommit: float = 1.0, rules: Mapping[str, GrantRule] | None = None
    ) -> ClusterState:
        """Build from an ``Inventory`` (anything with ``.nodes`` of NodeSpec).

        ``rules``: the vendor adapters (``VendorRegistry.adapters``), so the engine rounds
        and caps each vendor's devices exactly as its adapter does.  ``Engine.from_config``
        does this for you.
        """
        state = cls(memory_overcommit, rules)
        for spec in inventory.nodes:
            state.add_node_spec(spec)
        return state

    @classmethod
    def from_devices(cls, devices: Sequence[Any], handles: Iterable[DeviceHandle] = ()) -> ClusterState:
        """Build from ``Device`` objects (``hd.discover``) and the allocations holding them.

        Each device's adapter is its rule.  A node's host CPU and memory come from the
        devices' ``host`` (set for inventory devices); a node nobody described has
        unbounded host resources.  Allocations are booked as confirmed, on the devices
        given; grants on other devices are ignored.
        """
        state = cls(rules={d.info.vendor: d.adapter for d in devices})
        by_node: dict[str, list[Any]] = {}
        for device in devices:
            by_node.setdefault(device.info.node, []).append(device)
        for name, members in by_node.items():
            host = next((d.host for d in members if getattr(d, "host", None) is not None), None)
            cpu, memory = (host.cpu_milli, host.memory_mib) if host is not None else (UNBOUNDED, UNBOUNDED)
            labels = host.labels if host is not None else {}
            state.add_node(name, cpu, memory, [d.info for d in members], labels)
        for handle in handles:
            grants = [g for g in handle.grants if g.uuid in state.uuid_index]
            if grants:
                state.book(handle.model_copy(update={"grants": grants}))
        return state

