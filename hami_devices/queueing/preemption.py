"""Who may be evicted, for whom, and why: the rules as candidate filters and set rules.

For a pending task ``t`` of leaf queue ``q`` that does not fit (tried in this order):

1. **reclaim** (``q``'s ``reclaim-within-cohort``, Kueue's reclaimWithinCohort:
   ``any`` by default, ``lower-priority``, ``never``): ``t`` is entitled at queue
   ``a`` (``q`` or an ancestor; see ``tree``).  Candidates: interruptible tasks of
   reclaimable queues outside ``a``'s subtree (with ``lower-priority``, of strictly
   lower priority than ``t``).  Set rule: every queue on a victim's path below its
   common ancestor with ``q`` keeps its guarantee (floor), and ``t`` still fits
   ``a``'s guarantee with its exact charge.
2. **within-queue** (Kueue's withinClusterQueue: ``never`` by default,
   ``lower-priority``, ``lower-or-newer-equal-priority``): candidates are
   interruptible tasks of ``q`` itself with a strictly lower priority, or, with
   ``lower-or-newer-equal-priority``, an equal priority and a later submission.
   Set rule: ``q``'s limits hold with the victims gone and ``t`` admitted, and
   equal-priority victims only when ``t`` is then within a guarantee on its path.
3. **borrow-within-cohort** (Kueue's borrowWithinCohort, ``policy:
   lower-priority``), for a borrowing ``t``: candidates are interruptible tasks
   of other reclaimable queues with a priority strictly below ``t``'s and at most
   ``max-priority-threshold``.  Set rule: floors.
4. **fair-share** (``preemption.fair-share``), for a borrowing ``t``: candidates are
   interruptible tasks of other reclaimable queues.  Set rule: floors, and at the
   level where the two queues' paths part, ``t``'s side after admission has a
   weighted share no higher than the victim's side after the evictions, and
   strictly lower than the victim's side before.

Every candidate has run at least its own queue's ``min-runtime``.  Reclaim,
borrowing and fair-share never pick a victim of ``q``'s own path (a queue does not
reclaim from itself).  Why these settle: reclaim only moves capacity towards a
queue below its guarantee from queues that stay at or above theirs, so the
victims' queues can never reclaim it back (their re-admission would be a
borrowing one); within-queue evictions strictly raise (priority, earlier
submission) among the tasks running in a queue; borrowing evictions strictly
raise the priorities of borrowed work, and the queue file refuses them together
with fair-share; fair-share evictions strictly lower the largest of the two
shares involved.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hami_devices.queueing.events import EvictionReason
from hami_devices.queueing.resources import Vector
from hami_devices.queueing.tasks import Task
from hami_devices.queueing.tree import QueueTree
from hami_devices.queueing.victims import Admissible, Candidate


@dataclass
class Rule:
    reason: EvictionReason
    leaves: list[int]  # leaf queues whose tasks may be candidates
    admissible: Admissible
    entitled_at: int | None = None
    too_young_until: float = float("inf")  # earliest time a candidate now too young becomes eligible
    below: int | None = None  # candidates' priority must be below this (None: any priority)
    at_most: int | None = None  # and at most this
    equal_if_newer: bool = False  # a candidate of priority ``below`` submitted after the task is one too


def _others(tree: QueueTree, outside: set[int]) -> list[int]:
    """Leaves other queues may evict from, outside the queues ``outside``."""
    return [n.index for n in tree.nodes if n.leaf and n.index not in outside and tree.reclaimable[n.index]]


def removed_by_queue(tree: QueueTree, victims: Iterable[Candidate]) -> dict[int, Vector]:
    out: dict[int, Vector] = {}
    for v in victims:
        for q in tree.nodes[v.task.queue].path:
            out[q] = out.get(q, 0) + v.charge
    return out


def _floors_ok(tree: QueueTree, leaf: int, victims: Sequence[Candidate]) -> bool:
    removed: dict[int, Vector] = {}
    for v in victims:
        for q in tree.below_lca(v.task.queue, leaf):
            removed[q] = removed.get(q, 0) + v.charge
    return all(tree.floor_broken(q, amount) is None for q, amount in removed.items())


def reclaim_rule(tree: QueueTree, task: Task, amount: Vector) -> Rule | None:
    mode = tree.nodes[task.queue].spec.preemption.reclaim_within_cohort
    if mode == "never":
        return None
    at = tree.entitled_at(task.queue, amount)
    if at is None:
        return None
    leaves = _others(tree, {n.index for n in tree.nodes if at in n.path})

    def admissible(victims: Sequence[Candidate]) -> bool:
        return _floors_ok(tree, task.queue, victims)

    below = task.priority if mode == "lower-priority" else None
    return Rule(EvictionReason.RECLAIM, leaves, admissible, entitled_at=at, below=below)


def _before(a: Task, b: Task) -> bool:
    """``a`` was submitted before ``b`` (what "newer" compares, as the queue's own order does)."""
    return (a.submitted_at, a.seq) < (b.submitted_at, b.seq)


def priority_rule(tree: QueueTree, task: Task, amount: Vector) -> Rule | None:
    mode = tree.nodes[task.queue].spec.preemption.within_queue
    if mode == "never":
        return None
    newer = mode == "lower-or-newer-equal-priority"

    def outranked(victim: Task) -> bool:
        return victim.priority < task.priority or (newer and victim.priority == task.priority and _before(task, victim))

    def admissible(victims: Sequence[Candidate]) -> bool:
        if any(v.task.queue != task.queue or not outranked(v.task) for v in victims):
            return False
        removed = removed_by_queue(tree, victims)
        equal = any(v.task.priority == task.priority for v in victims)
        if equal and tree.entitled_at(task.queue, amount, removed) is None:
            return False  # Kueue: equal-priority victims only for a task within its queue's nominal quota
        return tree.over_limit(task.queue, amount, removed) is None

    return Rule(EvictionReason.PRIORITY, [task.queue], admissible, below=task.priority, equal_if_newer=newer)


def borrow_rule(tree: QueueTree, task: Task, amount: Vector) -> Rule | None:
    borrow = tree.nodes[task.queue].spec.preemption.borrow_within_cohort
    if borrow.policy == "never" or tree.entitled_at(task.queue, amount) is not None:
        return None  # an entitled task reclaims instead
    leaves = _others(tree, set(tree.nodes[task.queue].path))

    def admissible(victims: Sequence[Candidate]) -> bool:
        return _floors_ok(tree, task.queue, victims)

    return Rule(EvictionReason.BORROW_WITHIN_COHORT, leaves, admissible, below=task.priority,
                at_most=borrow.max_priority_threshold)


def fair_share_rule(tree: QueueTree, task: Task, amount: Vector) -> Rule | None:
    if not tree.nodes[task.queue].spec.preemption.fair_share:
        return None
    if tree.entitled_at(task.queue, amount) is not None:
        return None  # an entitled task reclaims instead
    leaves = _others(tree, set(tree.nodes[task.queue].path))

    def sides(victim_leaf: int) -> tuple[int, int]:
        common = tree.lca(task.queue, victim_leaf)
        mine, theirs = tree.nodes[task.queue].path, tree.nodes[victim_leaf].path
        cut = 0 if common is None else mine.index(common) + 1
        return mine[cut], theirs[cut]

    def admissible(victims: Sequence[Candidate]) -> bool:
        if not _floors_ok(tree, task.queue, victims):
            return False
        removed = removed_by_queue(tree, victims)
        for v in victims:
            mine, theirs = sides(v.task.queue)
            after_mine = tree.share(mine, amount - removed.get(mine, 0))
            if not (
                after_mine <= tree.share(theirs, -removed[theirs]) + 1e-12 and after_mine < tree.share(theirs) - 1e-12
            ):
                return False
        return True

    return Rule(EvictionReason.FAIR_SHARE, leaves, admissible)


def eligible_slots(
    tree: QueueTree, rule: Rule, task: Task, arrays: dict[str, npt.NDArray[Any]], now: float
) -> npt.NDArray[np.int64]:
    """Slots of running tasks in the rule's leaves that may be interrupted and have run their queue's minimum
    runtime; records in ``rule.too_young_until`` when the first one still too young will have."""
    a = arrays
    leaf_ok = np.zeros(len(tree.nodes), dtype=bool)
    leaf_ok[rule.leaves] = True
    ok = a["slot_alive"] & a["slot_interruptible"] & leaf_ok[a["slot_leaf"]]
    if rule.below is not None:
        lower = a["slot_priority"] < rule.below
        if rule.equal_if_newer:
            later = (a["slot_submitted"] > task.submitted_at) | (
                (a["slot_submitted"] == task.submitted_at) & (a["slot_seq"] > task.seq)
            )
            lower |= (a["slot_priority"] == rule.below) & later
        ok &= lower
    if rule.at_most is not None:
        ok &= a["slot_priority"] <= rule.at_most
    min_runtime = tree.min_runtime[a["slot_leaf"]]
    young = ok & (now - a["slot_start"] < min_runtime)
    if young.any():
        rule.too_young_until = float((a["slot_start"][young] + min_runtime[young]).min())
    return np.flatnonzero(ok & ~young)


def exact_ok(tree: QueueTree, rule: Rule, task: Task, charge: Vector, victims: Sequence[Candidate]) -> bool:
    """The rule once more with the placement's exact charge (the search used the request's estimate)."""
    removed = removed_by_queue(tree, victims)
    if tree.over_limit(task.queue, charge, removed) is not None:
        return False
    if rule.reason == EvictionReason.RECLAIM and rule.entitled_at is not None:
        a = rule.entitled_at
        return tree.covers(a, tree.usage[a] - removed.get(a, 0) + charge)
    if rule.reason == EvictionReason.FAIR_SHARE or rule.equal_if_newer:
        build = fair_share_rule if rule.reason == EvictionReason.FAIR_SHARE else priority_rule
        exact = build(tree, task, charge)
        return exact is not None and exact.admissible(victims)
    return True
