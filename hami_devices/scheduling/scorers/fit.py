"""Binpack and spread: how full the device is after the part lands on it.

Fullness is the mean of the memory and core fractions granted, so a card
whose memory is mostly taken counts as full even when its cores are not.
"""

from __future__ import annotations

import numpy as np

from hami_devices.scheduling.scorers.base import FloatArray, HostContext, ScoreContext, Scorer


def fullness_after(ctx: ScoreContext) -> FloatArray:
    """Memoised per context (binpack, spread and batch trait affinity all read it); do not modify."""
    value = ctx.cache.get("fullness_after")
    if value is None:
        # In place where possible (same values as the plain expression, fewer large temporaries):
        # mem = (used + memory) / max(cap, 1); cores = (cores_used + cores) / 100; clip(.5 mem + .5 cores)
        mem = np.add(ctx.column("mem_used"), ctx.memory)
        cap = np.maximum(ctx.column("mem_cap"), 1)
        mem = np.true_divide(mem, cap, out=cap if cap.dtype == np.float64 else None)
        cores = np.add(ctx.column("cores_used"), ctx.granted_cores)
        cores = np.true_divide(cores, 100.0)
        mem *= 0.5
        cores *= 0.5
        mem += cores
        value = ctx.cache["fullness_after"] = np.clip(mem, 0.0, 1.0, out=mem)
    return value  # type: ignore[no-any-return]


def host_fullness_after(ctx: HostContext) -> FloatArray:
    """Mean of the CPU and memory fractions of each candidate node in use once the request lands."""
    c, nodes, r = ctx.cluster, ctx.nodes, ctx.request
    cpu = (c.node_cpu_total[nodes] - c.node_cpu_free[nodes] + r.host_cpu_milli) / np.maximum(c.node_cpu_total[nodes], 1)
    mem = (c.node_mem_total[nodes] - c.node_mem_free[nodes] + r.host_memory_mib) / np.maximum(
        c.node_mem_total[nodes], 1
    )
    return np.clip(0.5 * cpu + 0.5 * mem, 0.0, 1.0)


class BinpackScorer(Scorer):
    """Fuller devices score higher: keeps whole devices free for big tasks."""

    name = "binpack"

    def score(self, ctx: ScoreContext) -> FloatArray:
        return 100.0 * fullness_after(ctx)

    def score_host(self, ctx: HostContext) -> FloatArray | None:
        return 100.0 * host_fullness_after(ctx)


class SpreadScorer(Scorer):
    """Emptier devices score higher: less contention per task."""

    name = "spread"

    def score(self, ctx: ScoreContext) -> FloatArray:
        return 100.0 * (1.0 - fullness_after(ctx))

    def score_host(self, ctx: HostContext) -> FloatArray | None:
        return 100.0 * (1.0 - host_fullness_after(ctx))
