"""A feasible offline placement, from the configuration LP: the bound's patterns, made whole and topped up.

1. Patterns that really fit a node: the bound's node patterns whose sharing
   tasks fit the devices the whole-device tasks leave (first-fit decreasing),
   then more from a column generation over laid-out devices (``exact``).
2. Choose how many nodes of each type hold each pattern, in integers,
   within the node and task counts, for the most GPU value: a MIP (HiGHS) over
   those patterns, the best it finds in its time limit.
3. Lay those patterns out on the nodes, then offer every task still out, in
   falling GPU value, the node and device where it leaves the least free share
   (best fit).

The result maps each placed arrival to its node and devices; ``check`` holds
it to the trace independently.  It knows the whole sequence and may refuse a
task (a scheduler that holds tasks back): it shows what the bound's gap to a
real placement is made of.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from hami_devices.extras import require
from hami_devices.research.bound.configlp import ConfigBound
from hami_devices.research.bound.exact import laid_out_patterns
from hami_devices.research.bound.instance import MILLI, Instance
from hami_devices.research.bound.pricing import Pattern, new_model

Grants = tuple[tuple[int, int], ...]  # ((device, thousandths), ...)
Grant = tuple[int, Grants]  # (node row, grants)


@dataclass
class OfflinePacking:
    instance: Instance
    placed: dict[int, Grant]  # arrival position -> where it runs
    allocated_milli: int
    from_patterns_milli: int  # granted by step 2, before the top-up
    solve_s: float

    @property
    def unallocated_pct(self) -> float:
        return self.instance.unallocated_pct(self.allocated_milli)


def with_layout(instance: Instance, pattern: Pattern) -> Pattern | None:
    """``pattern`` with its shared devices laid out first-fit decreasing, or None when they do not fit."""
    if pattern.layout is not None:
        return pattern
    gpus = instance.types[pattern.node_type].gpus - pattern.whole_devices(instance)
    if gpus < 0:
        return None
    devices: list[list[int]] = []
    shares = sorted((m for m, n in pattern.shares(instance).items() for _ in range(n)), reverse=True)
    for m in shares:
        home = next((d for d in devices if sum(d) + m <= MILLI), None)
        if home is not None:
            home.append(m)
        elif len(devices) < gpus:
            devices.append([m])
        else:
            return None
    return Pattern(pattern.node_type, pattern.counts, tuple(tuple(d) for d in devices))


def choose_patterns(instance: Instance, patterns: list[Pattern], time_limit_s: float) -> np.ndarray:
    """Nodes per pattern, integers within the node and task counts, of the most value (HiGHS MIP)."""
    highspy = require("highspy", "the offline placement bound")
    n = len(patterns)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    h = new_model()
    h.setOptionValue("time_limit", time_limit_s)
    h.setOptionValue("mip_rel_gap", 1e-5)
    t_count = len(instance.types)
    rows = t_count + len(instance.classes)
    upper = np.array([t.count for t in instance.types] + [c.count for c in instance.classes], dtype=np.float64)
    empty = np.zeros(0, np.int32)
    h.addRows(rows, np.full(rows, -highspy.kHighsInf), upper, 0, empty, empty, np.zeros(0))
    for p in patterns:
        idx = np.array([p.node_type] + [t_count + s for s, _ in p.counts], dtype=np.int32)
        val = np.array([1.0] + [float(k) for _, k in p.counts])
        h.addCol(-float(p.value(instance)), 0.0, float(instance.types[p.node_type].count), idx.size, idx, val)
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.full(n, highspy.HighsVarType.kInteger))
    h.run()
    if h.getInfo().primal_solution_status == 0:
        return np.zeros(n, dtype=np.int64)
    use: np.ndarray = np.maximum(np.rint(np.asarray(h.getSolution().col_value)), 0).astype(np.int64)
    return use


class _Free:
    """Free CPU, memory and per-device share of the trace's nodes, as tasks are laid down."""

    def __init__(self, instance: Instance, rows: int, gpus: int) -> None:
        self.cpu = np.zeros(rows, dtype=np.int64)
        self.mem = np.zeros(rows, dtype=np.int64)
        self.dev = np.full((rows, gpus), -1, dtype=np.int64)  # -1: no such device
        self.type_of = np.full(rows, -1, dtype=np.int64)
        for t, nt in enumerate(instance.types):
            r = np.array(nt.nodes)
            self.cpu[r], self.mem[r], self.type_of[r] = nt.cpu_milli, nt.memory_mib, t
            self.dev[r, : nt.gpus] = MILLI

    def take(self, row: int, cpu: int, mem: int, grants: tuple[tuple[int, int], ...]) -> None:
        self.cpu[row] -= cpu
        self.mem[row] -= mem
        for g, m in grants:
            self.dev[row, g] -= m


