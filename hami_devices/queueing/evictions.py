"""Evictions: planning them for a task that does not fit, committing them, and the dry run for schedulers.

The rules are in ``preemption``, the search in ``victims`` and ``planner``; this
part of the loop adds them to its state: a plan that found nothing is
remembered per request shape until the cluster changes, the victims are
unbooked (requeued when they can be recomputed) and the task is booked at once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from hami_devices.errors import HamiError
from hami_devices.models import ResourceRequest
from hami_devices.queueing.admission import judge_quota
from hami_devices.queueing.events import EventKind, EvictionReason
from hami_devices.queueing.planner import EvictionPlanner, Planned
from hami_devices.queueing.preemption import Rule
from hami_devices.queueing.resources import Vector
from hami_devices.queueing.state import LoopState
from hami_devices.queueing.tasks import Task, TaskState
from hami_devices.queueing.victims import Choice
from hami_devices.scheduling.engine import Placement


@dataclass
class PreemptionPlan:
    """What admitting a request would take: the victims, why, and the placement once they are gone."""

    reason: EvictionReason | None  # None: it fits without evicting anything
    victims: list[str]
    placement: Placement
    details: dict[str, str] = field(default_factory=dict)  # victim -> the readable why


class Evictions:
    def __init__(self, state: LoopState, *, max_nodes: int, requeue: bool) -> None:
        self.state = state
        self.requeue_victims = requeue
        self.planner = EvictionPlanner(
            state.engine, state.tree, state.resources, state.footprints, state.running_in, max_nodes
        )

    def plan(self, task: Task, now: float, *, remember: bool = True) -> Planned | None:
        """The victims that would let ``task`` in (None: no eviction the rules allow makes room now)."""
        memo = self.state.memo
        if memo.no_eviction_helps(task.shape, now):
            return None
        planned, wake, searches = self.planner.plan(task, now)
        self.state.counters.victim_searches += searches
        memo.saw_cluster()
        if planned is None and remember:
            memo.no_eviction_until(task.shape, wake)
        return planned

    def commit(self, task: Task, rule: Rule, choice: Choice, charge: Vector, now: float) -> None:
        """Evict the plan's victims and book ``task`` on the room they leave."""
        names = []
        for victim in choice.victims:
            why = self.planner.explain(rule, task, victim.task)
            self.evict(victim.task, rule.reason, task, why, now)
            names.append(victim.task.name)
        try:
            self.state.book(task, choice.placement, charge, now)
        except HamiError:  # cannot happen while the search restores what it forgot; never leave victims dangling
            self.state.memo.changed()
            raise
        self.state.emit(
            EventKind.ADMITTED,
            task,
            now,
            reason=str(rule.reason),
            nodes=tuple(choice.placement.nodes),
            detail=f"after evicting {', '.join(names)}",
            data={"waited_s": now - task.submitted_at, "evicted": names},
        )

    def drain(self, now: float) -> None:
        """Evict every running task of a queue whose stop-policy is hold-and-drain (Kueue's HoldAndDrain)."""
        tree = self.state.tree
        for leaf, running in self.state.running_in.items():
            if running and tree.switches.drains(leaf):
                why = f"queue {tree.nodes[leaf].name} is held and drained (stop-policy hold-and-drain)"
                for victim in list(running.values()):
                    self.evict(victim, EvictionReason.STOP_POLICY, None, why, now)

    def evict(self, victim: Task, reason: EvictionReason, by: Task | None, why: str, now: float) -> None:
        state = self.state
        saved = state.checkpoint(victim)
        lost = 0.0 if saved else victim.runtime(now) * victim.device_share()
        nodes = tuple(victim.placement.nodes) if victim.placement else ()
        state.unbook(victim)
        victim.evictions += 1
        state.counters.evicted += 1
        requeue = self.requeue_victims and victim.recomputable
        data: dict[str, Any] = {"lost_device_seconds": lost, "requeued": requeue, "checkpointed": saved}
        if by is not None:
            data["by_queue"] = state.tree.nodes[by.queue].name
        state.emit(
            EventKind.EVICTED,
            victim,
            now,
            reason=str(reason),
            by=None if by is None else by.name,
            detail=why,
            nodes=nodes,
            data=data,
        )
        victim.started_at = None  # ``placement`` stays: where it ran until it was evicted
        if requeue:
            victim.state = TaskState.PENDING
            state.enqueue(victim)
            state.emit(EventKind.REQUEUED, victim, now)
        else:
            victim.state = TaskState.EVICTED
        state.memo.changed()

    # ------------------------------------------------------------------ for schedulers that only ask
    def dry_run(self, request: ResourceRequest, now: float, *, preemptive: bool) -> PreemptionPlan | None:
        """What admitting ``request`` (to ``request.queue``) would evict, and why; changes nothing."""
        state = self.state
        tree = state.tree
        leaf = tree.leaf(request.queue)
        if tree.switches.held(leaf.index) is not None:
            return None
        request = state.prepared(request)
        # In line where it stands: a pending task of this queue keeps its own submission; any other request
        # is asked about now, after every task already submitted (it outranks none of them by age).
        submitted, seq = now, sys.maxsize
        known = state.tasks.get(request.name or "")
        if known is not None and known.state == TaskState.PENDING and known.queue == leaf.index:
            submitted, seq = known.submitted_at, known.seq
        task = state.new_task(request.name or "<request>", request, leaf.index, submitted, seq)
        task.shape = "<dry-run>"  # remembers nothing under the shape of a task in line
        if tree.over_limit(leaf.index, task.estimate) is not None:
            return None
        placement = state.engine.try_place(request)
        if placement is not None:
            placement, _, _, _ = judge_quota(tree, state.resources, state.engine, task, placement)
            return None if placement is None else PreemptionPlan(None, [], placement)
        if not preemptive:
            return None
        planned = self.plan(task, now, remember=False)
        if planned is None:
            return None
        rule, choice, _ = planned
        return PreemptionPlan(
            rule.reason,
            [v.task.name for v in choice.victims],
            choice.placement,
            {v.task.name: self.planner.explain(rule, task, v.task) for v in choice.victims},
        )
