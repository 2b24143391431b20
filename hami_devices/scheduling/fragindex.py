"""FGD's per-node state for one cluster and one workload mix, kept current between decisions.

The index lays each node's devices out in slots (``[N, G]``: G is the largest
node's device count), holds each slot's free share, each shape's need on
each slot (``[N, G, S]``), and FGD's partial sums per node.  After a decision
only the nodes whose ``ClusterState.node_version`` moved are recomputed; the
deltas of a task shape are cached per node and recomputed only where a node
moved since that shape was last scored.  The layout is rebuilt when devices
come or go, everything when the mix changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable

import numpy as np

from hami_devices.scheduling import fgd
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.fgd import MILLI, NEVER, BoolArray, FloatArray, IntArray

MAX_CACHED_SHAPES = 4096


def name_order(names: list[str]) -> FloatArray:
    """A fixed pseudo-random order of node names in [0, 1): ties go by it, not by where a name sorts."""
    out = np.empty(len(names))
    for i, name in enumerate(names):
        out[i] = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big") / 2.0**64
    return out


class FragmentationIndex:
    def __init__(self, cluster: ClusterState, mix: fgd.WorkloadMix) -> None:
        self.cluster = cluster
        self.mix = mix
        self._layout: tuple[int, int] = (-1, -1)
        self._caches: dict[Hashable, tuple[FloatArray, IntArray]] = {}

    # ------------------------------------------------------------------ state
    def sync(self) -> None:
        """Bring free shares and partial sums up to date with the cluster."""
        c = self.cluster
        layout = (c.layout_version, len(c.node_names))
        if layout != self._layout:
            self._build()
            return
        moved = np.flatnonzero(c.node_version != self.seen)
        if moved.size:
            self._recompute(moved)

    def _build(self) -> None:
        c = self.cluster
        n = len(c.node_names)
        members = [c.nodes[name].devices if name in c.nodes else [] for name in c.node_names]
        width = max([len(m) for m in members] + [1])
        slots = np.full((n, width), -1, dtype=np.int64)
        for i, rows in enumerate(members):
            slots[i, : len(rows)] = rows
        present = slots >= 0
        safe = np.where(present, slots, 0)
        self.slots = slots
        self.present = present
        self.slot_of = np.full(max(c.size, 1), -1, dtype=np.int64)
        self.slot_of[slots[present]] = np.nonzero(present)[1]
        self.device_count = present.sum(axis=1)
        mem_cap = np.where(present, c.mem_cap[safe], 0)
        model = np.where(present, c.model[safe], -1)
        shapes = self.mix.shapes
        need = np.zeros((n, width, len(shapes)), dtype=np.int64)
        accept = np.zeros((n, width, len(shapes)), dtype=bool)
        for s, shape in enumerate(shapes):
            if shape.num_gpu == 0:
                continue  # needs no device: count_ge is never asked, nothing is "too small"
            ok = present.copy()
            if shape.models is not None:
                ok &= np.isin(model, c.model_ids_matching(sorted(shape.models)))
            accept[:, :, s] = ok
            need[:, :, s] = np.where(ok, shape.need_on(mem_cap), NEVER)
        self.need = need
        # How scarce each slot's model is for model-constrained shapes: sum of p_s / slots accepting s.
        constrained = np.array([s.models is not None and s.num_gpu > 0 for s in shapes], dtype=bool)
        if constrained.any():
            accepted = accept[:, :, constrained].sum(axis=(0, 1)).astype(np.float64)
            share = self.mix.weight[constrained] / np.maximum(accepted, 1.0)
            self.scarcity = (accept[:, :, constrained] * share).sum(axis=2)
        else:
            self.scarcity = np.zeros((n, width))
        gpu = (self.mix.milli * self.mix.num).astype(np.float64)
        w = self.mix.weight * (gpu > 0)
        per = max(float((w * gpu).sum()), 1.0)
        self.cpu_per_milli = max(float((w * self.mix.cpu).sum()) / per, 1e-9)
        self.mem_per_milli = max(float((w * self.mix.mem).sum()) / per, 1e-9)
        self.order = name_order(c.node_names)
        self.free = np.zeros((n, width), dtype=np.int64)
        self.base = np.zeros(n)
        per_shape = (n, len(shapes))
        self.terms = fgd.FragTerms(
            np.zeros(per_shape, dtype=np.int64), np.zeros(per_shape, dtype=np.int64), np.zeros(n, np.int64)
        )
        self.seen = c.node_version.copy()
        self._caches.clear()
        self._layout = (c.layout_version, n)
        self._recompute(np.arange(n))

    def _recompute(self, nodes: IntArray) -> None:
        c = self.cluster
        rows = self.slots[nodes]
        present = self.present[nodes]
        free = np.zeros(rows.shape, dtype=np.int64)
        if present.any():
            free[present] = c.free_share_milli(rows[present])
        self.free[nodes] = free
        t = fgd.terms(free, self.need[nodes])
        self.terms.count_ge[nodes] = t.count_ge
        self.terms.small[nodes] = t.small
        self.terms.total[nodes] = t.total
        self.base[nodes] = fgd.frag(t.count_ge, t.small, t.total, c.node_cpu_free[nodes], c.node_mem_free[nodes],
                                    self.mix)
        self.seen[nodes] = c.node_version[nodes]

    def _sub_terms(self, nodes: IntArray) -> fgd.FragTerms:
        t = self.terms
        return fgd.FragTerms(t.count_ge[nodes], t.small[nodes], t.total[nodes])

    # ------------------------------------------------------------------ deltas
    def _cached(
        self, key: Hashable, nodes: IntArray, width: int, compute: Callable[[IntArray], FloatArray]
    ) -> FloatArray:
        """Per-node values (``width`` columns, 0 for one) covering ``nodes`` (repeats allowed), recomputed
        where a node moved since they were computed."""
        c = self.cluster
        n = len(c.node_names)
        entry = self._caches.get(key)
        if entry is None:
            if len(self._caches) >= MAX_CACHED_SHAPES:
                self._caches.clear()
            shape = (n, width) if width else (n,)
            entry = (np.zeros(shape), np.full(n, -1, dtype=np.int64))
            self._caches[key] = entry
        values, versions = entry
        stale = versions[nodes] != c.node_version[nodes]
        if stale.any():
            todo = np.unique(nodes[stale])
            values[todo] = compute(todo)
            versions[todo] = c.node_version[todo]
        return values

    def share_deltas(
        self, rows: IntArray, take: Callable[[IntArray], IntArray], cpu: int, mem: int, key: Hashable | None
    ) -> FloatArray:
        """The rise of F_n when each device of ``rows`` gives ``take(rows)`` thousandths (in the order of rows).

        With ``key`` (the task's shape, when ``take`` depends only on each device's
        facts) the deltas of every slot of a node are cached until the node moves.
        """
        c = self.cluster
        node = c.node[rows]
        slot = self.slot_of[rows]
        if key is None:
            nodes, where = np.unique(node, return_inverse=True)
            take_slots = np.zeros((nodes.size, self.slots.shape[1]), dtype=np.int64)
            take_slots[where, slot] = take(rows)
            return self._share(nodes, take_slots, cpu, mem)[where, slot]

        def compute(todo: IntArray) -> FloatArray:
            slots = self.slots[todo]
            present = self.present[todo]
            take_slots = np.zeros(slots.shape, dtype=np.int64)
            take_slots[present] = take(slots[present])
            return self._share(todo, take_slots, cpu, mem)

        values = self._cached(("share", key), node, self.slots.shape[1], compute)
        return values[node, slot]

    def _share(self, nodes: IntArray, take: IntArray, cpu: int, mem: int) -> FloatArray:
        c = self.cluster
        return fgd.share_deltas(
            self.free[nodes],
            self.need[nodes],
            self._sub_terms(nodes),
            self.base[nodes],
            take,
            c.node_cpu_free[nodes],
            c.node_mem_free[nodes],
            cpu,
            mem,
            self.mix,
        )

    def whole_deltas(self, nodes: IntArray, count: int, cpu: int, mem: int) -> FloatArray:
        """The rise of F_n per node of ``nodes`` when ``count`` whole free devices (0: none) and the host share go."""
        c = self.cluster

        def compute(todo: IntArray) -> FloatArray:
            return fgd.whole_deltas(
                self.free[todo],
                self.need[todo],
                self._sub_terms(todo),
                self.base[todo],
                count,
                c.node_cpu_free[todo],
                c.node_mem_free[todo],
                cpu,
                mem,
                self.mix,
            )

        return self._cached(("whole", count, cpu, mem), nodes, 0, compute)[nodes]

    # ------------------------------------------------------------------ node facts
    def stranding_deltas(self, nodes: IntArray, gpu_milli: IntArray | int, cpu: int, mem: int) -> FloatArray:
        """How much a task adds to each node's stranded share: idle device thousandths beyond what the
        node's free CPU and host memory can feed at the mix's own CPU and memory per thousandth."""
        c = self.cluster
        g, cpu_free, mem_free = self.terms.total[nodes], c.node_cpu_free[nodes], c.node_mem_free[nodes]
        return self._stranded(g - gpu_milli, cpu_free - cpu, mem_free - mem) - self._stranded(g, cpu_free, mem_free)

    def _stranded(self, gpu_free: IntArray, cpu_free: IntArray, mem_free: IntArray) -> FloatArray:
        fed = np.minimum(cpu_free / self.cpu_per_milli, mem_free / self.mem_per_milli)
        return np.maximum(0.0, gpu_free - fed)

    def pristine(self, nodes: IntArray) -> BoolArray:
        """Nodes whose every device is entirely free."""
        return (self.free[nodes] >= MILLI).sum(axis=1) == self.device_count[nodes]  # type: ignore[no-any-return]

    def idle(self, nodes: IntArray) -> IntArray:
        return self.terms.total[nodes]

    def node_fragmentation(self) -> FloatArray:
        """``F_n`` of every node row (thousandths of a device)."""
        return self.base

    def fragmentation_rate(self) -> float:
        """Fragmented idle share over idle share, over live nodes (0 when nothing is idle)."""
        live = np.array([self.cluster.node_row(name) for name in self.cluster.nodes], dtype=np.int64)
        idle = float(self.terms.total[live].sum()) if live.size else 0.0
        return float(self.base[live].sum() / idle) if idle > 0 else 0.0
