"""A defragmentation round's plan, and the planners that make one: the interface the core defines.

A planner takes the reduced instance, the moves allowed and whether a pending task waits, and returns a
``Solution``.  ``greedy`` is the core's own; ``milp`` (the joint plan by HiGHS) is placement research and
lives in ``hami_devices.research.defrag.milp``, imported by name only when a round asks for it, so the core
neither loads it nor needs its solver.  Without the ``[research]`` extra it raises ``MissingExtra``
naming that extra.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from typing import Protocol

from hami_devices.errors import InvalidConfig
from hami_devices.scheduling.defrag.instance import Instance


@dataclass
class Solution:
    emptied: list[int] = field(default_factory=list)  # source rows, in the order to carry them out
    dest: dict[int, int] = field(default_factory=dict)  # mover index -> destination row
    pending_on: int | None = None
    method: str = "none"  # "milp", "greedy" (the fallback) or "none" (nothing worth doing)
    status: str = ""
    solve_s: float = 0.0
    objective: float = 0.0


class Planner(Protocol):
    def __call__(self, inst: Instance, budget: int, *, pending: bool = False) -> Solution: ...


# name -> the module whose ``solve(inst, budget, *, pending, time_limit_s)`` plans (outside the core)
RESEARCH_PLANNERS = {"milp": "hami_devices.research.defrag.milp"}
PLANNER_NAMES = ("greedy", *RESEARCH_PLANNERS)


def planner(name: str, time_limit_s: float = 1.0) -> Planner:
    """The planner called ``name`` (``greedy`` or ``milp``), the solver's time limit bound in."""
    if name == "greedy":
        return greedy
    home = RESEARCH_PLANNERS.get(name)
    if home is None:
        raise InvalidConfig("solver", f"one of {', '.join(PLANNER_NAMES)}, not {name!r}")

    def research(inst: Instance, budget: int, *, pending: bool = False) -> Solution:
        solve = importlib.import_module(home).solve
        plan: Solution = solve(inst, budget, pending=pending, time_limit_s=time_limit_s)
        return plan

    return research


def greedy(inst: Instance, budget: int, *, pending: bool = False) -> Solution:
    """Sources best first (a pending task's first); each task to its cheapest destination with room left."""
    started = time.perf_counter()
    free = dict(inst.free)
    cpu = dict(inst.node_cpu)
    mem = dict(inst.node_mem)
    out = Solution(method="greedy", status="greedy")
    options: dict[int, list[int]] = {}
    for j, o in enumerate(inst.options):
        options.setdefault(o.mover, []).append(j)
    order = sorted(inst.sources, key=lambda r: (not (pending and r in inst.pending_ok), -inst.gain[r]))
    left = budget
    received: set[int] = set()
    for row in order:
        movers = inst.by_source[row]
        if len(movers) > left or (not pending and inst.gain[row] <= 0) or (pending and out.pending_on is not None):
            continue
        if row in received:
            continue
        trial: dict[int, int] = {}
        f, c, m_ = dict(free), dict(cpu), dict(mem)
        for m in movers:
            mover = inst.movers[m]
            for j in sorted(options.get(m, []), key=lambda j: inst.options[j].cost):
                o = inst.options[j]
                node = inst.dest_node[o.dest]
                usable = o.dest not in out.emptied and o.dest != row
                if usable and o.take <= f[o.dest] and mover.cpu <= c[node] and mover.mem <= m_[node]:
                    f[o.dest] -= o.take
                    c[node] -= mover.cpu
                    m_[node] -= mover.mem
                    trial[m] = o.dest
                    break
            else:
                break
        if len(trial) != len(movers):
            continue
        free, cpu, mem = f, c, m_
        received.update(trial.values())
        out.dest.update(trial)
        out.emptied.append(row)
        left -= len(movers)
        if pending and row in inst.pending_ok:
            out.pending_on = row
    out.solve_s = time.perf_counter() - started
    return out
