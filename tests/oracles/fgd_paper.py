"""FGD's node fragmentation computed from scratch, as Weng et al. define it (USENIX ATC'23, section 3).

For a node ``n`` and a task ``m`` of the target workload ``M`` (each with its
popularity ``p_m``), the fragment ``F_n(m)`` is the node's unallocated GPU
resource that ``m`` cannot use:

* ``m`` cannot run on ``n`` (too little CPU, or fewer than ``m``'s GPU count of
  GPUs with ``m``'s per-GPU demand free): every unallocated GPU share of ``n``;
* ``m`` asks for no GPU: likewise every unallocated GPU share (none of it is
  any use to ``m``);
* otherwise, the unallocated share of each GPU that has less free than ``m``
  asks of one GPU.

``F_n(M) = sum_m p_m F_n(m)``, and FGD places a task where ``F_n(M)`` grows
least.  GPU shares are in thousandths of a device.  The paper's nodes are
homogeneous; on a node of several models a task that does not accept a model
(``models``) cannot use those GPUs, so their free share counts as fragment for
it.  This SDK's own additions, each from its documentation: a device's free
share is the scarcer of its free memory and free cores (0 for an exclusive
holder or an unhealthy device); a task also needs its host memory free; and a
shape may give its GPU memory in MiB, which asks ``ceil(MiB x 1000 / memory
that may be granted)`` thousandths of a device (at least its own share, at most
a whole device).

Nothing here imports the product: the oracle works on plain numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

WHOLE = 1000


@dataclass(frozen=True)
class TaskShape:
    cpu_milli: int = 0
    gpu_milli: int = WHOLE  # per GPU
    num_gpu: int = 1
    weight: float = 1.0
    host_memory_mib: int = 0
    gpu_mem_mib: int = 0
    models: frozenset[str] | None = None  # model keys it accepts (None: any)


@dataclass(frozen=True)
class Gpu:
    """One GPU slot of a node: its free share, its model's names and the memory that may be granted on it."""

    free: int
    names: frozenset[str] = frozenset()
    memory_capacity: int = 1


def need_on(shape: TaskShape, gpu: Gpu) -> int | None:
    """Thousandths of ``gpu`` the shape asks of one GPU (None: the GPU is no use to it, its model not
    accepted or its memory too small)."""
    if shape.models is not None and not shape.models & gpu.names:
        return None
    if shape.gpu_mem_mib > gpu.memory_capacity:
        return None
    by_memory = math.ceil(Fraction(shape.gpu_mem_mib * WHOLE, max(gpu.memory_capacity, 1)))
    return max(by_memory, shape.gpu_milli)


def task_fragment(gpus: Sequence[Gpu], cpu_free: int, mem_free: int, shape: TaskShape) -> int:
    """``F_n(m)``: the free thousandths of the node that the task shape cannot use."""
    idle = sum(g.free for g in gpus)
    if shape.num_gpu == 0:
        return idle
    needs = [need_on(shape, g) for g in gpus]
    usable = [n is not None and g.free >= n for g, n in zip(gpus, needs, strict=True)]
    runs = cpu_free >= shape.cpu_milli and mem_free >= shape.host_memory_mib and sum(usable) >= shape.num_gpu
    if not runs:
        return idle
    return sum(g.free for g, ok in zip(gpus, usable, strict=True) if not ok)


def node_fragmentation(gpus: Sequence[Gpu], cpu_free: int, mem_free: int, mix: Sequence[TaskShape]) -> float:
    """``F_n(M)``: the expected fragment over the mix, each shape weighted by its popularity."""
    total = sum(s.weight for s in mix)
    return sum(s.weight / total * task_fragment(gpus, cpu_free, mem_free, s) for s in mix)


def fgd_score(rise: float) -> int:
    """The paper's score of a candidate: ``int(100 x sigmoid(-rise / 1000))``."""
    return int(100.0 / (1.0 + math.exp(min(max(rise, -1e6), 1e6) / 1000.0)))


def fgd_score_range(rise: float, slack: float = 1e-6) -> set[int]:
    """The scores a rise computed in floating point may get: one, or two where it sits on a boundary."""
    return {fgd_score(rise - slack), fgd_score(rise + slack)}


# --- Not the paper's: the SDK's expected end waste of a device's gap, from the README's definition.

WASTE_WEIGHT = 10.0
"""The README: a share's rise also counts 10 times its device's rise of expected end waste."""
FILL_SHARE = 0.025
"""The README: a gap is filled with probability ``min(1, p_fit / 0.025)``."""
FILL_TEMPERATURE = 15.0
"""The README: a filler is drawn by popularity times ``exp(-(its end waste) / 15)``."""


def end_waste(
    gap: int, gpu: Gpu, mix: Sequence[TaskShape], fill_share: float, temperature: float = FILL_TEMPERATURE
) -> float:
    """``W(g)``: a gap of ``g`` free thousandths on ``gpu`` is filled, with probability ``min(1, p_fit /
    fill_share)`` (``p_fit``: the summed popularity of the device shapes whose need on ``gpu`` is at most
    ``g``), by one of them, drawn with chance proportional to its popularity times ``exp(-W(g - need) /
    temperature)``, and ends as ``W`` says of what it leaves; else it stays idle."""
    total = sum(s.weight for s in mix)
    needs = [(need_on(s, gpu), s.weight / total) for s in mix if s.num_gpu > 0]
    memo: dict[int, float] = {}

    def waste(g: int) -> float:
        if g not in memo:
            fits = [(n, p) for n, p in needs if n is not None and 0 < n <= min(g, WHOLE)]
            p_fit = sum(p for _, p in fits)
            if not fits:
                memo[g] = float(g)
            else:
                rho = min(1.0, p_fit / fill_share)
                ends = [(p, waste(g - n)) for n, p in fits]
                # exp(-W / T) over the fillers, each taken relative to the least W so no term underflows.
                floor = min(w for _, w in ends)
                chance = [p * math.exp(-(w - floor) / temperature) for p, w in ends]
                memo[g] = (1 - rho) * g + rho * sum(c * w for c, (_, w) in zip(chance, ends, strict=True)) / sum(chance)
        return memo[g]

    for g in range(gap + 1):  # bottom up: no deep recursion
        waste(g)
    return waste(gap)


def starved(gap: int, gpu: Gpu, mix: Sequence[TaskShape], cpu_free: int, mem_free: int) -> bool:
    """The README: a gap ends idle whatever its size when the host's free CPU or free host memory is below
    the least that any device shape fitting the gap asks (or when no shape fits it at all)."""
    fits = [s for s in mix if s.num_gpu > 0 and (n := need_on(s, gpu)) is not None and 0 < n <= min(gap, WHOLE)]
    if not fits:
        return True
    return cpu_free < min(s.cpu_milli for s in fits) or mem_free < min(s.host_memory_mib for s in fits)


def node_end_waste(gpus: Sequence[Gpu], mix: Sequence[TaskShape], cpu_free: int, mem_free: int) -> float:
    """The README: a node's expected end waste, each gap's ``W`` (``end_waste``, the README's fill share),
    or all of the gap where the host cannot feed it (``starved``)."""
    return sum(
        float(g.free) if starved(g.free, g, mix, cpu_free, mem_free) else end_waste(g.free, g, mix, FILL_SHARE)
        for g in gpus
    )

