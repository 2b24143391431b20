"""Node patterns that really fit, for the offline packing: column generation over whole device layouts.

The bound's node patterns meet only necessary conditions for their shares to
fit their devices.  Here a node pattern is built from device patterns (the
bound's, and each share alone): it takes ``v_q`` devices laid out as pattern
``q``, its whole-device tasks take devices of their own, and its sharing tasks
of each share fill the slots of that share.  Every pattern found this way
fits a node as it stands, so the LP over them is a restriction, not a
relaxation: its rounding (``packing``) is a real placement.
"""

from __future__ import annotations

import time

import numpy as np

from hami_devices.extras import require
from hami_devices.research.bound.configlp import Master
from hami_devices.research.bound.instance import MILLI, Instance
from hami_devices.research.bound.pricing import DevicePattern, Pattern, fit_on, new_model


class LaidOutPricer:
    """One node type's MIP over classes and device layouts; ``price`` changes only the objective."""

    def __init__(self, instance: Instance, type_index: int, devices: list[tuple[tuple[int, int], ...]],
                 time_limit_s: float = 5.0) -> None:
        highspy = require("highspy", "the offline placement bound")
        node = instance.types[type_index]
        self.instance, self.type_index, self.node = instance, type_index, node
        self.accepts = list(node.accepts)
        classes = [instance.classes[s] for s in self.accepts]
        self.devices = devices
        nx, nv = len(classes), len(devices)
        h = new_model()
        h.setOptionValue("time_limit", time_limit_s)
        h.setOptionValue("mip_rel_gap", 1e-6)
        inf = highspy.kHighsInf
        upper = [float(min(c.count, fit_on(node, c))) for c in classes] + [float(node.gpus)] * nv
        if nx + nv:
            h.addVars(nx + nv, np.zeros(nx + nv), np.array(upper))
            h.changeColsIntegrality(nx + nv, np.arange(nx + nv, dtype=np.int32),
                                    np.full(nx + nv, highspy.HighsVarType.kInteger))

        def row(lo: float, hi: float, idx: list[int], val: list[float]) -> None:
            if idx:
                h.addRow(lo, hi, len(idx), np.array(idx, dtype=np.int32), np.array(val, dtype=np.float64))

        row(-inf, float(node.cpu_milli), list(range(nx)), [float(c.cpu_milli) for c in classes])
        row(-inf, float(node.memory_mib), list(range(nx)), [float(c.memory_mib) for c in classes])
        row(-inf, float(node.gpus), [i for i, c in enumerate(classes) if c.whole] + [nx + q for q in range(nv)],
            [float(c.whole) for c in classes if c.whole] + [1.0] * nv)
        for m in sorted({c.milli for c in classes if c.sharing}):
            members = [i for i, c in enumerate(classes) if c.sharing and c.milli == m]
            slots = [(nx + q, float(dict(d).get(m, 0))) for q, d in enumerate(devices) if dict(d).get(m, 0)]
            row(-inf, 0.0, members + [i for i, _ in slots], [1.0] * len(members) + [-v for _, v in slots])
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)
        self.h, self.nx = h, nx

    def price(self, profit: np.ndarray) -> tuple[float, Pattern | None]:
        if profit.size == 0 or profit.max() <= 0:
            return 0.0, None
        cost = np.concatenate([np.maximum(profit, 0.0), np.zeros(len(self.devices))])
        self.h.changeColsCost(cost.size, np.arange(cost.size, dtype=np.int32), cost)
        self.h.run()
        if self.h.getInfo().primal_solution_status == 0:
            return 0.0, None
        col = np.rint(np.asarray(self.h.getSolution().col_value)).astype(np.int64)
        counts = tuple((self.accepts[i], int(k)) for i, k in enumerate(col[: self.nx]) if k > 0)
        if not counts:
            return 0.0, None
        return float(cost @ col), Pattern(self.type_index, counts, self._layout(counts, col[self.nx :]))

    def _layout(self, counts: tuple[tuple[int, int], ...], uses: np.ndarray) -> tuple[tuple[int, ...], ...]:
        """The shared devices, each with the shares that are really taken (empty slots dropped)."""
        need: dict[int, int] = {}
        for s, n in counts:
            c = self.instance.classes[s]
            if c.sharing:
                need[c.milli] = need.get(c.milli, 0) + n
        out: list[tuple[int, ...]] = []
        for q, k in enumerate(uses):
            for _ in range(int(k)):
                on: list[int] = []
                for m, slots in self.devices[q]:
                    take = min(slots, need.get(m, 0))
                    on.extend([m] * take)
                    need[m] = need.get(m, 0) - take
                if on:
                    out.append(tuple(on))
        return tuple(out)


def laid_out_patterns(
    instance: Instance, devices: list[DevicePattern], start: list[Pattern], *, max_rounds: int = 200,
    time_limit_s: float = 600.0,
) -> list[Pattern]:
    """Column generation over patterns that fit (``start`` must already fit, with its layout)."""
    started = time.perf_counter()
    master = Master(instance)
    for pattern in start:
        master.add(pattern)
    pricers = []
    for t, node in enumerate(instance.types):
        shares = sorted({instance.classes[s].milli for s in node.accepts if instance.classes[s].sharing})
        mine = {d.slots for d in devices if d.node_type == t} | {((m, MILLI // m),) for m in shares}
        pricers.append(LaidOutPricer(instance, t, sorted(mine)))
    values = np.array([c.value for c in instance.classes], dtype=np.float64)
    seen = {(p.node_type, p.counts) for p in start}
    for _ in range(max_rounds):
        _, _, prices = master.solve()
        pi = prices[master.row_class : master.row_class + len(instance.classes)]
        added = 0
        for t, node in enumerate(instance.types):
            best, found = pricers[t].price(np.array([values[s] - pi[s] for s in node.accepts]))
            if found is not None and best > prices[t] + 1e-6 and (t, found.counts) not in seen:
                seen.add((t, found.counts))
                master.add(found)
                added += 1
        if added == 0 or time.perf_counter() - started > time_limit_s:
            break
    return master.patterns
