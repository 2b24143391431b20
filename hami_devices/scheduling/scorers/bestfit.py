"""BestFit, as the Kubernetes scheduler simulator of the FGD paper scores it (the openb protocol check).

A node's score is ``int(100 * (1 - left))`` where ``left`` is half the CPU
and half the device share the node would have left, each over the largest
node's (the simulator's MaxSpecCpu and MaxSpecGpu), min-max normalised over
the candidate nodes to an integer 0..100.  Ties among nodes go to the node
whose candidate device would be left with the least free share (the
simulator picks such a device within the chosen node), then to the
engine's order.  Encoded as ``0.99 * score + 0.9 * tie rank``.
"""

from __future__ import annotations

import numpy as np

from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.fgd import MILLI
from hami_devices.scheduling.scorers.base import FloatArray, HostContext, IntArray, ScoreContext, Scorer
from hami_devices.scheduling.scorers.fragmentation import tie_rank


def _node_free_share(cluster: ClusterState) -> tuple[IntArray, float, float]:
    """Free device thousandths per node row, and the largest node's CPU and device share."""
    live = cluster.live_rows()
    n = len(cluster.node_names)
    free = np.bincount(cluster.node[live], weights=cluster.free_share_milli(live), minlength=n)
    count = np.bincount(cluster.node[live], minlength=n)
    max_cpu = float(cluster.node_cpu_total.max()) if n else 1.0
    return free.astype(np.int64), max(max_cpu, 1.0), max(float(count.max()) * MILLI if n else 1.0, 1.0)


def _normalised(raw: IntArray) -> IntArray:
    low, high = int(raw.min()), int(raw.max())
    if high == low:
        return np.zeros_like(raw)
    return (raw - low) * 100 // (high - low)


class BestFitScorer(Scorer):
    name = "bestfit"

    def score(self, ctx: ScoreContext) -> FloatArray:
        c, rows = ctx.cluster, ctx.rows
        if rows.size == 0:
            return np.zeros(0)
        free, max_cpu, max_gpu = _node_free_share(c)
        nodes = c.node[rows]
        share = np.clip(np.ceil(ctx.share * MILLI - 1e-9), 1, MILLI).astype(np.int64)
        asked = share * ctx.part.count
        left = 0.5 * (c.node_cpu_free[nodes] - ctx.request.host_cpu_milli) / max_cpu
        left += 0.5 * (free[nodes] - asked) / max_gpu
        score = _normalised(((1.0 - left) * 100).astype(np.int64))
        top = np.flatnonzero(score == score.max())
        out = np.asarray(0.99 * score, dtype=np.float64)
        out[top] += 0.9 * tie_rank([c.free_share_milli(rows[top]) - share[top]])
        return out

    def score_host(self, ctx: HostContext) -> FloatArray | None:
        c, nodes = ctx.cluster, ctx.nodes
        free, max_cpu, max_gpu = _node_free_share(c)
        left = 0.5 * (c.node_cpu_free[nodes] - ctx.request.host_cpu_milli) / max_cpu + 0.5 * free[nodes] / max_gpu
        return np.asarray(0.99 * _normalised(((1.0 - left) * 100).astype(np.int64)), dtype=np.float64)
