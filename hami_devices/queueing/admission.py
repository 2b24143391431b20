"""A placement against the queues: the exact charge within every limit, the guarantee or the lending limits.

What the loop asks once the engine has found a placement for a task: is it
entitled (within its queue's guarantee), may it borrow (the lending limits,
and for a task that cannot be interrupted every other queue's unused
guarantee), or does it break a limit -- and, when the limit is on a scoped
resource only (``device-cores@big``), does a placement away from those
devices do.
"""

from __future__ import annotations

import numpy as np

from hami_devices.queueing.events import WaitReason
from hami_devices.queueing.resources import Resources, Vector
from hami_devices.queueing.tasks import Task
from hami_devices.queueing.tree import QueueTree, exceeds
from hami_devices.scheduling.engine import Engine, Placement

LENDING_REASONS = frozenset({WaitReason.LENDING_LIMIT, WaitReason.GUARANTEES_RESERVED})
"""Refusals of a placement that fits, for what it would borrow."""


def judge_quota(
    tree: QueueTree, resources: Resources, engine: Engine, task: Task, placement: Placement
) -> tuple[Placement | None, Vector, str, str]:
    """The placement's exact charge against the limits, the guarantee and the lending limits.

    A placement that breaks a limit on a scoped resource only (``device-cores@big``)
    is tried once more away from those devices.
    """
    charge = resources.of_placement(placement)
    limit = tree.over_limit(task.queue, charge)
    if limit is not None:
        retry = _away_from_scopes(tree, resources, engine, task, charge)
        if retry is None:
            return None, charge, WaitReason.QUEUE_LIMIT, limit
        placement, charge = retry
    if tree.entitled_at(task.queue, charge) is not None:
        return placement, charge, "guaranteed", ""
    reclaimable = tree.reclaimable_by_others(task.queue, task.interruptible)
    if tree.lends_all and reclaimable:
        return placement, charge, "borrowing", ""
    free = tree.capacity - resources.used()
    blocked = tree.lending_blocked(task.queue, charge, free)
    if blocked is not None:
        return None, charge, WaitReason.LENDING_LIMIT, f"borrowing: {blocked}"
    if not reclaimable:
        blocked = tree.lending_blocked(task.queue, charge, free, everything=True)
        if blocked is not None:
            what = "not interruptible" if not task.interruptible else "in a queue that is not reclaimable"
            return (
                None,
                charge,
                WaitReason.GUARANTEES_RESERVED,
                f"over its queue's guarantee and {what}, it may borrow only what no queue is guaranteed: {blocked}",
            )
    return placement, charge, "borrowing", ""


def _away_from_scopes(
    tree: QueueTree, res: Resources, engine: Engine, task: Task, charge: Vector
) -> tuple[Placement, Vector] | None:
    over = set()
    for q in tree.nodes[task.queue].path:
        over.update(np.flatnonzero(exceeds(tree.usage[q] + charge, tree.limit[q])).tolist())
    if not over or any(res.parsed[k].scope is None for k in over):
        return None
    vendors: list[str] = []
    models: list[str] = []
    for k in over:
        scope = res.parsed[k].scope or ""
        cls = res.classes.get(scope)
        if cls is not None:
            (models.extend(cls.models) if cls.models else vendors.extend(cls.vendors))
        elif "/" in scope:
            models.append(scope.split("/", 1)[1])
        else:
            vendors.append(scope)
    parts = [
        p.model_copy(
            update={
                "exclude_vendors": [*p.exclude_vendors, *vendors],
                "exclude_models": [*p.exclude_models, *models],
            }
        )
        for p in task.request.parts
    ]
    placement = engine.try_place(task.request.model_copy(update={"parts": parts}))
    if placement is None:
        return None
    charge = res.of_placement(placement)
    if tree.over_limit(task.queue, charge) is not None:
        return None
    placement.request = task.request
    return placement, charge
