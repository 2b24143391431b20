"""Fragmentation: how much placing the part on a device raises its node's expected fragmentation.

FGD (USENIX ATC'23) per candidate device: the increase of
``F_n = sum_m p_m * frag_n(m)`` for the workload mix (see
``scheduling.fgd``), mapped to 0..100 by a logistic: 50 means no change,
higher means the placement *reduces* fragmentation (it fills a gap that no
typical task could use).
"""

from __future__ import annotations

import numpy as np

from hami_devices.scheduling import fgd
from hami_devices.scheduling.fragmentation import DEFAULT_MIX, free_matrix
from hami_devices.scheduling.scorers.base import FloatArray, ScoreContext, Scorer

SCALE_MILLI = 250.0  # a rise of 250 thousandths halves the distance to 0


class FragmentationScorer(Scorer):
    name = "fragmentation"

    def score(self, ctx: ScoreContext) -> FloatArray:
        mix = ctx.mix or DEFAULT_MIX
        c = ctx.cluster
        nodes, node_pos = np.unique(c.node[ctx.rows], return_inverse=True)
        free, slot_of = free_matrix(c, nodes)
        cpu_free = c.node_cpu_free[nodes]
        shape_ok = np.ones((len(nodes), len(mix)), dtype=bool)
        t = fgd.terms(free, mix)
        base = fgd._frag(t.count_ge, t.small, t.total, cpu_free, shape_ok, mix)
        milli = np.clip(np.ceil(ctx.share * 1000 - 1e-9), 1, 1000).astype(np.int64)
        slots = slot_of[ctx.rows]
        delta = np.zeros(ctx.rows.shape)
        for value in np.unique(milli):
            pick = milli == value
            d = fgd.share_deltas(free, cpu_free, shape_ok, t, base, int(value), ctx.request.host_cpu_milli, mix)
            delta[pick] = d[node_pos[pick], slots[pick]]
        delta = np.where(np.isfinite(delta), delta, 1000.0 * len(mix))
        return 100.0 / (1.0 + np.exp(np.clip(delta / SCALE_MILLI, -50, 50)))
