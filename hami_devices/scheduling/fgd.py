"""Fragmentation Gradient Descent (FGD) math on arrays.

After Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
with Fragmentation Gradient Descent", USENIX ATC 2023, generalised to
heterogeneous nodes: every device slot of a node has its own need per task
shape (a shape that gives its device memory in MiB needs a different share of
a 16 GiB and of an 80 GiB device; a shape that does not accept a slot's model
can never use it).  Units: device share in thousandths ("milli", 1000 = a
whole device), CPU in millicores, host memory in MiB.

For a node n and a task shape m of the workload mix:

* if m cannot run on n (not enough CPU or host memory, or fewer than m's
  device count of slots with m's need free) every idle thousandth of n counts
  as fragmented for m;
* if m can run, only the free thousandths on slots that have less free than
  m needs there (or that m does not accept).

The node's fragmentation is ``F_n = sum_m p_m * frag_n(m)``; a placement is
good when ``F_n`` grows least.  The rise for a candidate placement is computed
by ``native/scheduling/fgd.c`` from the partial sums below (the tests hold its
rises to ``F_n`` after minus ``F_n`` before, computed from the paper's
definition in ``tests/oracles/fgd_paper.py``).  A shape without devices has nothing "too
small" on any device; with ``cpu_only_all_idle`` (the published simulator's
convention) it counts all of a node's idle share as fragmented.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

MILLI = 1000
NEVER = 1 << 40
"""The need of a slot a shape cannot use (absent, or a model it does not accept): no free share reaches it."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def thousandths(
    mem_cap: IntArray | int, at_least: int, memory_mib: int | None = None, memory_percent: float | None = None
) -> IntArray:
    """Thousandths of a device of ``mem_cap`` MiB that one share takes there (the one place this is counted).

    A share takes the larger of ``at_least`` (what its cores take: cores x 10, so an exclusive share takes the
    whole device) and what its memory takes (``memory_percent`` x 10, or ``memory_mib`` of ``mem_cap``), rounded
    up so that a share is never counted smaller than it is, and never more than the whole device.
    """
    cap = np.asarray(mem_cap, dtype=np.int64)
    if memory_percent is not None:
        by_memory = np.full(cap.shape, math.ceil(memory_percent * 10 - 1e-9))  # 33.3 % is 333, never 334
    elif memory_mib:
        by_memory = np.ceil(memory_mib * MILLI / np.maximum(cap, 1)).astype(np.int64)
    else:
        by_memory = np.zeros(cap.shape, dtype=np.int64)
    share: IntArray = np.minimum(np.maximum(by_memory, at_least), MILLI)
    return share


@dataclass(frozen=True)
class Shape:
    """One typical task shape.

    ``gpu_milli`` is the per-device share in thousandths given by cores or by a
    percentage of memory; ``gpu_mem_mib`` is device memory given in MiB (0:
    none), whose share depends on the device; ``mem_mib`` is host memory.
    """

    cpu_milli: int
    gpu_milli: int
    num_gpu: int
    models: frozenset[str] | None = None  # None: any model
    weight: float = 1.0
    mem_mib: int = 0
    gpu_mem_mib: int = 0

    def need_on(self, mem_cap: IntArray) -> IntArray:
        """Thousandths of a device of ``mem_cap`` MiB this shape needs on it."""
        # A device smaller than the shape's memory can never hold it: none of its share is usable.
        too_small = self.gpu_mem_mib > np.maximum(mem_cap, 1)
        return np.where(too_small, NEVER, thousandths(mem_cap, self.gpu_milli, self.gpu_mem_mib))


