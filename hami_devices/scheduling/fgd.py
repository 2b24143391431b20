"""Fragmentation Gradient Descent (FGD) math on arrays.

After Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
with Fragmentation Gradient Descent", USENIX ATC 2023.

Everything here works on plain numpy arrays so that the engine (which holds a
``ClusterState``) and the trace simulator (which holds its own replay arrays)
share one implementation.  Units: GPU share in thousandths of one device
("milli", 1000 = a whole device), CPU in millicores.

For a node n and a task shape m of the workload mix:

* if m cannot run on n (not enough CPU, not enough devices with m's share
  free, or a model m does not accept) every idle thousandth of n counts as
  fragmented for m;
* if m can run, only the free thousandths on devices that have less free than
  m asks per device count.

The node's fragmentation is ``F_n = sum_m p_m * frag_n(m)``; the policy places
a task where ``F_n`` grows least.  A CPU-only shape has nothing "too small" on
any device, so it only fragments a node whose CPU it cannot get.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

MILLI = 1000

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Shape:
    """One typical task shape: CPU, per-device share, device count, accepted models."""

    cpu_milli: int
    gpu_milli: int
    num_gpu: int
    models: frozenset[str] | None = None  # None: any model
    weight: float = 1.0
    mem_mib: int = 0  # host memory; only checked where the caller passes free memory


@dataclass(frozen=True)
class WorkloadMix:
    """The typical shapes with their renormalised frequencies ``p_m``."""

    shapes: tuple[Shape, ...]
    # The published simulator counts every idle thousandth as fragmented for a
    # CPU-only shape, whether or not its CPU fits (its "XL"/"XR" categories).
    cpu_only_all_idle: bool = False
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

    def model_ok(self, model_names: Sequence[str]) -> BoolArray:
        """``[S, M]``: may shape s run on a device of model index M?"""
        out = np.ones((len(self.shapes), len(model_names)), dtype=bool)
        for i, shape in enumerate(self.shapes):
            if shape.models is not None and shape.gpu_milli > 0:
                out[i] = [m in shape.models for m in model_names]
        return out

    @classmethod
    def typical(
        cls,
        shapes: Iterable[tuple[int, int, int, frozenset[str] | None]],
        coverage: float = 0.95,
    ) -> WorkloadMix:
        """The most frequent shapes covering ``coverage`` of the tasks (FGD's "typical pods").

        ``shapes`` yields one (cpu_milli, gpu_milli, num_gpu, models) per task.
        Frequencies are renormalised over the kept shapes.  Ties in frequency
        keep first-seen order, so the result is deterministic.
        """
        counts: dict[tuple[int, int, int, frozenset[str] | None], int] = {}
        for key in shapes:
            counts[key] = counts.get(key, 0) + 1
        total = sum(counts.values())
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])
        kept: list[Shape] = []
        covered = 0
        for (cpu, milli, num, models), n in ranked:
            if covered >= coverage * total:
                break
            kept.append(Shape(cpu, milli, num, models, float(n)))
            covered += n
        return cls(tuple(kept))


@dataclass
class FragTerms:
    """Per-node, per-shape partial sums that make candidate deltas cheap.

    ``count_ge[n, s]``: devices of n with at least shape s's share free;
    ``small[n, s]``: free thousandths on devices with less than that.
    """

    count_ge: IntArray
    small: IntArray
    total: IntArray


def terms(free: IntArray, mix: WorkloadMix) -> FragTerms:
    """Partial sums for ``free`` ``[N, G]`` (absent devices padded with 0)."""
    f = free[:, :, None]
    m = mix.milli[None, None, :]
    ge = f >= m
    return FragTerms(
        count_ge=ge.sum(axis=1).astype(np.int64),
        small=np.where(ge, 0, f).sum(axis=1).astype(np.int64),
        total=free.sum(axis=1).astype(np.int64),
    )


def _frag(
    count_ge: IntArray,
    small: IntArray,
    total: IntArray,
    cpu_free: IntArray,
    shape_ok: BoolArray,
    mix: WorkloadMix,
    mem_free: IntArray | None = None,
) -> FloatArray:
    """F = sum_s p_s * (fits_s ? small_s : total); shapes are the last axis.

    With ``mem_free`` a shape also needs its host memory (``Shape.mem_mib``) to fit.
    """
    fits = shape_ok & (cpu_free[..., None] >= mix.cpu) & ((mix.milli == 0) | (count_ge >= mix.num))
    if mem_free is not None:
        fits = fits & (mem_free[..., None] >= mix.mem)
    if mix.cpu_only_all_idle:
        fits = fits & (mix.milli > 0)
    per_shape = np.where(fits, small, total[..., None])
    return per_shape @ mix.weight


def node_fragmentation(free: IntArray, cpu_free: IntArray, shape_ok: BoolArray, mix: WorkloadMix) -> FloatArray:
    """``F_n`` for every node; ``shape_ok`` is ``[N, S]`` (model acceptance per node)."""
    t = terms(free, mix)
    return _frag(t.count_ge, t.small, t.total, cpu_free, shape_ok, mix)


def share_deltas(
    free: IntArray,
    cpu_free: IntArray,
    shape_ok: BoolArray,
    t: FragTerms,
    base: FloatArray,
    milli: int,
    cpu: int,
    mix: WorkloadMix,
    mem_free: IntArray | None = None,
    mem: int = 0,
) -> FloatArray:
    """``[K, G]`` increase of F_n when one device g of node n gives ``milli`` (inf where it can't)."""
    f = free[:, :, None]
    m = mix.milli[None, None, :]
    after = f - milli
    ge_old = f >= m
    ge_new = after >= m
    count_ge = t.count_ge[:, None, :] - ge_old + ge_new
    small = t.small[:, None, :] - np.where(ge_old, 0, f) + np.where(ge_new, 0, after)
    total = np.broadcast_to((t.total - milli)[:, None], free.shape)
    cpu_after = np.broadcast_to((cpu_free - cpu)[:, None], free.shape)
    mem_after = None if mem_free is None else np.broadcast_to((mem_free - mem)[:, None], free.shape)
    new = _frag(count_ge, small, total, cpu_after, shape_ok[:, None, :], mix, mem_after)
    delta = new - base[:, None]
    return np.where(free >= milli, delta, np.inf)


def whole_deltas(
    cpu_free: IntArray,
    shape_ok: BoolArray,
    t: FragTerms,
    base: FloatArray,
    num_gpu: int,
    cpu: int,
    mix: WorkloadMix,
    mem_free: IntArray | None = None,
    mem: int = 0,
) -> FloatArray:
    """``[K]`` increase of F_n when ``num_gpu`` entirely free devices (or none) are taken."""
    if num_gpu:
        count_ge = t.count_ge - np.where(mix.milli > 0, num_gpu, 0)
        total = t.total - MILLI * num_gpu
    else:
        count_ge, total = t.count_ge, t.total
    new = _frag(count_ge, t.small, total, cpu_free - cpu, shape_ok, mix, None if mem_free is None else mem_free - mem)
    return new - base
