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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from hami_devices.errors import HamiError, InvalidRequest, UnknownAllocation
from hami_devices.models import PRECISIONS, DeviceInfo, Grant, Health, ResourceRequest
from hami_devices.traits import normalize_model_name

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
    "cores_used": 0,
    "sharers": 0,
    "split": 1,
    "exclusive": False,
    "bandwidth": 0.0,
    "link_bw": 0.0,
    "cost": 1.0,
    "year": 0,
    "has_traits": False,
    # Derived, kept up to date by ``_refresh`` on every event that touches a row, so the
    # engine's filter reads them instead of recombining the fields above per request:
    "ready": False,  # alive, healthy, schedulable node, not held exclusively, a sharer slot left
    "mem_free": 0,  # mem_cap - mem_used
}
_FLOAT_FIELDS = {"bandwidth", "link_bw", "cost"}
_BOOL_FIELDS = {"alive", "healthy", "exclusive", "has_traits", "ready"}


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
    """What one placement holds in the cluster (the engine's ``Placement`` carries the why)."""

    id: str
    node: str
    grants: list[Grant]
    host_cpu_milli: int
    host_memory_mib: int
    preemptible: bool
    state: PlacementState
    request: ResourceRequest | None = None


class ClusterState:
    def __init__(self, memory_overcommit: float = 1.0) -> None:
        if memory_overcommit <= 0:
            raise InvalidRequest("memory_overcommit", "must be > 0")
        self.memory_overcommit = memory_overcommit
        self.nodes: dict[str, NodeState] = {}
        self._node_names: list[str] = []  # node row -> name ("" when removed)
        self._node_index: dict[str, int] = {}
        self.node_cpu_free = np.zeros(0, dtype=np.int64)
        self.node_mem_free = np.zeros(0, dtype=np.int64)
        self.node_ok = np.zeros(0, dtype=bool)
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
    mem_cap: IntArray  # mem_total x overcommit, kept so scoring never recomputes it
    cores_used: IntArray
    sharers: IntArray
    split: IntArray
    exclusive: BoolArray
    bandwidth: FloatArray
    link_bw: FloatArray
    cost: FloatArray
    year: IntArray
    has_traits: BoolArray
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
        self.node_ok = np.append(self.node_ok, True)
        self.nodes[name] = NodeState(name, cpu_milli, memory_mib, dict(labels or {}))
        self._name_rank = None
        for info in devices:
            self.add_device(name, info)
        self.version += 1

    def add_node_spec(self, spec: Any) -> None:
        """Add an inventory ``NodeSpec`` (name, cpu_milli, memory_mib, labels, devices)."""
        self.add_node(spec.name, spec.cpu_milli, spec.memory_mib, spec.devices, spec.labels)

    def remove_node(self, name: str) -> list[Booking]:
        """Remove a node and its devices; returns the bookings that were on it (now forgotten)."""
        node = self._node(name)
        dropped = [b for b in self.bookings.values() if b.node == name]
        for booking in dropped:
            self.forget(booking.id)
        for row in list(node.devices):
            self._remove_row(row)
        row = self._node_index.pop(name)
        self._node_names[row] = ""
        self.node_ok[row] = False
        self._name_rank = None
        del self.nodes[name]
        self.version += 1
        return dropped

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        self._node(name).schedulable = schedulable
        self.node_ok[self._node_index[name]] = schedulable
        self._refresh_node(name)
        self.version += 1

    def node_row(self, name: str) -> int:
        return self._node_index[name]

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
        self.numa[row] = -1 if info.numa_node is None else info.numa_node
        self.healthy[row] = info.healthy
        self.mem_total[row] = info.memory_mib
        self.mem_used[row] = 0
        self.mem_cap[row] = int(info.memory_mib * self.memory_overcommit)
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
        cores = 1.0 - self.cores_used[rows] / 100.0
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
    ) -> Booking:
        """Book a placement optimistically; every grant is checked against capacity first."""
        grants = list(grants)
        node_state = self._node(node)
        rows = [self.row(g.uuid) for g in grants]
        if len(set(rows)) != len(rows):
            raise InvalidRequest("grants", "a device appears twice in one placement")
        nrow = self._node_index[node]
        if host_cpu_milli > self.node_cpu_free[nrow] or host_memory_mib > self.node_mem_free[nrow]:
            raise HamiError(f"node {node!r} lacks the host CPU or memory for this placement")
        for row, grant in zip(rows, grants, strict=True):
            self._check_grant(row, grant)
        booking = Booking(
            id=booking_id or f"p{next(self._ids)}",
            node=node,
            grants=grants,
            host_cpu_milli=host_cpu_milli,
            host_memory_mib=host_memory_mib,
            preemptible=preemptible,
            state=PlacementState.ASSUMED,
            request=request,
        )
        if booking.id in self.bookings:
            raise InvalidRequest("id", f"placement {booking.id!r} already booked")
        for row, grant in zip(rows, grants, strict=True):
            self.mem_used[row] += grant.memory_mib
            self.cores_used[row] += grant.cores
            self.sharers[row] += 1
            self.exclusive[row] |= grant.exclusive
            self._refresh(row)
        self.node_cpu_free[nrow] -= host_cpu_milli
        self.node_mem_free[nrow] -= host_memory_mib
        node_state.cpu_used += host_cpu_milli
        node_state.memory_used += host_memory_mib
        self.bookings[booking.id] = booking
        self.version += 1
        return booking

    def _check_grant(self, row: int, grant: Grant) -> None:
        if not self.healthy[row]:
            raise HamiError(f"device {grant.uuid!r} is unhealthy")
        if self.exclusive[row] or (grant.exclusive and self.sharers[row] > 0):
            raise HamiError(f"device {grant.uuid!r} cannot be shared with this grant")
        if self.sharers[row] + 1 > self.split[row]:
            raise HamiError(f"device {grant.uuid!r} has no sharer slot left")
        if self.mem_used[row] + grant.memory_mib > self.mem_capacity(np.array([row]))[0]:
            raise HamiError(f"device {grant.uuid!r} lacks {grant.memory_mib} MiB")
        if self.cores_used[row] + grant.cores > 100:
            raise HamiError(f"device {grant.uuid!r} lacks {grant.cores}% cores")

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
            self._refresh(row)
        if booking.node in self.nodes:
            nrow = self._node_index[booking.node]
            self.node_cpu_free[nrow] += booking.host_cpu_milli
            self.node_mem_free[nrow] += booking.host_memory_mib
            self.nodes[booking.node].cpu_used -= booking.host_cpu_milli
            self.nodes[booking.node].memory_used -= booking.host_memory_mib
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

    @classmethod
    def from_inventory(cls, inventory: Any, memory_overcommit: float = 1.0) -> ClusterState:
        """Build from an ``Inventory`` (anything with ``.nodes`` of NodeSpec)."""
        state = cls(memory_overcommit)
        for spec in inventory.nodes:
            state.add_node_spec(spec)
        return state