def offline_packing(bound: ConfigBound, time_limit_s: float = 60.0) -> OfflinePacking:
    started = time.perf_counter()
    inst = bound.instance
    start = [q for p in bound.patterns for q in [with_layout(inst, p)] if q is not None]
    patterns = laid_out_patterns(inst, bound.devices, start)
    use = choose_patterns(inst, patterns, time_limit_s)
    rows = max((max(t.nodes) for t in inst.types if t.nodes), default=-1) + 1
    free = _Free(inst, rows, max((t.gpus for t in inst.types), default=1))
    waiting = {s: list(c.tasks) for s, c in enumerate(inst.classes)}
    unused = {t: list(nt.nodes) for t, nt in enumerate(inst.types)}
    placed: dict[int, Grant] = {}
    for p, k in zip(patterns, use, strict=True):
        for _ in range(int(k)):
            row = unused[p.node_type].pop(0)
            for arrival, grants in _lay(inst, p, waiting):
                c = inst.classes[inst.class_of[arrival]]
                placed[arrival] = (row, grants)
                free.take(row, c.cpu_milli, c.memory_mib, grants)
    from_patterns = sum(inst.classes[inst.class_of[a]].value for a in placed)
    rest = sorted((a for s in waiting for a in waiting[s]), key=lambda a: -inst.classes[inst.class_of[a]].value)
    for a in rest:
        grant = _best_fit(inst, free, inst.class_of[a])
        if grant is not None:
            c = inst.classes[inst.class_of[a]]
            placed[a] = grant
            free.take(grant[0], c.cpu_milli, c.memory_mib, grant[1])
    allocated = sum(inst.classes[inst.class_of[a]].value for a in placed)
    return OfflinePacking(inst, placed, allocated, from_patterns, time.perf_counter() - started)


def _lay(instance: Instance, pattern: Pattern, waiting: dict[int, list[int]]) -> list[tuple[int, Grants]]:
    """Arrivals (taken from ``waiting``) and their devices for one node holding ``pattern``."""
    assert pattern.layout is not None
    out: list[tuple[int, Grants]] = []
    by_share: dict[int, list[int]] = {}
    device = 0
    for s, n in pattern.counts:
        c = instance.classes[s]
        for _ in range(n):
            arrival = waiting[s].pop()
            if c.sharing:
                by_share.setdefault(c.milli, []).append(arrival)
            else:
                out.append((arrival, tuple((device + g, MILLI) for g in range(c.whole))))
                device += c.whole
    for shares in pattern.layout:
        for m in shares:
            out.append((by_share[m].pop(), ((device, m),)))
        device += 1
    return out


def _best_fit(instance: Instance, free: _Free, s: int) -> Grant | None:
    """The node and devices where class ``s`` leaves the least free share, or None when it fits nowhere."""
    c = instance.classes[s]
    rows = np.concatenate([np.array(instance.types[t].nodes, dtype=np.int64) for t in range(len(instance.types))
                           if s in instance.types[t].accepts] or [np.zeros(0, dtype=np.int64)])
    rows = rows[(free.cpu[rows] >= c.cpu_milli) & (free.mem[rows] >= c.memory_mib)]
    if rows.size == 0:
        return None
    dev = free.dev[rows]
    if c.sharing:
        fits = dev >= c.milli
        left = np.where(fits, dev - c.milli, MILLI + 1)
        flat = int(np.argmin(left))
        r, g = divmod(flat, dev.shape[1])
        return (int(rows[r]), ((g, c.milli),)) if fits[r, g] else None
    whole = dev == MILLI
    ok = whole.sum(axis=1) >= c.whole
    if not ok.any():
        return None
    idle = np.where(dev > 0, dev, 0).sum(axis=1)
    r = int(np.flatnonzero(ok)[np.argmin(idle[ok])])
    gs = np.flatnonzero(whole[r])[: c.whole]
    return int(rows[r]), tuple((int(g), MILLI) for g in gs)
