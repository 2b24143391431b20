"""An upper bound on the GPU share any placement of an instance can grant: a configuration LP, by column generation.

Variables: ``y_p >= 0``, the nodes holding node pattern ``p``, and ``w_q >= 0``,
the devices holding device pattern ``q`` (``pricing``).  Maximise the GPU
value of the node patterns subject to, per node type ``t``:

* ``sum_{p of t} y_p <= N_t``  (nodes);
* ``sum_{p of t} whole_p y_p + sum_{q of t} w_q <= G_t N_t``  (devices: taken whole, or shared);
* per share value ``m``: ``sum_{p of t} shares_pm y_p <= sum_{q of t} slots_qm w_q``  (each sharing task sits
  on a device of its node's type, in a device pattern's slot of its share);

and per task class ``s``: ``sum_p count_ps y_p <= n_s``.  Every placement of
a subset of the tasks gives a point of it in integers: count the nodes by
their content and the shared devices by theirs.  So its optimum bounds every
placement.  What it gives up: integrality, and that the device patterns of a
node type come from the same nodes as its node patterns (each node pattern only
meets necessary conditions for its shares to fit its devices).

The optimum is not needed exactly.  For *any* prices ``pi, nu, lam >= 0`` on
the class, device and slot rows, weak (Lagrangian) duality gives, with
``nu_t`` raised to at least the best device pattern's slot value
``max_q lam_t . slots_q`` (an exact knapsack),

    every placement's value <= sum_s pi_s n_s + sum_t (nu_t G_t N_t + N_t max(0, best node pattern's profit))

where a task of class s on type t earns ``value_s - pi_s - (lam_tm, or nu_t per whole device)`` and the
node pattern's best profit is over-estimated by its MIP's dual bound.  The
bound reported is the least of these over the rounds, whatever the LP
solver's tolerances or where the column generation stopped: the LP only finds
good prices.  Rounds stop when that bound is within ``gap_milli`` of the
restricted LP's value, or no pattern improves it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from hami_devices.extras import require
from hami_devices.research.bound.instance import MILLI, Instance
from hami_devices.research.bound.pricing import DevicePattern, NodePricer, Pattern, best_device, new_model

ELASTIC = 1e6  # per task of a required class left out, in the LP that finds prices (never in the bound)


@dataclass
class ConfigBound:
    instance: Instance
    upper_milli: float  # no placement grants more (sound)
    lp_milli: float  # the restricted LP's value at the end
    patterns: list[Pattern]
    devices: list[DevicePattern]
    usage: np.ndarray  # the LP's y per node pattern
    rounds: int
    solve_s: float
    history: list[tuple[float, float]] = field(default_factory=list, repr=False)  # (lp, bound) per round

    @property
    def bound_pct(self) -> float:
        """No placement leaves less of the cluster's GPU share unallocated."""
        return self.instance.unallocated_pct(min(self.upper_milli, self.instance.arrived_milli))


