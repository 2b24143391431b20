"""Fragmentation: FGD (USENIX ATC'23) with host memory, stranded share and deliberate tie-breaks.

The policy's order of candidates, expressed as one score per device:

1. Each candidate's fragmentation rise for the workload mix (``fragindex``:
   FGD's exact rise of ``F_n``, where a shape fits a node only with its host
   CPU *and* memory), mapped to FGD's integer score
   ``int(100 * sigmoid(-delta / 1000))``; for a share, ``delta`` also counts ``WASTE_WEIGHT`` times the
   node's rise of expected end waste (``fgd.gap_waste``: what the mix will leave of each gap, a gap the
   host can no longer feed counted whole).
2. For a task with devices, the rise of the node's stranded share (idle
   device thousandths its free CPU and memory can no longer feed at the mix's
   own ratios) is added, over the candidates whose model is no scarcer (for
   model-constrained shapes) than the plain FGD winners'; the others are gated
   below them, so CPU-rich nodes of a model constrained tasks need are not
   taken for it.
3. Ties in the integer score, in this order: each node's device with the least
   exact rise (the lowest such device) first; the least scarce model; a node already in use before a
   pristine one; for a sharing task, the least share left on the device; a
   fixed order of node names.  A task without devices takes the node with the
   least idle device share, then the least free CPU.

Encoded as ``50 * gate + 0.49 * integer score + 0.4 * tie rank`` (0..100), so
each key dominates the ones after it.  The mix is the engine's declared mix
(``Engine(mix=...)``), else the one learned online (``scheduling.mix.OnlineMix``)
from the requests the engine observed (``Engine.observe``: each one a scheduler
decided, placed or not), in order: what has been asked so far, and nothing later.  ``hd.allocate`` keeps that
learner in the node's ledger between calls, so every engine over one ledger
plans with the same mix.
"""

from __future__ import annotations

import numpy as np

from hami_devices.models import ResourceRequest
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.fgd import MILLI, WorkloadMix, sigmoid_score
from hami_devices.scheduling.fragindex import FragmentationIndex
from hami_devices.scheduling.mix import OnlineMix
from hami_devices.scheduling.scorers.base import FloatArray, HostContext, ScoreContext, Scorer

GATE = 50.0
STEP = 0.49
TIE = 0.4  # < STEP: a tie rank never outweighs one point of the integer score
WASTE_WEIGHT = 10.0  # thousandths of FGD's rise per thousandth of expected end waste


def tie_rank(keys: list[np.ndarray]) -> FloatArray:
    """1 for the best by ``keys`` (smaller is better; most significant last, as ``np.lexsort``), falling to 0."""
    size = keys[0].size
    out = np.empty(size)
    if size:
        out[np.lexsort(keys)] = 1.0 - np.arange(size) / size
    return out


class FragmentationScorer(Scorer):
    name = "fragmentation"

    def __init__(self, online: OnlineMix | None = None) -> None:
        self.online = online or OnlineMix()
        self._index: FragmentationIndex | None = None

    def observe(self, request: ResourceRequest) -> None:
        self.online.observe(request)

    def index(self, cluster: ClusterState, declared: WorkloadMix | None = None) -> FragmentationIndex:
        """The index for this cluster and the mix in use, current."""
        if (self._index is None or self._index.cluster is not cluster) and self.online.seen == 0:
            # A learner that has seen nothing meets a cluster that already holds work (an engine
            # rebuilt from a ledger with no learned mix kept): what it holds is the history there is.
            for booking in cluster.bookings.values():
                if booking.request is not None:
                    self.online.observe(booking.request)
        mix = declared or self.online.mix
        if self._index is None or self._index.cluster is not cluster or self._index.mix is not mix:
            self._index = FragmentationIndex(cluster, mix)
        self._index.sync()
        return self._index

    def score(self, ctx: ScoreContext) -> FloatArray:
        if ctx.rows.size == 0:
            return np.zeros(0)
        idx = self.index(ctx.cluster, ctx.mix)
        c, rows, part, request = ctx.cluster, ctx.rows, ctx.part, ctx.request
        cpu, mem = request.host_cpu_milli, request.host_memory_mib
        nodes = c.node[rows]
        if part.exclusive and part.count == 1:  # one whole device: its own rise (a node's devices differ)
            delta = idx.share_deltas(rows, np.full(rows.size, MILLI, dtype=np.int64), cpu, mem)
            taken = np.full(rows.size, MILLI, dtype=np.int64)
            left = np.zeros(rows.size, dtype=np.int64)
        elif part.exclusive:  # several whole devices: the node's rise for any that many of its whole free ones
            at = np.zeros(len(c.node_names), dtype=bool)
            at[nodes] = True
            unique = np.flatnonzero(at)
            per_node = np.empty(len(c.node_names))
            per_node[unique] = idx.whole_deltas(unique, part.count, cpu, mem)
            delta = per_node[nodes]
            taken = np.full(rows.size, MILLI * part.count, dtype=np.int64)
            left = np.zeros(rows.size, dtype=np.int64)
        else:
            # What the device's free share (the scarcer of memory and cores) really drops by: a task
            # that takes mostly the plentiful resource can leave the share as it was.
            free = idx.free[nodes, idx.slot_of[rows]]
            left = np.clip(c.free_share_after(rows, ctx.memory, ctx.granted_cores), 0, free)
            per_device = free - left
            delta = idx.share_deltas(rows, per_device, cpu, mem)
            delta += WASTE_WEIGHT * idx.waste_deltas(rows, left, cpu, mem)
            taken = per_device * part.count
        first = sigmoid_score(delta)
        scarcity = idx.scarcity[nodes, idx.slot_of[rows]]
        gate = scarcity <= scarcity[first == first.max()].min() + 1e-12
        primary = sigmoid_score(delta + idx.stranding_deltas(nodes, taken, cpu, mem))
        top = np.flatnonzero(gate & (primary == primary[gate].max()))
        at = nodes[top]
        # Each node offers one device: its least rise, ties to its lowest device (rows are in device order).
        by_node = np.lexsort((top, delta[top], at))
        first = np.ones(top.size, dtype=bool)
        first[1:] = at[by_node][1:] != at[by_node][:-1]
        not_best = np.ones(top.size, dtype=bool)
        not_best[by_node[first]] = False
        keys = [idx.order[at], left[top], idx.pristine(at), scarcity[top], not_best]
        score = np.asarray(GATE * gate + STEP * primary, dtype=np.float64)
        score[top] += TIE * tie_rank(keys)
        return score

    def score_host(self, ctx: HostContext) -> FloatArray | None:
        idx = self.index(ctx.cluster, ctx.mix)
        c, nodes, request = ctx.cluster, ctx.nodes, ctx.request
        delta = idx.whole_deltas(nodes, 0, request.host_cpu_milli, request.host_memory_mib)
        primary = sigmoid_score(delta)
        top = np.flatnonzero(primary == primary.max())
        score = np.asarray(0.99 * primary, dtype=np.float64)
        score[top] += 0.9 * tie_rank([idx.order[nodes[top]], c.node_cpu_free[nodes[top]], idx.idle(nodes[top])])
        return score
