"""The cluster's columns: one row per device and one per node, kept incrementally in numpy arrays.

Devices live in fixed-width arrays that grow by doubling; a removed device's
row is marked dead and reused by the next device added.  Static facts (memory,
split count, traits figures) and usage (memory and cores granted, sharers,
exclusive holders) sit side by side, named as the placement rules read them
(``hami_devices.rules.columns``), so the rules run over every device of the
cluster at once.  The table also resolves the names a request uses (vendors,
models, uuids) to the ids its columns hold.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hami_devices.accounting import DeviceUsage, device_core_capacity, device_memory_capacity
from hami_devices.errors import InvalidRequest
from hami_devices.models import PRECISIONS, DeviceInfo, Health
from hami_devices.rounding import DefaultRule, GrantRule
from hami_devices.rules import STATE_RULES, DeviceView, model_names, passing
from hami_devices.rules.columns import BoolArray, FloatArray, IntArray
from hami_devices.scheduling.nodes import NodeState, NodeTable
from hami_devices.traits import normalize_model_name

__all__ = ["UNBOUNDED", "NodeState", "Tables"]

UNBOUNDED = 2**62
"""Host CPU or memory of a node whose capacity nobody told us (a node agent's own devices)."""

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
    "context_mib": 0,
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
    "rule": 0,  # index into the table's rules
    "stamp": 0,  # changes whenever the row's usage, health or device changes (keys the plan cache)
}
_FLOAT_FIELDS = {"bandwidth", "link_bw", "cost"}
_BOOL_FIELDS = {"alive", "healthy", "exclusive", "has_traits", "plain"}


