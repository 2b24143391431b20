"""A bound for schedulers bound by the protocol's admission rule: a task that fits somewhere is placed.

``configlp`` bounds every placement of the arrived tasks, including those that
leave out a task that would fit.  Under the protocol a scheduler may not: on
openb the offline packing leaves out about a fifth of the 810-thousandth tasks
to give their devices to whole-device ones, which no protocol-bound scheduler
can do while a device with 810 free remains.

Take a *probe* class P: a sharing class that accepts any model (the one of
most thousandths asked in all).  Call *blocked by P* every task that needs at
least as much of everything P needs: host CPU and memory at least P's, and a
device with at least P's share free (whole-device tasks, and sharing tasks of
a share at least P's).  In any run under the rule, let tau be the arrival of
the first P task left out (none: tau = end).  Then every P task before tau was
placed; and after tau no node holds P's host share and P's device share, so
no task blocked by P that arrives after tau can be placed (nothing departs:
room only shrinks).

So, for tau the (i+1)-th P arrival with ``a <= i < b``: the first ``a`` P
tasks are placed (a required class), and the P tasks from the b-th on and the
tasks blocked by P that arrive after the b-th P arrival are out.  ``configlp`` bounds each
such restricted instance; the largest of those bounds, over intervals that
cover every tau, bounds every scheduler that obeys the rule.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from hami_devices.research.bound.configlp import config_bound
from hami_devices.research.bound.instance import Instance, NodeType, TaskClass

CUTS_FROM_END = (0, 5, 10, 20, 30, 40, 50, 65, 80, 100, 150, 250, 500)
"""P arrivals from the last at which the intervals of tau are cut: finer where the cluster is full."""


@dataclass
class AdmissionBound:
    upper_milli: float  # no scheduler obeying the rule grants more
    instance: Instance
    probe: int  # the class of P
    intervals: list[tuple[int, int, float]]  # (a, b, bound of that interval), a and b counted in P arrivals
    solve_s: float

    @property
    def bound_pct(self) -> float:
        return self.instance.unallocated_pct(min(self.upper_milli, self.instance.arrived_milli))


def probe_class(instance: Instance) -> int:
    sharing = [i for i, c in enumerate(instance.classes) if c.sharing and c.models is None]
    if not sharing:
        raise ValueError("no sharing class accepts every model: no probe for the admission bound")
    return max(sharing, key=lambda i: instance.classes[i].count * instance.classes[i].milli)


def blocked_by(probe: TaskClass, c: TaskClass) -> bool:
    needs_device = c.whole > 0 or (c.sharing and c.milli >= probe.milli)
    return needs_device and c.cpu_milli >= probe.cpu_milli and c.memory_mib >= probe.memory_mib


def restricted(instance: Instance, probe: int, placed_upto: int, out_from: int | None) -> Instance:
    """P's first ``placed_upto`` arrivals required; from P's arrival number ``out_from`` (0-based) on, P and
    the tasks blocked by P that arrive after it left out (``out_from`` None: nothing left out)."""
    p = instance.classes[probe]
    cut = p.tasks[out_from] if out_from is not None else None
    classes: list[TaskClass] = []
    derived: dict[int, list[int]] = {}
    for i, c in enumerate(instance.classes):
        if i == probe:
            parts = [(c.tasks[:placed_upto], True), (c.tasks[placed_upto : out_from], False)]
        elif cut is not None and blocked_by(p, c):
            parts = [(tuple(a for a in c.tasks if a < cut), False)]
        else:
            parts = [(c.tasks, False)]
        for tasks, required in parts:
            if tasks:
                derived.setdefault(i, []).append(len(classes))
                classes.append(TaskClass(c.cpu_milli, c.memory_mib, c.num_gpu, c.milli, c.models, tuple(tasks),
                                         required))
    types = tuple(
        NodeType(t.cpu_milli, t.memory_mib, t.gpus, tuple(j for i in t.accepts for j in derived.get(i, [])), t.nodes)
        for t in instance.types
    )
    class_of = [-1] * len(instance.pods)
    for j, c in enumerate(classes):
        for a in c.tasks:
            class_of[a] = j
    return Instance(tuple(classes), types, instance.capacity_milli, instance.arrived_milli, instance.pods,
                    tuple(class_of))


def admission_bound(
    instance: Instance, cuts_from_end: tuple[int, ...] = CUTS_FROM_END, plain_milli: float | None = None
) -> AdmissionBound:
    """The largest configuration-LP bound over intervals of tau that cover every P arrival and none, or the
    plain bound (``plain_milli``, computed when not given) when less: both hold, so their least does (an
    interval whose required tasks cannot all be placed gets a loose bound from the LP's elastic prices)."""
    started = time.perf_counter()
    plain = config_bound(instance).upper_milli if plain_milli is None else plain_milli
    probe = probe_class(instance)
    k = instance.classes[probe].count
    cuts = sorted({max(0, k - c) for c in cuts_from_end} | {0})
    # tau = end: every P task placed, nothing left out
    intervals: list[tuple[int, int, float]] = [(k, k, config_bound(restricted(instance, probe, k, None)).upper_milli)]
    bounds = list(zip(cuts, [*cuts[1:], k], strict=True))
    for a, b in bounds:  # tau is P arrival number i (0-based), a <= i < b: P arrival b - 1 and later are out
        if a == b:
            continue
        intervals.append((a, b, config_bound(restricted(instance, probe, a, b - 1)).upper_milli))
    upper = min(plain, max(u for *_, u in intervals))
    return AdmissionBound(upper, instance, probe, intervals, time.perf_counter() - started)