@dataclass(frozen=True)
class WorkloadMix:
    """The typical shapes with their renormalised frequencies ``p_m``."""

    shapes: tuple[Shape, ...]
    cpu_only_all_idle: bool = False
    # The model sets tasks are constrained to, with their share of all tasks (not only the typical
    # shapes'): how scarce each model is for constrained work.  Empty: taken from ``shapes``.
    constraints: tuple[tuple[frozenset[str], float], ...] = ()
    cpu: IntArray = field(init=False, repr=False)
    milli: IntArray = field(init=False, repr=False)
    num: IntArray = field(init=False, repr=False)
    weight: FloatArray = field(init=False, repr=False)
    mem: IntArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        total = sum(s.weight for s in self.shapes) or 1.0
        object.__setattr__(self, "cpu", np.array([s.cpu_milli for s in self.shapes], dtype=np.int64))
        object.__setattr__(self, "milli", np.array([s.gpu_milli for s in self.shapes], dtype=np.int64))
        object.__setattr__(self, "num", np.array([s.num_gpu for s in self.shapes], dtype=np.int64))
        object.__setattr__(self, "weight", np.array([s.weight / total for s in self.shapes], dtype=np.float64))
        object.__setattr__(self, "mem", np.array([s.mem_mib for s in self.shapes], dtype=np.int64))

    def __len__(self) -> int:
        return len(self.shapes)

    @property
    def uses_devices(self) -> BoolArray:
        return self.num > 0

    @classmethod
    def typical(cls, shapes: Iterable[tuple[Shape, float]], coverage: float = 0.95) -> WorkloadMix:
        """The most frequent shapes covering ``coverage`` of the total weight (FGD's "typical pods").

        ``shapes`` yields (shape, weight) pairs, the weight ignored in each shape.
        Ties in weight keep first-seen order, so the result is deterministic.
        """
        counts: dict[Shape, float] = {}
        for shape, weight in shapes:
            key = Shape(shape.cpu_milli, shape.gpu_milli, shape.num_gpu, shape.models, 1.0, shape.mem_mib,
                        shape.gpu_mem_mib)
            counts[key] = counts.get(key, 0.0) + weight
        total = sum(counts.values())
        kept: list[Shape] = []
        covered = 0.0
        for shape, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            if covered >= coverage * total - 1e-12:
                break
            kept.append(Shape(shape.cpu_milli, shape.gpu_milli, shape.num_gpu, shape.models, n, shape.mem_mib,
                              shape.gpu_mem_mib))
            covered += n
        return cls(tuple(kept))


@dataclass
class FragTerms:
    """Per-node, per-shape partial sums that make candidate deltas cheap.

    ``count_ge[n, s]``: slots of n with at least shape s's need free there;
    ``small[n, s]``: free thousandths on the other slots; ``total[n]``: all free.
    """

    count_ge: IntArray
    small: IntArray
    total: IntArray


def terms(free: IntArray, need: IntArray) -> FragTerms:
    """Partial sums for ``free`` ``[N, G]`` and ``need`` ``[N, G, S]`` (absent slots: free 0, need NEVER)."""
    f = free[:, :, None]
    ge = f >= need
    return FragTerms(
        count_ge=ge.sum(axis=1).astype(np.int64),
        small=np.where(ge, 0, f).sum(axis=1).astype(np.int64),
        total=free.sum(axis=1).astype(np.int64),
    )


def frag(
    count_ge: IntArray,
    small: IntArray,
    total: IntArray,
    cpu_free: IntArray,
    mem_free: IntArray | None,
    mix: WorkloadMix,
) -> FloatArray:
    """F = sum_s p_s * (fits_s ? small_s : total); shapes are the last axis, any leading axes broadcast.

    With ``mem_free`` a shape also needs its host memory to fit.
    """
    fits = (cpu_free[..., None] >= mix.cpu) & ((mix.num == 0) | (count_ge >= mix.num))
    if mem_free is not None:
        fits &= mem_free[..., None] >= mix.mem
    if mix.cpu_only_all_idle:
        fits &= mix.num > 0
    per_shape = np.where(fits, small, total[..., None])
    return per_shape @ mix.weight


def sigmoid_score(delta: FloatArray) -> IntArray:
    """The published FGD score: ``int(100 * sigmoid(-delta / 1000))``."""
    with np.errstate(over="ignore"):
        return (100.0 / (1.0 + np.exp(np.clip(delta, -1e6, 1e6) / 1000.0))).astype(np.int64)


