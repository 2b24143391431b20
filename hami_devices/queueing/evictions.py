"""Evictions: planning them for a task that does not fit, committing them, and the dry run for schedulers.

The rules are in ``preemption``, the search in ``victims`` and ``planner``; this
adds them to the loop: a plan is remembered per request shape until the
cluster changes, the victims are unbooked (requeued when they can be
recomputed) and the task is booked at once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from hami_devices.errors import HamiError, InvalidRequest
from hami_devices.models import ResourceRequest
from hami_devices.queueing.admission import judge_quota
from hami_devices.queueing.events import EventKind, EvictionReason
from hami_devices.queueing.planner import Planned
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


class Evictions(LoopState):
    # ------------------------------------------------------------------ evictions
    def _plan(self, task: Task, now: float, *, remember: bool = True) -> Planned | None:
        memo = self._nopreempt.get(task.shape)
        if memo is not None and memo[0] == self.cluster.version and now < memo[1]:
            return None
        planned, wake, searches = self._planner.plan(task, now)
        self.counters.victim_searches += searches
        self._seen_version = self.cluster.version
        if planned is None and remember:
            self._nopreempt[task.shape] = (self.cluster.version, wake)
            self._wake_at = min(self._wake_at, wake)
        return planned

    def _commit(self, task: Task, rule: Rule, choice: Choice, charge: Vector, now: float) -> None:
        names = []
        for victim in choice.victims:
            why = self._planner.explain(rule, task, victim.task)
            self._evict(victim.task, rule.reason, task, why, now)
            names.append(victim.task.name)
        try:
            self._book(task, choice.placement, charge, now)
        except HamiError:  # cannot happen while the search restores what it forgot; never leave victims dangling
            self._dirty = True
            raise
        self._emit(
            EventKind.ADMITTED,
            task,
            now,
            reason=str(rule.reason),
            nodes=tuple(choice.placement.nodes),
            detail=f"after evicting {', '.join(names)}",
            data={"waited_s": now - task.submitted_at, "evicted": names},
        )

    def _drain(self, now: float) -> None:
        """Evict every running task of a queue whose stop-policy is hold-and-drain (Kueue's HoldAndDrain)."""
        for leaf, running in self._running.items():
            if running and self.tree.drains(leaf):
                why = f"queue {self.tree.nodes[leaf].name} is held and drained (stop-policy hold-and-drain)"
                for victim in list(running.values()):
                    self._evict(victim, EvictionReason.STOP_POLICY, None, why, now)

    def requeue(self, name: str, *, now: float | None = None) -> Task:
        """Put a running task back in line where it was (its booking forgotten), e.g. when the node agent
        could not start it; it is considered again at the next tick."""
        task = self.task(name)
        if task.state != TaskState.RUNNING:
            raise InvalidRequest("task", f"task {name!r} is {task.state}, not running")
        now = self._now(now)
        self._unbook(task)
        task.started_at = None
        task.state = TaskState.PENDING
        self._enqueue(task)
        self._emit(EventKind.REQUEUED, task, now)
        self._dirty = True
        return task

    def _evict(self, victim: Task, reason: EvictionReason, by: Task | None, why: str, now: float) -> None:
        saved = self.checkpoints is not None and self.checkpoints.checkpointable(victim.name)
        if saved:
            assert self.checkpoints is not None
            self._saved[victim.name] = self.checkpoints.checkpoint(victim.name)
        lost = 0.0 if saved else victim.runtime(now) * victim.device_share()
        nodes = tuple(victim.placement.nodes) if victim.placement else ()
        self._unbook(victim)
        victim.evictions += 1
        self.counters.evicted += 1
        requeue = self.requeue_victims and victim.recomputable
        data: dict[str, Any] = {"lost_device_seconds": lost, "requeued": requeue, "checkpointed": saved}
        if by is not None:
            data["by_queue"] = self.tree.nodes[by.queue].name
        self._emit(
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
            self._enqueue(victim)
            self._emit(EventKind.REQUEUED, victim, now)
        else:
            victim.state = TaskState.EVICTED
        self._dirty = True

    # ------------------------------------------------------------------ for schedulers that only ask
    def preemption_for(self, request: ResourceRequest, *, now: float | None = None) -> PreemptionPlan | None:
        """What admitting ``request`` (to ``request.queue``) would evict, and why; changes nothing.

        None when it cannot be admitted even with evictions (or over a limit).
        For a scheduler (e.g. a kube-scheduler extender) that asks before it binds.
        """
        now = self._now(now)
        leaf = self.tree.leaf(request.queue)
        if self.tree.held(leaf.index) is not None:
            return None
        request = self._prepared(request)
        # In line where it stands: a pending task of this queue keeps its own submission; any other request
        # is asked about now, after every task already submitted (it outranks none of them by age).
        submitted, seq = now, sys.maxsize
        known = self.tasks.get(request.name or "")
        if known is not None and known.state == TaskState.PENDING and known.queue == leaf.index:
            submitted, seq = known.submitted_at, known.seq
        task = Task(request.name or "<request>", request, leaf.index, submitted, seq)
        task.shape = "<dry-run>"
        task.estimate = self.resources.estimate(request)
        if self.tree.over_limit(leaf.index, task.estimate) is not None:
            return None
        placement = self.engine.try_place(request)
        if placement is not None:
            placement, _, _, _ = judge_quota(self.tree, self.resources, self.engine, task, placement)
            return None if placement is None else PreemptionPlan(None, [], placement)
        if not self.preemptive:
            return None
        planned = self._plan(task, now, remember=False)
        if planned is None:
            return None
        rule, choice, _ = planned
        return PreemptionPlan(
            rule.reason,
            [v.task.name for v in choice.victims],
            choice.placement,
            {v.task.name: self._planner.explain(rule, task, v.task) for v in choice.victims},
        )
