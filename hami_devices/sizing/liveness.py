"""Peak live memory over a plan's steps, in execution order.

A tensor is allocated when the step that writes it runs and freed right after its
last reader runs.  Parameters are resident for the whole run; graph inputs too (the
caller holds them), and graph outputs from their step to the end (they are handed
back).  Each step's outputs exist while its inputs are still held, so the live set of
a step is everything allocated before it and not yet freed, plus what it writes,
plus the scratch it holds while it runs (``Step.workspace``).

A view (``aliases``: a reshape of a tensor, as both eager frameworks and graph
runtimes make it) allocates nothing; it keeps the storage it views alive as long as
it is read itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hami_devices.sizing.plan import Step


@dataclass(frozen=True)
class Liveness:
    resident: int  # parameters and graph inputs, held throughout
    peak: int  # the largest live total, resident included
    peak_step: int  # index of the step where it is reached
    live_at_peak: tuple[str, ...]  # the transient tensors live there

    @property
    def transient_peak(self) -> int:
        return self.peak - self.resident


def storage_of(name: str, aliases: Mapping[str, str]) -> str:
    while name in aliases:
        name = aliases[name]
    return name


def last_readers(steps: Sequence[Step], aliases: Mapping[str, str] | None = None) -> dict[str, int]:
    """The index of the last step that reads each storage (a view's reads count for what it views)."""
    last: dict[str, int] = {}
    for index, step in enumerate(steps):
        for name in step.reads:
            last[storage_of(name, aliases or {})] = index
    return last


def peak_live(
    steps: Sequence[Step],
    size: Callable[[str], int],
    resident: Iterable[str],
    kept: Iterable[str] = (),
    aliases: Mapping[str, str] | None = None,
) -> Liveness:
    """The peak of ``resident`` plus the live transient tensors over ``steps`` (see the module doc).

    ``size`` gives a tensor's bytes; ``kept`` are transient tensors never freed (graph outputs).
    """
    held = set(resident)
    base = sum(size(n) for n in held)
    aliases = aliases or {}
    never_free = {storage_of(n, aliases) for n in kept}
    last = last_readers(steps, aliases)
    live: dict[str, int] = {}
    current = base
    best, best_step = base, 0
    best_live: tuple[str, ...] = ()
    for index, step in enumerate(steps):
        for name in step.writes:
            if name not in held and name not in live and name not in aliases:
                live[name] = size(name)
                current += live[name]
        if current + step.workspace > best:
            best, best_step, best_live = current + step.workspace, index, tuple(live)
        for name in {storage_of(n, aliases) for n in (*step.reads, *step.writes)}:
            if name in live and name not in never_free and last.get(name, -1) <= index:
                current -= live.pop(name)
    return Liveness(base, best, best_step, best_live)
