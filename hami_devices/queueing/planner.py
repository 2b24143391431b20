"""Planning evictions for one pending task: the rules in order, the candidates as arrays, the search.

``EvictionPlanner.plan(task, now)`` tries reclaim, then priority, then
fair-share preemption (``preemption``), each with the running tasks its rule
allows (``Footprints``), and returns the first set of victims the search
(``victims``) finds, checked once more with the placement's exact charge.
It changes nothing: the loop commits.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from hami_devices.queueing import preemption as rules
from hami_devices.queueing.events import EvictionReason
from hami_devices.queueing.footprints import Footprints
from hami_devices.queueing.resources import Resources, Vector
from hami_devices.queueing.tasks import Task
from hami_devices.queueing.tree import EPS, QueueTree
from hami_devices.queueing.victims import Candidate, Choice, search
from hami_devices.scheduling.engine import Engine

Planned = tuple[rules.Rule, Choice, Vector]
"""The rule that allows it, the victims with the task's placement once they are gone, and its exact charge."""


class EvictionPlanner:
    def __init__(
        self,
        engine: Engine,
        tree: QueueTree,
        resources: Resources,
        footprints: Footprints,
        running: Mapping[int, Mapping[str, Task]],
        max_nodes: int,
    ) -> None:
        self.engine = engine
        self.tree = tree
        self.resources = resources
        self.footprints = footprints
        self.running = running
        self.max_nodes = max_nodes

    def plan(self, task: Task, now: float) -> tuple[Planned | None, float, int]:
        """The first rule's cheapest victims that let ``task`` in; also when a candidate now too young
        becomes eligible (``inf``: never), and how many searches ran."""
        wake = float("inf")
        searches = 0
        for build in (rules.reclaim_rule, rules.priority_rule, rules.borrow_rule, rules.fair_share_rule):
            rule = build(self.tree, task, task.estimate)
            if rule is None:
                continue
            arrays = self.footprints.arrays()
            slots = rules.eligible_slots(self.tree, rule, task, arrays, now)
            wake = min(wake, rule.too_young_until)
            if slots.size == 0:
                continue
            searches += 1
            start = arrays["slot_start"].astype(np.float64)
            share = np.bincount(arrays["grant_slot"], weights=arrays["grant_cores"], minlength=start.size) / 100.0
            lost = np.maximum(now - start, 0.0) * np.maximum(share, 0.01)
            nominal = self.nominal(arrays)
            choice = search(
                self.engine,
                task.request,
                arrays,
                slots,
                functools.partial(self.candidate, now=now, nominal=nominal),
                rule.admissible,
                lost=lost,
                nominal=nominal,
                max_nodes=self.max_nodes,
            )
            if choice is None:
                continue
            charge = self.resources.of_placement(choice.placement)
            if not rules.exact_ok(self.tree, rule, task, charge, choice.victims):
                continue
            if rule.reason != EvictionReason.RECLAIM and self.tree.entitled_at(task.queue, charge) is None:
                freed = sum((v.charge for v in choice.victims), self.resources.zeros())
                free = self.tree.capacity - self.resources.used() + freed
                if self.tree.lending_blocked(task.queue, charge, free) is not None:
                    continue
                unreclaimable = not self.tree.reclaimable_by_others(task.queue, task.interruptible)
                if unreclaimable and self.tree.lending_blocked(task.queue, charge, free, everything=True):
                    continue
            return (rule, choice, charge), wake, searches
        return None, wake, searches

    def candidate(self, slot: int, now: float, nominal: npt.NDArray[np.bool_]) -> Candidate:
        task = self.footprints.tasks[slot]
        assert task is not None and task.booking_id is not None
        booking = self.engine.cluster.bookings[task.booking_id]
        lost = task.runtime(now) * max(task.device_share(), 0.01)
        return Candidate(task, booking, task.charge, lost, self.tree.share(task.queue), bool(nominal[slot]))

    def nominal(self, arrays: dict[str, npt.NDArray[Any]]) -> npt.NDArray[np.bool_]:
        """Per slot: the task is one of its queue's oldest that together fit within the queue's nominal share.

        A queue's nominal share is its guarantee plus, while it borrows, its weighted part of
        the capacity no queue is guaranteed.  The rest of its tasks run on capacity lent by
        queues below their guarantee and are evicted first: the work a queue has run longest
        inside its own share is the last to go.  (A preference among victims, not a floor:
        floors are the guarantees alone.)
        """
        tree = self.tree
        nominal = np.zeros(arrays["slot_alive"].size, dtype=bool)
        keys = tree.guarded.any(axis=0)
        if not keys.any():
            return nominal
        tops = [n.index for n in tree if n.parent is None]
        spare = np.maximum(tree.capacity[keys] - tree.guarantee[tops][:, keys].sum(axis=0), 0.0)
        spare = np.where(np.isfinite(spare), spare, 0.0)
        leaves = [leaf for leaf, running in self.running.items() if running]
        borrowing = [q for q in leaves if tree.borrowing(q)[keys].any()]
        weights = sum(float(tree.weight[q]) for q in borrowing) or 1.0
        slot_of = self.footprints.slot_of
        for leaf in leaves:
            room = tree.guarantee[leaf][keys] + EPS
            if leaf in borrowing:
                room = room + spare * float(tree.weight[leaf]) / weights
            used = np.zeros(room.size)
            for task in sorted(self.running[leaf].values(), key=lambda t: (t.started_at or 0.0, t.seq)):
                used += task.charge[keys]
                if (used > room).any():  # room includes the rounding allowance
                    break
                if task.name in slot_of:
                    nominal[slot_of[task.name]] = True
        return nominal

    def explain(self, rule: rules.Rule, task: Task, victim: Task) -> str:
        """Why ``victim`` goes for ``task``, in words."""
        tree, res = self.tree, self.resources
        name_of = tree.nodes
        if rule.reason == EvictionReason.RECLAIM:
            at = rule.entitled_at if rule.entitled_at is not None else task.queue
            short = tree.below_guarantee(at)
            keys = short or [res.keys[k] for k in np.flatnonzero(tree.guarded[at])]
            have = ", ".join(
                f"{k} {_n(tree.usage[at, res.index[k]])}/{_n(tree.guarantee[at, res.index[k]])}" for k in keys
            )
            return (
                f"{name_of[at].name} is below its guarantee ({have}) and takes it back from "
                f"{name_of[victim.queue].name}, which stays at or above its own"
            )
        if rule.reason == EvictionReason.PRIORITY:
            if victim.priority == task.priority:
                return f"priority {task.priority}, submitted before it, in queue {name_of[task.queue].name}"
            return f"priority {task.priority} over {victim.priority} in queue {name_of[task.queue].name}"
        if rule.reason == EvictionReason.BORROW_WITHIN_COHORT:
            return (
                f"{name_of[task.queue].name} borrows with priority {task.priority} over {victim.priority}; "
                f"{name_of[victim.queue].name} stays at or above its guarantee"
            )
        return (
            f"{name_of[task.queue].name} (weighted share {tree.share(task.queue):.3f}) is below "
            f"{name_of[victim.queue].name} ({tree.share(victim.queue):.3f}) on idle capacity"
        )


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
