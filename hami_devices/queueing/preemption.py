"""Who may be evicted, for whom, and why: the three reasons as candidate filters and set rules.

For a pending task ``t`` of leaf queue ``q`` that does not fit (tried in this order):

1. **reclaim** (``q``'s ``preemption.reclaim``, on by default): ``t`` is entitled
   at queue ``a`` (``q`` or an ancestor; see ``tree``).  Candidates: interruptible
   tasks of queues outside ``a``'s subtree.  Set rule: every queue on a victim's
   path below its common ancestor with ``q`` keeps its guarantee (floor), and
   ``t`` still fits ``a``'s guarantee with its exact charge.
2. **priority** (``preemption.priority``): candidates are interruptible tasks of
   ``q`` itself with a strictly lower priority.  Set rule: ``q``'s limits hold
   with the victims gone and ``t`` admitted.
3. **fair-share** (``preemption.fair-share``), for a borrowing ``t``: candidates are
   interruptible tasks of other queues.  Set rule: floors, and at the level where
   the two queues' paths part, ``t``'s side after admission has a weighted share
   no higher than the victim's side after the evictions, and strictly lower than
   the victim's side before.

Every candidate has run at least its own queue's ``min-runtime``.  Reclaim and
fair-share never pick a victim of ``q``'s own path (a queue does not reclaim from
itself).  Why these settle: reclaim only moves capacity towards a queue below its
guarantee from queues that stay at or above theirs, so the victims' queues can
never reclaim it back (their re-admission would be a borrowing one); priority
evictions strictly raise the priorities running in a queue; fair-share evictions
strictly lower the largest of the two shares involved.
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
    spec = tree.nodes[task.queue].spec
    if not spec.preemption.reclaim:
        return None
    at = tree.entitled_at(task.queue, amount)
    if at is None:
        return None
    inside = {n.index for n in tree.nodes if at in n.path}
    leaves = [n.index for n in tree.nodes if n.leaf and n.index not in inside]

    def admissible(victims: Sequence[Candidate]) -> bool:
        return _floors_ok(tree, task.queue, victims)

    return Rule(EvictionReason.RECLAIM, leaves, admissible, entitled_at=at)


def priority_rule(tree: QueueTree, task: Task, amount: Vector) -> Rule | None:
    if not tree.nodes[task.queue].spec.preemption.priority:
        return None

    def admissible(victims: Sequence[Candidate]) -> bool:
        if any(v.task.priority >= task.priority or v.task.queue != task.queue for v in victims):
            return False
        return tree.over_limit(task.queue, amount, removed_by_queue(tree, victims)) is None

    return Rule(EvictionReason.PRIORITY, [task.queue], admissible)


def fair_share_rule(tree: QueueTree, task: Task, amount: Vector) -> Rule | None:
    if not tree.nodes[task.queue].spec.preemption.fair_share:
        return None
    if tree.entitled_at(task.queue, amount) is not None:
        return None  # an entitled task reclaims instead
    own = set(tree.nodes[task.queue].path)
    leaves = [n.index for n in tree.nodes if n.leaf and n.index not in own]

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
    if rule.reason == EvictionReason.PRIORITY:
        ok &= a["slot_priority"] < task.priority
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
    if rule.reason == EvictionReason.FAIR_SHARE:
        exact = fair_share_rule(tree, task, charge)
        return exact is not None and exact.admissible(victims)
    return True