class Tables(NodeTable):
    """Nodes and devices as columns; what is booked on them is kept by ``ClusterState``.

    ``rules`` maps a vendor to its ``GrantRule`` (the vendor adapter): how a part is
    rounded onto that vendor's devices and how much of them may be granted.  Devices
    of other vendors use ``DefaultRule(memory_overcommit, core_capacity)``.
    """

    # declared for type checkers; set by _grow
    alive: BoolArray
    node: IntArray
    vendor: IntArray
    model: IntArray
    numa: IntArray
    healthy: BoolArray
    mem_total: IntArray
    mem_used: IntArray
    mem_cap: IntArray  # mem_total x the rule's memory factor
    core_cap: IntArray  # the rule's core capacity
    context_mib: IntArray  # MiB one context of the model takes beside a shared grant (DeviceInfo.context_mib)
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
    tflops: FloatArray

    def __init__(
        self,
        memory_overcommit: float = 1.0,
        rules: Mapping[str, GrantRule] | None = None,
        *,
        core_capacity: int = 100,
    ) -> None:
        if memory_overcommit <= 0:
            raise InvalidRequest("memory_overcommit", "must be > 0")
        super().__init__()
        self.memory_overcommit = memory_overcommit
        self.default_rule: GrantRule = DefaultRule(memory_overcommit, core_capacity)
        self.vendor_rules: dict[str, GrantRule] = dict(rules or {})
        self.rules: list[GrantRule] = [self.default_rule]
        self._rule_index: dict[int, int] = {id(self.default_rule): 0}
        self.usage: list[DeviceUsage] = []  # per row: what the bookings hold, as the rules see it
        self._stamps = itertools.count(1)
        self._model_names: dict[int, set[str]] = {}  # model id -> every name a request may use for it
        self.infos: list[DeviceInfo | None] = []
        self.uuid_index: dict[str, int] = {}
        self._free_rows: list[int] = []
        self._cap = 0
        self.size = 0  # rows in use (alive or dead)
        self.vendors: list[str] = []
        self.models: list[str] = []
        self._vendor_id: dict[str, int] = {}
        self._model_id: dict[str, int] = {}
        self.version = 0
        self.layout_version = 0  # bumped when a device row is added or removed (static columns change)
        self._pairs: dict[tuple[int, int], float] = {}  # topology pair scores by device rows
        self._ready = np.zeros(0, dtype=bool)
        self._unsettled: list[int] = []  # rows whose ``ready`` must be derived again
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
        self.tflops = tflops
        ready = np.zeros(cap, dtype=bool)
        ready[: self._ready.size] = self._ready
        self._ready = ready
        self._cap = cap

    @property
    def ready(self) -> BoolArray:
        """Per row: alive, on a schedulable node, and passing every ``STATE`` rule of the rule table.

        Derived from the rules for the rows that changed since it was last read, so the engine's
        filter reads one column instead of running the STATE rows over the cluster per request.
        """
        if self._unsettled:
            rows = np.unique(np.array(self._unsettled, dtype=np.int64))
            self._unsettled.clear()
            nodes = self.node[rows]
            ok = self.alive[rows] & (nodes >= 0) & self.node_ok[np.maximum(nodes, 0)]
            self._ready[rows] = ok & passing(STATE_RULES, self.view(rows), None)
        return self._ready

    def _refresh(self, row: int) -> None:
        """A row's fields changed: its ``ready`` is derived again, and its stamp and node version move."""
        self._unsettled.append(row)
        self.stamp[row] = next(self._stamps)
        node = int(self.node[row])
        if node >= 0:
            self.node_version[node] += 1

    def _refresh_node(self, node_name: str) -> None:
        for row in self.nodes[node_name].devices:
            self._refresh(row)

    # ------------------------------------------------------------------ the rules' view
    def view(self, at: IntArray | slice | None = None) -> DeviceView:
        """The device columns at rows ``at`` (default: every row in use), as the rules read them."""
        at = slice(0, self.size) if at is None else at
        return DeviceView(
            at=at, names=self, vendor=self.vendor[at], model=self.model[at], numa=self.numa[at],
            has_traits=self.has_traits[at], tflops=self.tflops[at], healthy=self.healthy[at],
            exclusive=self.exclusive[at], sharers=self.sharers[at], split=self.split[at],
            mem_total=self.mem_total[at], mem_used=self.mem_used[at], mem_cap=self.mem_cap[at],
            cores_used=self.cores_used[at], core_cap=self.core_cap[at], context_mib=self.context_mib[at],
        )

    def vendor_ids(self, names: Sequence[str]) -> list[int]:
        return [self._vendor_id.get(n.lower(), -2) for n in names]

    def model_ids_matching(self, names: Sequence[str]) -> list[int]:
        """Model ids whose devices answer to any of ``names`` (their model, catalog name or aliases)."""
        wanted = {normalize_model_name(n) for n in names}
        return [mid for mid, known in self._model_names.items() if known & wanted]

    def uuid_rows(self, uuids: Sequence[str]) -> list[int]:
        return [self.uuid_index[u] for u in uuids if u in self.uuid_index]

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

    @staticmethod
    def _intern(table: dict[str, int], names: list[str], value: str, key: str) -> int:
        if key not in table:
            table[key] = len(names)
            names.append(value)
        return table[key]

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
            self._row_added()
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
        self._model_names.setdefault(int(self.model[row]), set()).update(model_names(info))
        rule_index = self._rule_for(info.vendor)
        rule = self.rules[rule_index]
        self.rule[row] = rule_index
        self.plain[row] = rule.plain_shares(info)
        self.usage[row] = DeviceUsage()
        self.numa[row] = -1 if info.numa_node is None else info.numa_node
        self.healthy[row] = info.healthy
        self.mem_total[row] = info.memory_mib
        self.mem_used[row] = 0
        self.mem_cap[row] = device_memory_capacity(info, rule.memory_factor)
        self.core_cap[row] = device_core_capacity(info, rule.core_capacity)
        self.context_mib[row] = info.context_mib
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

    def _nodes_with_devices(self) -> BoolArray:
        carried = np.zeros(len(self.node_names), dtype=bool)
        rows = self.live_rows()
        carried[self.node[rows]] = True
        return carried

    def _devices_key(self) -> int:
        return self.layout_version

    def _row_added(self) -> None:
        """A new row exists (subclasses keep per-row state beside the columns)."""

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
        return self.free_share_after(rows, 0, 0)

    def free_share_after(self, rows: IntArray, memory: IntArray | int, cores: IntArray | int) -> IntArray:
        """Free share of each device in thousandths once it also gives ``memory`` MiB and ``cores``."""
        mem_free = 1.0 - (self.mem_used[rows] + memory) / np.maximum(self.mem_capacity(rows), 1)
        cores_free = 1.0 - (self.cores_used[rows] + cores) / np.maximum(self.core_cap[rows], 1)
        share = np.minimum(mem_free, cores_free)
        share = np.where(self.exclusive[rows] | ~self.healthy[rows], 0.0, share)
        return np.clip(np.floor(share * 1000 + 1e-9), 0, 1000).astype(np.int64)

    # ------------------------------------------------------------------ topology
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
