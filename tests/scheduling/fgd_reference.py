"""FGD's placement rises written out in numpy: the oracle the native kernel (native/scheduling/fgd.c) is held to."""

from __future__ import annotations

import numpy as np

from hami_devices.scheduling.fgd import MILLI, FloatArray, FragTerms, IntArray, WorkloadMix, frag


def share_deltas(
    free: IntArray,
    need: IntArray,
    t: FragTerms,
    base: FloatArray,
    take: IntArray,
    cpu_free: IntArray,
    mem_free: IntArray | None,
    cpu: int,
    mem: int,
    mix: WorkloadMix,
) -> FloatArray:
    """``[K, G]``: the rise of F_n when slot g of node n gives ``take[k, g]`` thousandths (inf where it can't)."""
    f = free[:, :, None]
    after = (free - take)[:, :, None]
    ge_old = f >= need
    ge_new = after >= need
    count_ge = t.count_ge[:, None, :] - ge_old + ge_new
    small = t.small[:, None, :] - np.where(ge_old, 0, f) + np.where(ge_new, 0, after)
    total = t.total[:, None] - take
    cpu_after = np.broadcast_to((cpu_free - cpu)[:, None], free.shape)
    mem_after = None if mem_free is None else np.broadcast_to((mem_free - mem)[:, None], free.shape)
    new = frag(count_ge, small, total, cpu_after, mem_after, mix)
    delta = new - base[:, None]
    return np.where(free >= take, delta, np.inf)


def whole_deltas(
    free: IntArray,
    need: IntArray,
    t: FragTerms,
    base: FloatArray,
    count: int,
    cpu_free: IntArray,
    mem_free: IntArray | None,
    cpu: int,
    mem: int,
    mix: WorkloadMix,
) -> FloatArray:
    """``[K]``: the rise of F_n when the first ``count`` entirely free slots of node n are taken whole.

    ``count`` 0 is a task without devices (only its CPU and memory change).
    """
    if count:
        whole = free >= MILLI
        taken = whole & (np.cumsum(whole, axis=1) <= count)  # [K, G]
        usable = need <= MILLI  # [K, G, S]: a whole free slot counts for s, else it is s's small change
        lost = (taken[:, :, None] & usable).sum(axis=1)
        count_ge, total = t.count_ge - lost, t.total - MILLI * count
        small = t.small - MILLI * (taken[:, :, None] & ~usable).sum(axis=1)
    else:
        count_ge, total, small = t.count_ge, t.total, t.small
    new = frag(count_ge, small, total, cpu_free - cpu, None if mem_free is None else mem_free - mem, mix)
    return new - base