FILL_SHARE = 0.025
"""A gap whose fitting device shapes make at least this share of the mix counts as surely filled."""
FILL_TEMPERATURE = 15.0
"""Thousandths of end waste that make a filler ``e`` times less likely to be the one a gap gets."""


def gap_waste(
    need: IntArray, weight: FloatArray, fill_share: float = FILL_SHARE, temperature: float = FILL_TEMPERATURE
) -> FloatArray:
    """``W[c, g]``: the idle thousandths a gap of ``g`` free on a slot of class ``c`` is expected to end with.

    ``need`` ``[C, S]``: each shape's need on the class (0 or above a device: the shape never lands
    in a gap there); ``weight`` ``[S]``: the shapes' frequencies.  A gap is filled, with probability
    ``rho(g) = min(1, p_fit(g) / fill_share)`` (``p_fit``: the frequency of the shapes that fit), by
    one of those shapes, and the gap it leaves is expected to end as ``W`` says; else it stays idle:
    ``W(g) = (1 - rho) g + rho E[W(g - need)]``.  The filler is drawn by frequency times
    ``exp(-W(g - need) / temperature)``: an arrival goes where it leaves least, so a lone 470's 530 is
    filled by the next 470 (60 left), not by a 320 that would leave a 210 only rare shapes fit.  FGD
    counts a gap as lost for every shape larger than it *now*; this is what the mix will leave of it in
    the end, so a free half that a common shape fills is cheap, and a remainder only rare shapes fit is not.
    """
    classes = need.shape[0]
    usable = (need > 0) & (need <= MILLI)
    back_at = np.clip(need, 0, MILLI)[:, None, :]
    weight = np.where(usable, weight[None, :], 0.0)[:, None, :]
    # Gaps closer together than the least need do not depend on each other: computed a block at a time.
    step = int(need[usable].min()) if usable.any() else MILLI
    waste = np.zeros((classes, MILLI + 1))
    for start in range(1, MILLI + 1, step):
        gaps = np.arange(start, min(start + step, MILLI + 1))
        fits = np.where(back_at <= gaps[None, :, None], weight, 0.0)  # [C, B, S]
        p_fit = fits.sum(axis=2)
        before = np.clip(gaps[None, :, None] - back_at, 0, MILLI).reshape(classes, -1)
        left = np.take_along_axis(waste, before, axis=1).reshape(fits.shape)
        # Measured from each gap's least end waste among its fillers, so the exponent never underflows to 0/0.
        least = np.where(fits > 0, left, np.inf).min(axis=2, keepdims=True)
        chosen = fits * np.exp(-(left - np.where(np.isfinite(least), least, 0.0)) / temperature)
        expected = (chosen * left).sum(axis=2) / np.maximum(chosen.sum(axis=2), 1e-300)
        rho = np.minimum(1.0, p_fit / fill_share)
        waste[:, gaps] = (1.0 - rho) * gaps[None, :] + rho * np.where(p_fit > 0, expected, 0.0)
    return waste


def gap_feed(need: IntArray, mix: WorkloadMix) -> tuple[IntArray, IntArray]:
    """``(cpu[c, g], mem[c, g])``: the least host CPU (millicores) and host memory (MiB) that a shape able to
    fill a gap of ``g`` on a slot of class ``c`` asks (``need`` as for :func:`gap_waste`; ``NEVER`` where
    no shape fits).  A node with less free than either can fill that gap with nothing: it ends idle."""
    gaps = np.arange(MILLI + 1)
    fits = (need > 0)[:, None, :] & (need[:, None, :] <= gaps[None, :, None])  # [C, G, S]
    cpu = np.where(fits, mix.cpu[None, None, :], NEVER).min(axis=2, initial=NEVER)
    mem = np.where(fits, mix.mem[None, None, :], NEVER).min(axis=2, initial=NEVER)
    return cpu.astype(np.int64), mem.astype(np.int64)
