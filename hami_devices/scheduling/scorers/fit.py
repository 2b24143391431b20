"""Binpack and spread: how full the device is after the part lands on it.

Fullness is the mean of the memory and core fractions granted, so a card
whose memory is mostly taken counts as full even when its cores are not.
"""

from __future__ import annotations

import numpy as np

from hami_devices.scheduling.scorers.base import FloatArray, ScoreContext, Scorer


def fullness_after(ctx: ScoreContext) -> FloatArray:
    """Memoised per context (binpack, spread and batch trait affinity all read it); do not modify."""
    value = ctx.cache.get("fullness_after")
    if value is None:
        # In place where possible (same values as the plain expression, fewer large temporaries):
        # mem = (used + memory) / max(cap, 1); cores = (cores_used + cores) / 100; clip(.5 mem + .5 cores)
        mem = np.add(ctx.column("mem_used"), ctx.memory)
        cap = np.maximum(ctx.column("mem_cap"), 1)
        mem = np.true_divide(mem, cap, out=cap if cap.dtype == np.float64 else None)
        cores = np.add(ctx.column("cores_used"), ctx.part.cores)
        cores = np.true_divide(cores, 100.0)
        mem *= 0.5
        cores *= 0.5
        mem += cores
        value = ctx.cache["fullness_after"] = np.clip(mem, 0.0, 1.0, out=mem)
    return value  # type: ignore[no-any-return]


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
