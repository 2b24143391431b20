"""What a task costs its queue, and what the cluster holds, as vectors over the queue file's resource keys.

Charges come from the placement the engine chose (the grants and the nodes
charged host resources), never from a second model of capacity: a part asked
as a percentage of memory costs the MiB its device's rule granted, a part on
an A100 costs ``device-cores@nvidia/A100``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hami_devices.errors import InvalidConfig
from hami_devices.models import DeviceInfo, Grant, RequestPart, ResourceRequest
from hami_devices.queueing.spec import BASE_RESOURCES, DeviceClass
from hami_devices.rules import model_names
from hami_devices.scheduling.cluster import UNBOUNDED, Booking, ClusterState
from hami_devices.scheduling.engine import Placement
from hami_devices.traits import did_you_mean, normalize_model_name

Vector = npt.NDArray[np.float64]
"""One amount per resource key (float, so that unbounded capacity is ``inf``)."""


@dataclass(frozen=True)
class Key:
    text: str
    base: str
    scope: str | None


def parse_key(text: str) -> Key:
    base, _, scope = text.partition("@")
    return Key(text, base, scope or None)


class Resources:
    """The resource keys of one queue tree, bound to one cluster.

    ``keys`` are the base keys followed by every scoped key the queue file uses.
    """

    def __init__(
        self,
        keys: Iterable[str],
        classes: Mapping[str, DeviceClass],
        cluster: ClusterState,
        *,
        source: str | None = None,
    ) -> None:
        extra = sorted({k for k in keys if k not in BASE_RESOURCES})
        self.keys: tuple[str, ...] = (*BASE_RESOURCES, *extra)
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.parsed = [parse_key(k) for k in self.keys]
        self.classes = dict(classes)
        self.cluster = cluster
        self.scoped = [i for i, k in enumerate(self.parsed) if k.scope is not None]
        self._scope_cache: dict[str, list[int]] = {}  # uuid -> scoped key indices its device counts towards
        self._rows_cache: dict[int, tuple[tuple[int, int], npt.NDArray[np.bool_]]] = {}
        self._nodes = np.zeros(0, dtype=np.int64)
        self._nodes_key: tuple[int, int, int] | None = None
        for i in self.scoped:
            key = self.parsed[i]
            if not any(self._in_scope(info, key.scope or "") for info in self._infos()):
                infos = self._infos()
                known = [*self.classes, *{i.vendor for i in infos}, *{f"{i.vendor}/{i.model}" for i in infos}]
                raise InvalidConfig(
                    key.text,
                    f"scope {key.scope!r}{did_you_mean(key.scope or '', known)} matches no device of the cluster "
                    "(a class of the queue file, a vendor, or vendor/model)",
                    source=source,
                )

    def __len__(self) -> int:
        return len(self.keys)

    def zeros(self) -> Vector:
        return np.zeros(len(self.keys))

    def vector(self, amounts: Mapping[str, int | float], default: float = 0.0) -> Vector:
        out = np.full(len(self.keys), default)
        for key, value in amounts.items():
            out[self.index[key]] = value
        return out

    def to_dict(self, vector: Vector, *, skip_zero: bool = True) -> dict[str, float]:
        return {
            k: (int(v) if float(v).is_integer() else float(v))
            for k, v in zip(self.keys, vector.tolist(), strict=True)
            if not (skip_zero and v == 0)
        }

    # ------------------------------------------------------------------ scopes
    def _infos(self) -> list[DeviceInfo]:
        return [i for i in self.cluster.infos if i is not None]

    def _in_scope(self, info: DeviceInfo, scope: str) -> bool:
        vendor = info.vendor.lower()
        cls = self.classes.get(scope)
        if cls is not None:
            if cls.vendors and vendor not in {v.lower() for v in cls.vendors}:
                return False
            return not cls.models or bool(model_names(info) & {normalize_model_name(m) for m in cls.models})
        want_vendor, _, want_model = scope.partition("/")
        if vendor != want_vendor.lower():
            return False
        return not want_model or normalize_model_name(want_model) in model_names(info)

    def scopes_of(self, uuid: str) -> list[int]:
        """The scoped keys a grant on device ``uuid`` counts towards."""
        hit = self._scope_cache.get(uuid)
        if hit is None:
            info = self.cluster.info(self.cluster.row(uuid))
            hit = self._scope_cache[uuid] = [i for i in self.scoped if self._in_scope(info, self.parsed[i].scope or "")]
        return hit

    def scope_rows(self, index: int) -> npt.NDArray[np.bool_]:
        """Rows [0, size) of the cluster whose device counts towards scoped key ``index``."""
        c = self.cluster
        layout = (c.layout_version, c.size)
        hit = self._rows_cache.get(index)
        if hit is not None and hit[0] == layout:
            return hit[1]
        scope = self.parsed[index].scope or ""
        mask = np.array([info is not None and self._in_scope(info, scope) for info in c.infos[: c.size]], dtype=bool)
        self._rows_cache[index] = (layout, mask)
        return mask

    # ------------------------------------------------------------------ charges
    def charge(self, grants: Sequence[Grant], host_cpu_milli: int, host_memory_mib: int, host_nodes: int) -> Vector:
        out = np.zeros(len(self.keys))
        for g in grants:
            whole = 1.0 if g.exclusive or g.cores >= 100 else 0.0
            out[0] += whole
            out[1] += g.cores
            out[2] += g.memory_mib
            for i in self.scopes_of(g.uuid) if self.scoped else ():
                base = self.parsed[i].base
                out[i] += whole if base == "devices" else g.cores if base == "device-cores" else g.memory_mib
        out[3] = host_cpu_milli * host_nodes
        out[4] = host_memory_mib * host_nodes
        return out

    def of_placement(self, placement: Placement) -> Vector:
        """What an engine placement costs: its grants, and host resources on each node it runs on."""
        r = placement.request
        hosts = len(dict.fromkeys([placement.node, *(g.node for g in placement.grants)]))
        return self.charge(placement.grants, r.host_cpu_milli, r.host_memory_mib, hosts)

    def of_booking(self, booking: Booking) -> Vector:
        return self.charge(
            booking.grants, booking.host_cpu_milli, booking.host_memory_mib, len(booking.host_nodes or (booking.node,))
        )

    def estimate(self, request: ResourceRequest) -> Vector:
        """The charge before placement, counting only what every placement costs.

        A part's memory given as a percentage depends on the device chosen: it counts 0
        here (the exact charge is checked once placed).  A scoped key (``devices@train``)
        counts a part when every device of the cluster the part could use is in that
        scope (its vendors, models and uuids select only such devices, or the cluster has
        no others), so a guarantee given only on scoped keys entitles the tasks it can
        serve; a part that could land outside the scope counts 0 there.
        """
        out = np.zeros(len(self.keys))
        for p in request.parts:
            out[0] += p.count if p.exclusive else 0
            out[1] += p.count * p.cores
            out[2] += p.count * (p.memory_mib or 0)
            if self.scoped:
                self._estimate_scoped(p, out)
        nodes = 1 if request.same_node or len(request.parts) <= 1 else len(request.parts)
        out[3] = request.host_cpu_milli * nodes
        out[4] = request.host_memory_mib * nodes
        return out

    def _estimate_scoped(self, part: RequestPart, out: Vector) -> None:
        """Add ``part`` to each scoped key whose scope holds every device the part could use."""
        c = self.cluster
        could = np.flatnonzero(c.alive[: c.size] & c.match_ok(part)[: c.size])
        if could.size == 0:
            return
        for i in self.scoped:
            if self.scope_rows(i)[could].all():
                base = self.parsed[i].base
                out[i] += (part.count if part.exclusive else 0) if base == "devices" else (
                    part.count * part.cores if base == "device-cores" else part.count * (part.memory_mib or 0))

    # ------------------------------------------------------------------ cluster totals
    def _node_rows(self) -> npt.NDArray[np.int64]:
        c = self.cluster
        key = (c.layout_version, len(c.node_names), len(c.nodes))
        if self._nodes_key != key:
            self._nodes = np.array([c.node_row(n) for n in c.nodes], dtype=np.int64)
            self._nodes_key = key
        return self._nodes

    def capacity(self) -> Vector:
        """What the cluster holds per key (host keys are ``inf`` when a node's host was never described)."""
        c = self.cluster
        live = c.live_rows()
        out = np.zeros(len(self.keys))
        out[0] = live.size
        out[1] = float(c.core_cap[live].sum())
        out[2] = float(c.mem_cap[live].sum())
        nodes = self._node_rows()
        cpu, mem = c.node_cpu_total[nodes], c.node_mem_total[nodes]
        out[3] = np.inf if (cpu >= UNBOUNDED).any() else float(cpu.sum())
        out[4] = np.inf if (mem >= UNBOUNDED).any() else float(mem.sum())
        for i in self.scoped:
            rows = np.flatnonzero(self.scope_rows(i) & c.alive[: c.size])
            base = self.parsed[i].base
            out[i] = (
                rows.size
                if base == "devices"
                else c.core_cap[rows].sum()
                if base == "device-cores"
                else c.mem_cap[rows].sum()
            )
        return out

    def used(self) -> Vector:
        """What every booking of the cluster holds per key (the queues' and any other)."""
        c = self.cluster
        live = c.live_rows()
        out = np.zeros(len(self.keys))
        out[0] = float(c.exclusive[live].sum())
        out[1] = float(c.cores_used[live].sum())
        out[2] = float(c.mem_used[live].sum())
        nodes = self._node_rows()
        out[3] = float((c.node_cpu_total[nodes] - c.node_cpu_free[nodes]).sum())
        out[4] = float((c.node_mem_total[nodes] - c.node_mem_free[nodes]).sum())
        for i in self.scoped:
            rows = np.flatnonzero(self.scope_rows(i) & c.alive[: c.size])
            base = self.parsed[i].base
            used = (
                c.exclusive[rows]
                if base == "devices"
                else c.cores_used[rows]
                if base == "device-cores"
                else c.mem_used[rows]
            )
            out[i] = float(used.sum())
        return out
