"""FGD's per-node state for one cluster and one workload mix, kept current between decisions.

The index lays each node's devices out in slots (``[N, G]``: G is the largest
node's device count), holds each slot's free share, each shape's need on
each slot (``[N, G, S]``), and FGD's partial sums per node.  After a decision
only the nodes whose ``ClusterState.node_version`` moved are recomputed.  The
rise of F_n for each candidate is computed by a small native kernel
(``native/scheduling/fgd.c``, the arithmetic of ``fgd.frag`` per device and
shape, held by tests to FGD's definition computed from scratch): one pass over
candidates x shapes, no per-decision temporaries.  So is the rise of each node's
expected end waste (``fgd.gap_waste`` and ``fgd.gap_feed`` tabulate it per slot
class and gap; the kernel sums a node's gaps, held by tests to the README's
definition).  The layout is rebuilt when devices come or go, everything when the
mix changes.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from hami_devices._fgd import ffi as _ffi
from hami_devices._fgd import lib as _lib
from hami_devices.errors import InvalidConfig
from hami_devices.scheduling import fgd
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.fgd import MILLI, NEVER, BoolArray, FloatArray, IntArray


def _int64(array: Any) -> Any:
    return _ffi.cast("int64_t *", _ffi.from_buffer(array))


def _float64(array: Any) -> Any:
    return _ffi.cast("double *", _ffi.from_buffer(array))


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
        if len(mix) > _lib.HAMI_FGD_MAX_SHAPES:
            raise InvalidConfig("workload-mix", f"{len(mix)} shapes; at most {_lib.HAMI_FGD_MAX_SHAPES}")

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
        # A slot's needs follow from its model (acceptance) and memory capacity: slots alike in both
        # share a class id, so the kernel computes alike devices of a node once.
        _, first, classes = np.unique((model + 1) * (1 << 40) + mem_cap, return_index=True, return_inverse=True)
        self.need_class = np.ascontiguousarray(classes.reshape(n, width), dtype=np.int64)
        # What a gap of each size is expected to end with, per class (device shapes only; ``first``: a slot of
        # each class, as a flat index).
        class_need = np.where(self.mix.num > 0, need.reshape(n * width, len(shapes))[first], 0)
        self.waste_flat = fgd.gap_waste(class_need, self.mix.weight).ravel()
        self.feed_cpu_flat, self.feed_mem_flat = (f.ravel() for f in fgd.gap_feed(class_need, self.mix))
        # How scarce each slot's model is for model-constrained tasks: sum of p / slots accepting the set.
        constraints = self.mix.constraints or tuple(
            (s.models, float(w)) for s, w in zip(shapes, self.mix.weight, strict=True) if s.models and s.num_gpu
        )
        self.scarcity = np.zeros((n, width))
        for models, weight in constraints:
            ok = present & np.isin(model, c.model_ids_matching(sorted(models)))
            self.scarcity += ok * (weight / max(float(ok.sum()), 1.0))
        gpu = (self.mix.milli * self.mix.num).astype(np.float64)
        w = self.mix.weight * (gpu > 0)
        per = max(float((w * gpu).sum()), 1.0)
        self.cpu_per_milli = max(float((w * self.mix.cpu).sum()) / per, 1e-9)
        self.mem_per_milli = max(float((w * self.mix.mem).sum()) / per, 1e-9)
        self.order = name_order(c.node_names)
        self.free = np.zeros((n, width), dtype=np.int64)
        self.base = np.zeros(n)
        self.end_waste = np.zeros(n)
        per_shape = (n, len(shapes))
        self.terms = fgd.FragTerms(
            np.zeros(per_shape, dtype=np.int64), np.zeros(per_shape, dtype=np.int64), np.zeros(n, np.int64)
        )
        self.seen = c.node_version.copy()
        self._layout = (c.layout_version, n)
        self._st = self._state()
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
        nodes = np.ascontiguousarray(nodes, dtype=np.int64)
        waste = np.empty(nodes.size)
        _lib.hami_fgd_node_waste(self._st, nodes.size, _int64(nodes), _float64(waste))
        self.end_waste[nodes] = waste
        self.seen[nodes] = c.node_version[nodes]

    def _sub_terms(self, nodes: IntArray) -> fgd.FragTerms:
        t = self.terms
        return fgd.FragTerms(t.count_ge[nodes], t.small[nodes], t.total[nodes])

    # ------------------------------------------------------------------ deltas
    def _state(self) -> Any:
        """The native kernel's view of the index (pointers into the arrays; rebuilt with the layout)."""
        c = self.cluster
        st = _ffi.new("hami_fgd_state *")
        keep = [self.need, self.free, self.terms.count_ge, self.terms.small, self.terms.total, c.node_cpu_free,
                c.node_mem_free, self.base, self.mix.cpu, self.mix.mem, self.mix.num, self.mix.weight,
                self.need_class]
        st.slots, st.shapes = self.slots.shape[1], len(self.mix)
        st.need, st.free, st.count_ge, st.small, st.total = (_int64(a) for a in keep[:5])
        st.cpu_free, st.mem_free = _int64(keep[5]), _int64(keep[6])
        st.base = _float64(keep[7])
        st.shape_cpu, st.shape_mem, st.shape_num = (_int64(a) for a in keep[8:11])
        st.weight = _float64(keep[11])
        st.need_class = _int64(keep[12])
        st.check_memory = 1
        st.cpu_only_all_idle = int(self.mix.cpu_only_all_idle)
        tables = [self.waste_flat, self.feed_cpu_flat, self.feed_mem_flat, self.end_waste]
        st.waste, st.end_waste = _float64(tables[0]), _float64(tables[3])
        st.feed_cpu, st.feed_mem = _int64(tables[1]), _int64(tables[2])
        self._keep = keep + tables  # the struct points into these: they must outlive it
        return st

    def share_deltas(self, rows: IntArray, take: IntArray, cpu: int, mem: int) -> FloatArray:
        """The rise of F_n when each device of ``rows`` gives ``take`` thousandths (inf where it can't)."""
        c = self.cluster
        node = np.ascontiguousarray(c.node[rows], dtype=np.int64)
        slot = np.ascontiguousarray(self.slot_of[rows], dtype=np.int64)
        take = np.ascontiguousarray(take, dtype=np.int64)
        out = np.empty(rows.size)
        _lib.hami_fgd_share(self._st, rows.size, _int64(node), _int64(slot), _int64(take), cpu, mem, _float64(out))
        return out

    def whole_deltas(self, nodes: IntArray, count: int, cpu: int, mem: int) -> FloatArray:
        """The rise of F_n per node of ``nodes`` when ``count`` whole free devices (0: none) and the host share go."""
        nodes = np.ascontiguousarray(nodes, dtype=np.int64)
        out = np.empty(nodes.size)
        _lib.hami_fgd_whole(self._st, nodes.size, _int64(nodes), count, cpu, mem, _float64(out))
        return out

    def waste_deltas(self, rows: IntArray, left: IntArray, cpu: int, mem: int) -> FloatArray:
        """The rise of each device's node's expected end waste (``fgd.gap_waste``) when the device's free
        share falls to ``left`` and the node gives ``cpu`` millicores and ``mem`` MiB: the device's own gap,
        and every gap of the node the host share left can no longer feed (``fgd.gap_feed``: it ends idle)."""
        node = np.ascontiguousarray(self.cluster.node[rows], dtype=np.int64)
        slot = np.ascontiguousarray(self.slot_of[rows], dtype=np.int64)
        left = np.ascontiguousarray(left, dtype=np.int64)
        out = np.empty(rows.size)
        _lib.hami_fgd_end_waste(self._st, rows.size, _int64(node), _int64(slot), _int64(left), cpu, mem,
                                _float64(out))
        return out

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
