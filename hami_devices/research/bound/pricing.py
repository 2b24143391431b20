"""Pricing for ``configlp``: the most profitable node content and device content, for given prices.

Two kinds of pattern:

* a **node pattern** of a node type: how many tasks of each class one node
  holds.  It must fit the node's host CPU and memory; its whole-device tasks
  take at most the node's devices; and its sharing tasks must fit the devices
  left: at most ``j`` shares over ``1000 / (j + 1)`` per free device (``j`` =
  1, 2, 3) and at most 1000 thousandths per free device in all.  Those are
  necessary conditions of a real placement on the node, not sufficient ones:
  how the shares sit on devices is the device patterns' job.
* a **device pattern** of a node type: the shares sharing tasks fill on one
  device (at most 1000 thousandths in all).

The node pattern's best value is a small MIP (HiGHS) whose *dual bound* is
returned: the bound of ``configlp`` is sound when every pricing value is
over-estimated, never when it is under-estimated.  The device pattern's is an
exact knapsack over integer thousandths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hami_devices.extras import require
from hami_devices.research.bound.instance import MILLI, Instance, NodeType, TaskClass

LARGE = (1, 2, 3)  # j: at most j shares over 1000 / (j + 1) on one device


@dataclass(frozen=True)
class Pattern:
    """One node's tasks, per class: (class, count) with count > 0."""

    node_type: int
    counts: tuple[tuple[int, int], ...]
    # when known to fit: per shared device (the whole-device tasks' devices aside), the shares on it
    layout: tuple[tuple[int, ...], ...] | None = None

    def value(self, instance: Instance) -> int:
        return sum(instance.classes[s].value * n for s, n in self.counts)

    def whole_devices(self, instance: Instance) -> int:
        return sum(instance.classes[s].whole * n for s, n in self.counts)

    def shares(self, instance: Instance) -> dict[int, int]:
        """Sharing tasks per share value."""
        out: dict[int, int] = {}
        for s, n in self.counts:
            c = instance.classes[s]
            if c.sharing:
                out[c.milli] = out.get(c.milli, 0) + n
        return out


@dataclass(frozen=True)
class DevicePattern:
    """One device's sharing tasks: (share, count) with count > 0."""

    node_type: int
    slots: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Priced:
    upper: float  # no pattern of the type is worth more at these prices
    best: float  # what the returned pattern is worth at these prices
    pattern: Pattern | None


def new_model() -> Any:
    highspy = require("highspy", "the offline placement bound")
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    return h


def fit_on(node: NodeType, c: TaskClass) -> int:
    """Tasks of class ``c`` one node of type ``node`` can hold on their own."""
    by_device = node.gpus // c.whole if c.whole else node.gpus * (MILLI // c.milli)
    by_cpu = node.cpu_milli // c.cpu_milli if c.cpu_milli else by_device
    by_mem = node.memory_mib // c.memory_mib if c.memory_mib else by_device
    return int(min(by_device, by_cpu, by_mem))


class NodePricer:
    """One node type's pricing MIP, built once; ``price`` changes only the objective."""

    def __init__(self, instance: Instance, type_index: int, time_limit_s: float = 10.0) -> None:
        highspy = require("highspy", "the offline placement bound")
        node = instance.types[type_index]
        self.instance, self.type_index, self.node = instance, type_index, node
        self.accepts = np.array(node.accepts, dtype=np.int64)
        classes = [instance.classes[s] for s in node.accepts]
        self.classes = classes
        self.limit = np.array([min(c.count, fit_on(node, c)) for c in classes], dtype=np.float64)
        n = len(classes)
        h = new_model()
        h.setOptionValue("time_limit", time_limit_s)
        h.setOptionValue("mip_rel_gap", 1e-7)
        inf = highspy.kHighsInf
        if n:
            h.addVars(n, np.zeros(n), self.limit)
            h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.full(n, highspy.HighsVarType.kInteger))
        cols = np.arange(n, dtype=np.int32)
        whole = np.array([float(c.whole) for c in classes])
        gpus = float(node.gpus)

        def row(hi: float, val: np.ndarray) -> None:
            keep = val != 0
            if keep.any():
                h.addRow(-inf, hi, int(keep.sum()), cols[keep], val[keep])

        row(float(node.cpu_milli), np.array([float(c.cpu_milli) for c in classes]))
        row(float(node.memory_mib), np.array([float(c.memory_mib) for c in classes]))
        row(gpus, whole)
        share = np.array([float(c.milli) if c.sharing else 0.0 for c in classes])
        row(MILLI * gpus, share + MILLI * whole)  # shares fit the devices no whole task took
        for j in LARGE:
            large = np.array([1.0 if c.sharing and c.milli * (j + 1) > MILLI else 0.0 for c in classes])
            row(j * gpus, large + j * whole)
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)
        self.h = h

    def price(self, profit: np.ndarray) -> Priced:
        """The best node pattern when a task of accepted class i (in ``node.accepts`` order) earns ``profit[i]``."""
        if profit.size == 0 or profit.max() <= 0:
            return Priced(0.0, 0.0, None)
        cost = np.maximum(profit, 0.0)  # a loss-making class is never worth taking
        h = self.h
        h.changeColsCost(cost.size, np.arange(cost.size, dtype=np.int32), cost)
        h.run()
        info = h.getInfo()
        crude = float(cost @ self.limit)  # every class at its own limit: over-estimates any pattern
        if info.primal_solution_status == 0:
            return Priced(crude, 0.0, None)
        col = np.rint(np.asarray(h.getSolution().col_value)).astype(np.int64)
        best = float(cost @ col)
        upper = min(crude, max(best, float(info.mip_dual_bound)))
        counts = tuple((int(s), int(k)) for s, k in zip(self.accepts, col, strict=True) if k > 0)
        return Priced(upper, best, Pattern(self.type_index, counts) if counts else None)


def best_device(shares: list[int], profit: list[float]) -> tuple[float, dict[int, int]]:
    """The most profitable shares on one device (repeats allowed, at most 1000 thousandths): an exact
    unbounded knapsack over integer thousandths (``best[c]``: the most profit within ``c``)."""
    best = np.zeros(MILLI + 1)
    choice = np.full(MILLI + 1, -1, dtype=np.int64)
    for i, (m, p) in enumerate(zip(shares, profit, strict=True)):
        if p <= 0:
            continue
        # capacities in blocks of m, in rising order: block k reads block k-1 as already updated (repeats)
        for lo in range(m, MILLI + 1, m):
            hi = min(lo + m, MILLI + 1)
            candidate = best[lo - m : hi - m] + p
            better = candidate > best[lo:hi] + 1e-12
            best[lo:hi] = np.where(better, candidate, best[lo:hi])
            choice[lo:hi] = np.where(better, i, choice[lo:hi])
    slots: dict[int, int] = {}
    cap = MILLI
    while cap > 0 and choice[cap] >= 0:
        m = shares[int(choice[cap])]
        slots[m] = slots.get(m, 0) + 1
        cap -= m
    return float(best[MILLI]), slots
