"""Binpack and spread: how full the device is after the part lands on it.

Fullness is the mean of the memory and core fractions granted, so a card
whose memory is mostly taken counts as full even when its cores are not.
"""

from __future__ import annotations

import numpy as np

from hami_devices.scheduling.scorers.base import FloatArray, ScoreContext, Scorer


def fullness_after(ctx: ScoreContext) -> FloatArray:
    c = ctx.cluster
    mem = (c.mem_used[ctx.rows] + ctx.memory) / np.maximum(c.mem_capacity(ctx.rows), 1)
    cores = (c.cores_used[ctx.rows] + ctx.part.cores) / 100.0
    return np.clip(0.5 * mem + 0.5 * cores, 0.0, 1.0)


class BinpackScorer(Scorer):
    """Fuller devices score higher: keeps whole devices free for big tasks."""

    name = "binpack"

    def score(self, ctx: ScoreContext) -> FloatArray:
        return 100.0 * fullness_after(ctx)


class SpreadScorer(Scorer):
    """Emptier devices score higher: less contention per task."""

    name = "spread"

    def score(self, ctx: ScoreContext) -> FloatArray:
        return 100.0 * (1.0 - fullness_after(ctx))
