"""The joint migration plan as a mixed-integer program, solved by HiGHS (``highspy``, the ``[research]`` extra).

The defragmenter's ``milp`` planner (``scheduling.defrag.plan.planner``), found here by name when asked for.

On an ``Instance``:

* ``e_d`` (binary): source device d is emptied; ``x_o`` (binary): option o,
  a task moved to one destination device, is taken; ``z_d`` (binary, only
  with a pending request): the pending task goes on emptied device d.
* Every task of an emptied device moves, once: ``sum_{o of t} x_o = e_d``.
* A destination holds what it takes: ``sum take_o x_o <= free_b``; a node's
  CPU and host memory likewise.
* The budget: ``sum x_o <= moves``.
* With a pending request: ``z_d <= e_d``, ``sum z_d <= 1``.

The objective, maximised: ``W * sum z_d + sum gain_d e_d - sum cost_o x_o -
penalty * sum x_o``: first room for the pending task, then the fall in FGD
fragmentation, each move paying ``penalty`` (thousandths of a device) so that
none is made for nothing.  The greedy plan (the core's) answers the same instance when the
solver runs out of time or is not installed.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator

import numpy as np

from hami_devices.extras import require
from hami_devices.scheduling.defrag.instance import Instance
from hami_devices.scheduling.defrag.plan import Solution, greedy

PENDING_WEIGHT = 1e6


_QUIET = False


@contextlib.contextmanager
def _banner_to_stderr() -> Iterator[None]:
    """HiGHS prints its banner on stdout when the first solver of a process is made: keep stdout for results."""
    global _QUIET
    if _QUIET:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        _QUIET = True


def solve(
    inst: Instance, budget: int, *, pending: bool = False, time_limit_s: float = 1.0, penalty: float = 5.0
) -> Solution:
    """The best plan within ``budget`` moves, or the greedy one when HiGHS does not prove one in time."""
    highspy = require("highspy", "the joint defragmentation plan")
    started = time.perf_counter()
    if not inst.sources or budget <= 0:
        return Solution(method="none", status="nothing to move")
    src_col = {row: i for i, row in enumerate(inst.sources)}
    n_e, n_x = len(inst.sources), len(inst.options)
    n_z = n_e if pending else 0
    cost = np.concatenate(
        [
            [inst.gain[r] for r in inst.sources],
            [-o.cost - penalty for o in inst.options],
            [PENDING_WEIGHT if r in inst.pending_ok else 0.0 for r in inst.sources] if pending else [],
        ]
    )
    n = n_e + n_x + n_z
    with _banner_to_stderr():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("threads", 1)
    upper = np.ones(n)
    if pending:
        upper[n_e + n_x :] = [1.0 if r in inst.pending_ok else 0.0 for r in inst.sources]
    empty = np.array([], dtype=np.int32)
    h.addCols(n, cost, np.zeros(n), upper, 0, empty, empty, np.array([]))
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.array([highspy.HighsVarType.kInteger] * n))
    rows: list[tuple[float, float, list[int], list[float]]] = []
    inf = highspy.kHighsInf
    by_mover: dict[int, list[int]] = {}
    for j, o in enumerate(inst.options):
        by_mover.setdefault(o.mover, []).append(n_e + j)
    for row, movers in inst.by_source.items():
        for m in movers:  # each task of an emptied source moves exactly once
            cols = by_mover.get(m, [])
            rows.append((0.0, 0.0, [*cols, src_col[row]], [1.0] * len(cols) + [-1.0]))
    for dest, free in inst.free.items():
        cols = [n_e + j for j, o in enumerate(inst.options) if o.dest == dest]
        rows.append((-inf, float(free), cols, [float(inst.options[c - n_e].take) for c in cols]))
        if dest in src_col:  # nothing moves onto a device the plan empties
            rows.append((-inf, float(len(cols)), [*cols, src_col[dest]], [1.0] * len(cols) + [float(len(cols))]))
    _host_rows(inst, n_e, rows, inf)
    rows.append((-inf, float(budget), list(range(n_e, n_e + n_x)), [1.0] * n_x))
    if pending:
        for i in range(n_e):
            rows.append((-inf, 0.0, [n_e + n_x + i, i], [1.0, -1.0]))
        rows.append((-inf, 1.0, list(range(n_e + n_x, n)), [1.0] * n_z))
    _add_rows(h, rows)
    h.changeObjectiveSense(highspy.ObjSense.kMaximize)
    h.run()
    status = h.getModelStatus()
    values = np.array(h.getSolution().col_value) if status == highspy.HighsModelStatus.kOptimal else None
    elapsed = time.perf_counter() - started
    if values is None:
        fallback = greedy(inst, budget, pending=pending)
        fallback.status = h.modelStatusToString(status)
        fallback.solve_s = elapsed
        return fallback
    objective = float(h.getInfo().objective_function_value)
    out = Solution(method="milp", status="optimal", solve_s=elapsed, objective=objective)
    out.emptied = [r for i, r in enumerate(inst.sources) if values[i] > 0.5]
    for j, o in enumerate(inst.options):
        if values[n_e + j] > 0.5:
            out.dest[o.mover] = o.dest
    if pending:
        chosen = [r for i, r in enumerate(inst.sources) if values[n_e + n_x + i] > 0.5]
        out.pending_on = chosen[0] if chosen else None
        if out.pending_on is not None:  # carry out the pending task's device first
            out.emptied.sort(key=lambda r: r != out.pending_on)
    return out


def _host_rows(inst: Instance, n_e: int, rows: list[tuple[float, float, list[int], list[float]]], inf: float) -> None:
    by_node: dict[int, list[int]] = {}
    for j, o in enumerate(inst.options):
        by_node.setdefault(inst.dest_node[o.dest], []).append(j)
    for node, options in by_node.items():
        movers = [inst.movers[inst.options[j].mover] for j in options]
        cols = [n_e + j for j in options]
        rows.append((-inf, float(inst.node_cpu[node]), cols, [float(m.cpu) for m in movers]))
        rows.append((-inf, float(inst.node_mem[node]), cols, [float(m.mem) for m in movers]))


def _add_rows(h: object, rows: list[tuple[float, float, list[int], list[float]]]) -> None:
    lower = np.array([r[0] for r in rows])
    upper = np.array([r[1] for r in rows])
    starts = np.cumsum([0] + [len(r[2]) for r in rows[:-1]]).astype(np.int32)
    index = np.array([c for r in rows for c in r[2]], dtype=np.int32)
    value = np.array([v for r in rows for v in r[3]], dtype=np.float64)
    h.addRows(len(rows), lower, upper, index.size, starts, index, value)  # type: ignore[attr-defined]