class Master:
    """The restricted LP over the patterns found so far (HiGHS; it minimises minus the GPU value)."""

    def __init__(self, instance: Instance) -> None:
        self.highspy = require("highspy", "the offline placement bound")
        self.instance = instance
        types, classes = instance.types, instance.classes
        self.shares = [sorted({classes[s].milli for s in t.accepts if classes[s].sharing}) for t in types]
        t_count, s_count = len(types), len(classes)
        self.row_class = t_count
        self.row_device = t_count + s_count
        self.row_slot: list[dict[int, int]] = []
        next_row = self.row_device + t_count
        for shares in self.shares:
            self.row_slot.append({m: next_row + i for i, m in enumerate(shares)})
            next_row += len(shares)
        upper = np.zeros(next_row)
        upper[:t_count] = [t.count for t in types]
        upper[t_count : t_count + s_count] = [c.count for c in classes]
        upper[self.row_device : self.row_device + t_count] = [t.gpus * t.count for t in types]
        self.h = new_model()
        inf = self.highspy.kHighsInf
        self.required = np.array([c.required for c in classes], dtype=bool)
        lower = np.full(next_row, -inf)
        lower[t_count : t_count + s_count][self.required] = upper[t_count : t_count + s_count][self.required]
        empty = np.zeros(0, np.int32)
        self.h.addRows(next_row, lower, upper, 0, empty, empty, np.zeros(0))
        for s in np.flatnonzero(self.required):  # elastic: a shortfall costs more than any task is worth
            self.h.addCol(ELASTIC, 0.0, inf, 1, np.array([t_count + s], dtype=np.int32), np.array([1.0]))
        self.rows = next_row
        self.patterns: list[Pattern] = []
        self.devices: list[DevicePattern] = []
        self._columns: list[str] = ["e"] * int(self.required.sum())  # "e" elastic, "n" node or "d" device

    def add(self, pattern: Pattern) -> None:
        inst, t = self.instance, pattern.node_type
        devices = pattern.whole_devices(inst) + (len(pattern.layout) if pattern.layout is not None else 0)
        entries: dict[int, float] = {t: 1.0, self.row_device + t: float(devices)}
        for s, n in pattern.counts:
            entries[self.row_class + s] = float(n)
        if pattern.layout is None:  # its shares sit in the type's device patterns' slots
            for m, n in pattern.shares(inst).items():
                entries[self.row_slot[t][m]] = float(n)
        self._add_column(-float(pattern.value(inst)), entries)
        self.patterns.append(pattern)
        self._columns.append("n")

    def add_device(self, pattern: DevicePattern) -> None:
        t = pattern.node_type
        entries = {self.row_device + t: 1.0}
        for m, n in pattern.slots:
            entries[self.row_slot[t][m]] = -float(n)
        self._add_column(0.0, entries)
        self.devices.append(pattern)
        self._columns.append("d")

    def _add_column(self, cost: float, entries: dict[int, float]) -> None:
        keep = {r: v for r, v in entries.items() if v != 0}
        idx = np.array(sorted(keep), dtype=np.int32)
        self.h.addCol(cost, 0.0, self.highspy.kHighsInf, idx.size, idx, np.array([keep[int(r)] for r in idx]))

    def solve(self) -> tuple[float, np.ndarray, np.ndarray]:
        """LP value, usage per node pattern, and the row prices (>= 0, but for the rows of required classes:
        equalities, whose prices may have either sign)."""
        if not self.patterns and not self.devices:
            return 0.0, np.zeros(0), np.zeros(self.rows)
        self.h.run()
        sol = self.h.getSolution()
        prices = -np.asarray(sol.row_dual)  # a <= row of a minimisation has a dual <= 0
        free_sign = np.zeros(self.rows, dtype=bool)
        free_sign[self.row_class : self.row_class + self.required.size] = self.required
        prices = np.where(free_sign, prices, np.maximum(prices, 0.0))
        value = -float(self.h.getInfo().objective_function_value)
        col = np.asarray(sol.col_value)
        usage = np.array([v for v, kind in zip(col, self._columns, strict=True) if kind == "n"])
        return value, usage, prices


def _seed_devices(master: Master) -> None:
    """Each share alone, as many times as fit on a device: the LP can use shares from the first round."""
    for t, shares in enumerate(master.shares):
        for m in shares:
            master.add_device(DevicePattern(t, ((m, MILLI // m),)))


def config_bound(
    instance: Instance, *, gap_milli: float = 100.0, max_rounds: int = 500, time_limit_s: float = 900.0
) -> ConfigBound:
    """Column generation for the configuration LP; the bound is the best Lagrangian value met."""
    started = time.perf_counter()
    master = Master(instance)
    _seed_devices(master)
    pricers = [NodePricer(instance, t) for t in range(len(instance.types))]
    values = np.array([c.value for c in instance.classes], dtype=np.float64)
    counts = np.array([c.count for c in instance.classes], dtype=np.float64)
    best = float(values @ counts)  # placing every task: always an upper bound
    history: list[tuple[float, float]] = []
    seen: set[tuple[int, tuple[tuple[int, int], ...]]] = set()
    rounds, lp, usage = 0, 0.0, np.zeros(0)
    while rounds < max_rounds:
        rounds += 1
        lp, usage, prices = master.solve()
        pi = prices[master.row_class : master.row_class + len(instance.classes)]
        bound = float(pi @ counts)
        added = 0
        for t, node in enumerate(instance.types):
            lam = {m: prices[r] for m, r in master.row_slot[t].items()}
            shares = master.shares[t]
            device_value, slots = best_device(shares, [lam[m] for m in shares])
            nu = max(prices[master.row_device + t], device_value)
            if device_value > prices[master.row_device + t] + 1e-6 and slots:
                master.add_device(DevicePattern(t, tuple(sorted(slots.items()))))
                added += 1
            profit = np.array([
                values[s] - pi[s] - (lam[instance.classes[s].milli] if instance.classes[s].sharing
                                     else nu * instance.classes[s].whole)
                for s in node.accepts
            ])
            priced = pricers[t].price(profit)
            bound += nu * node.gpus * node.count + node.count * max(0.0, priced.upper)
            p = priced.pattern
            if p is not None and priced.best > prices[t] + 1e-6 and (t, p.counts) not in seen:
                seen.add((t, p.counts))
                master.add(p)
                added += 1
        best = min(best, bound)
        history.append((lp, best))
        if added == 0 or best - lp <= gap_milli or time.perf_counter() - started > time_limit_s:
            break
    lp, usage, _ = master.solve()
    return ConfigBound(instance, best, lp, master.patterns, master.devices, usage, rounds,
                       time.perf_counter() - started, history)
