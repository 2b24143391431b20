"""The admission loop: submit, cancel, finish and tick, with the engine deciding every placement.

``AdmissionLoop(engine, queues)`` holds the tasks and the queue tree; the
engine's ``ClusterState`` is the one model of capacity.  Each ``tick(now)``
runs passes until a fixed point:

* Pending tasks are taken best first: tasks *entitled* to their queue's
  guarantee before borrowing ones; among entitled tasks higher priority, then
  earlier; among borrowing ones the queue with the lowest weighted share first
  (level by level down the tree), so idle capacity is shared by weight.
* Each task is placed with ``Engine.try_place`` and booked (assumed) in the
  cluster, within its queues' limits (and, when borrowing, the lending limits).
* A task that does not fit may evict (``enable-preemptive``): see ``preemption``
  for the rules and ``victims`` for the search.  The victims' bookings are
  forgotten and the task booked at once, so no capacity waits idle between a
  reclaim and its use.  A recomputable victim is requeued (it keeps its place in
  line); one that is not is reported evicted.
* A task that cannot be admitted does not hold back the rest of its queue
  (unless the queue asks for ``strict-fifo``): identical requests of a queue form
  a group, and when the head of a group waits the group waits, since the others
  would wait for the same reason.

Decisions come out as ``Event``s: ``subscribe(callback)`` or ``events()``.
``QueueRunner`` (``runner``) commits them to a node's ledger: an admission with
``hd.allocate(devices, task(name).placement)``, an eviction with
``allocation.evict`` before the admission it makes room for, a finish with
``hd.release``.  A queue's ``state`` and ``stop-policy`` say whether it takes and
admits tasks (``set_queue_state`` changes them while the loop runs).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from hami_devices.assembly import build_engine
from hami_devices.config import HamiConfig
from hami_devices.errors import InvalidRequest
from hami_devices.inputs import as_config, as_request
from hami_devices.inventory import Inventory
from hami_devices.models import ResourceRequest
from hami_devices.queueing.admission import LENDING_REASONS, judge_quota
from hami_devices.queueing.events import Event, EventBus, EventKind, Listener, WaitReason
from hami_devices.queueing.evictions import Evictions, PreemptionPlan
from hami_devices.queueing.memo import Memo
from hami_devices.queueing.resources import Resources
from hami_devices.queueing.spec import QueueFile, load_queues
from hami_devices.queueing.state import Counters, LoopState
from hami_devices.queueing.tasks import Task, TaskState
from hami_devices.queueing.tree import QueueTree, collect_keys
from hami_devices.queueing.victims import MAX_NODES
from hami_devices.scheduling.defrag.checkpoint import CheckpointHook
from hami_devices.scheduling.engine import Engine

__all__ = ["MAX_PASSES", "AdmissionLoop", "Counters", "PreemptionPlan"]

MAX_PASSES = 64  # a tick's passes; each pass after the first follows evictions, which cannot repeat forever


class AdmissionLoop:
    """Tasks in queues, admitted, evicted and explained by the rules (see the module doc).

    Its parts: ``state`` (the tasks, where each stands, booking and events), ``memo``
    (what a tick need not look at again) and ``evictions`` (planning and committing them).
    """

    def __init__(
        self,
        engine: Engine,
        queues: QueueFile | str | Path,
        *,
        preemptive: bool = True,
        requeue: bool = True,
        clock: Callable[[], float] = time.time,
        max_nodes: int = MAX_NODES,
        keep_events: int | None = 100_000,
        record_timings: bool = False,
        checkpoints: CheckpointHook | None = None,
    ) -> None:
        source = None
        if not isinstance(queues, QueueFile):
            source = str(queues)
            queues = load_queues(queues)
        self.engine = engine
        self.cluster = engine.cluster
        self.resources = Resources(collect_keys(queues), queues.classes, self.cluster, source=source)
        self.tree = QueueTree(queues, self.resources)
        self.preemptive = preemptive
        self.counters = Counters()
        self.timings: list[float] | None = [] if record_timings else None
        self.memo = Memo(self.cluster)
        self.state = LoopState(
            engine, self.tree, self.resources, EventBus(keep_events), self.memo, self.counters, checkpoints
        )
        self.evictions = Evictions(self.state, max_nodes=max_nodes, requeue=requeue)
        self._clock = clock
        self._seq = itertools.count()
        # This pass: a task found no eviction the rules allow (see ``_pass``).
        self._blocked_in_pass = False

    @classmethod
    def from_config(
        cls,
        inventory: str | Path | Inventory,
        queues: QueueFile | str | Path,
        config: HamiConfig | Mapping[str, Any] | str | Path | None = None,
        *,
        policy: str | None = None,
        policies: str | Path | None = None,
        **options: Any,
    ) -> AdmissionLoop:
        """The engine as ``hami-devices schedule`` builds it; evictions only when ``enable-preemptive`` is on."""
        config = as_config(config)
        engine = build_engine(inventory, config, policy=policy, policies=policies)
        options.setdefault("preemptive", config.scheduler.resource_allocation.enable_preemptive)
        return cls(engine, queues, **options)

    # ------------------------------------------------------------------ events and queries
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every event as it happens; returns a function that unsubscribes."""
        return self.state.bus.subscribe(listener)

    def events(self) -> Iterator[Event]:
        """The events not yet drained, oldest first."""
        return self.state.bus.drain()

    @property
    def tasks(self) -> dict[str, Task]:
        """Every task the loop knows, by name (pending, running and ended)."""
        return self.state.tasks

    def task(self, name: str) -> Task:
        return self.state.task(name)

    def pending(self, queue: str | None = None) -> list[Task]:
        return self.state.pending(queue)

    def running(self, queue: str | None = None) -> list[Task]:
        return self.state.running(queue)

    def why_waiting(self, task: Task) -> str | None:
        """The reason a pending task waits (a task behind an identical one waits for the same reason)."""
        return self.state.why_waiting(task)

    def usage(self, queue: str) -> dict[str, float]:
        return self.resources.to_dict(self.tree.usage[self.tree.by_name[queue].index], skip_zero=False)

    def set_queue_state(self, queue: str, *, state: str | None = None, stop_policy: str | None = None) -> None:
        """Open, close or drain a queue, or set its stop-policy, while the loop runs (from the next tick)."""
        self.tree.switches.set(queue, state, stop_policy)
        self.memo.changed()

    def preemption_for(self, request: ResourceRequest, *, now: float | None = None) -> PreemptionPlan | None:
        """What admitting ``request`` (to ``request.queue``) would evict, and why; changes nothing.

        None when it cannot be admitted even with evictions (or over a limit).
        For a scheduler (e.g. a kube-scheduler extender) that asks before it binds.
        """
        return self.evictions.dry_run(request, self._now(now), preemptive=self.preemptive)

    def _now(self, now: float | None) -> float:
        return self._clock() if now is None else float(now)

    # ------------------------------------------------------------------ requests
    def submit(
        self, request: ResourceRequest | Mapping[str, Any], *, name: str | None = None, now: float | None = None
    ) -> Task:
        """Queue a task in ``request.queue``; it is considered at the next ``tick``."""
        request = as_request(request)
        now = self._now(now)
        leaf = self.tree.leaf(request.queue)
        refused = self.tree.switches.refuses(leaf.index)
        if refused is not None:
            raise InvalidRequest("queue", refused)
        request = self.state.prepared(request)
        seq = next(self._seq)
        name = name or request.name or f"task-{seq}"
        if name in self.tasks and self.tasks[name].state in (TaskState.PENDING, TaskState.RUNNING):
            raise InvalidRequest("name", f"task {name!r} is already {self.tasks[name].state}")
        task = self.state.new_task(name, request, leaf.index, now, seq)
        self.engine.observe(request)  # the arrival teaches the mix once; attempts at each tick do not
        self.tasks[name] = task
        self.state.enqueue(task)
        self.state.emit(EventKind.SUBMITTED, task, now)
        self.memo.changed()
        return task

    def adopt(
        self, request: ResourceRequest, booking_id: str, *, name: str | None = None, started_at: float | None = None
    ) -> Task:
        """Take over a task already running on a booking of the cluster (after a restart, or admitted elsewhere)."""
        leaf = self.tree.leaf(request.queue)
        request = self.state.prepared(request)
        booking = self.cluster.bookings.get(booking_id)
        if booking is None:
            raise InvalidRequest("booking_id", f"no booking {booking_id!r} in the cluster")
        seq = next(self._seq)
        started = self._now(started_at)
        task = self.state.new_task(name or request.name or booking_id, request, leaf.index, started, seq)
        task.state = TaskState.RUNNING
        task.started_at = task.first_started_at = started
        self.tasks[task.name] = task
        self.state.hold(task, booking, self.resources.of_booking(booking))
        return task

    def cancel(self, name: str, *, now: float | None = None) -> Task:
        """Drop a pending task, or stop a running one and free what it holds."""
        return self._end(name, EventKind.CANCELLED, TaskState.CANCELLED, self._now(now))

    def finish(self, name: str, *, now: float | None = None) -> Task:
        """A running task ended on its own: free what it holds."""
        task = self.task(name)
        if task.state != TaskState.RUNNING:
            raise InvalidRequest("task", f"task {name!r} is {task.state}, not running")
        return self._end(name, EventKind.FINISHED, TaskState.FINISHED, self._now(now))

    def requeue(self, name: str, *, now: float | None = None) -> Task:
        """Put a running task back in line where it was (its booking forgotten), e.g. when the node agent
        could not start it; it is considered again at the next tick."""
        task = self.task(name)
        if task.state != TaskState.RUNNING:
            raise InvalidRequest("task", f"task {name!r} is {task.state}, not running")
        now = self._now(now)
        self.state.unbook(task)
        task.started_at = None
        task.state = TaskState.PENDING
        self.state.enqueue(task)
        self.state.emit(EventKind.REQUEUED, task, now)
        self.memo.changed()
        return task

    def _end(self, name: str, kind: EventKind, state: TaskState, now: float) -> Task:
        task = self.task(name)
        if task.state == TaskState.PENDING:
            self.state.dequeue(task)
        elif task.state == TaskState.RUNNING:
            self.state.unbook(task)
        else:
            raise InvalidRequest("task", f"task {name!r} already {task.state}")
        task.state = state
        self.state.emit(kind, task, now)
        self.memo.changed()
        return task

    # ------------------------------------------------------------------ tick
    def tick(self, now: float | None = None, *, force: bool = False) -> list[Event]:
        """Admit, evict and explain until nothing more can change; returns this tick's events.

        A tick with nothing new (no submission, release, eviction, cluster change or
        minimum runtime passing) returns at once; ``force`` examines every pending task anyway.
        """
        now = self._now(now)
        if not self.memo.due(now, force=force):
            return []
        self.tree.refresh_capacity()
        out: list[Event] = []
        unsubscribe = self.state.bus.subscribe(out.append)
        try:
            self.evictions.drain(now)
            for _ in range(MAX_PASSES):
                self.counters.passes += 1
                if not self._pass(now):
                    break
        finally:
            unsubscribe()
        return out

    def _key(self, task: Task) -> tuple[Any, ...]:
        if self.tree.entitled_at(task.queue, task.estimate) is not None:
            return (0, (), task.order_key())
        return (1, self.tree.share_path(task.queue), task.order_key())

    def _pass(self, now: float) -> int:
        """One pass over the queues; returns what calls for another: the evictions it made, plus one when a
        task was admitted after another found no eviction the rules allow."""
        heap: list[tuple[tuple[Any, ...], int, Task]] = []
        order = itertools.count()
        evicted_before = self.counters.evicted
        self._blocked_in_pass = False
        # A task admitted after another was refused any eviction may be what the rules wanted (a queue now
        # borrowing is one reclaim may take from): then the tick makes another pass, not a later tick.
        admitted_after_block = False

        def push(task: Task) -> None:
            if self.memo.hopeless(task.shape, task.request, now, preemptive=self.preemptive):
                self.counters.skipped_identical += 1
                # known to find no eviction the rules allow: as good as refused one in this pass, so an
                # admission after it (which voids that memo) calls for another pass
                self._blocked_in_pass |= self.preemptive
                return
            heapq.heappush(heap, (self._key(task), next(order), task))

        for leaf in self.state.groups:
            for head in self.state.heads(leaf):
                push(head)
        while heap:
            key, _, task = heapq.heappop(heap)
            if task.state != TaskState.PENDING:
                continue
            fresh = self._key(task)
            if fresh > key and heap and fresh > heap[0][0]:
                heapq.heappush(heap, (fresh, next(order), task))
                continue
            if self._attempt(task, now):
                admitted_after_block |= self._blocked_in_pass
                nxt = self.state.heads(task.queue)
                strict = self.tree.nodes[task.queue].spec.strict_fifo
                for head in nxt if strict else [t for t in nxt if t.shape == task.shape]:
                    push(head)
            elif self.tree.nodes[task.queue].spec.strict_fifo:
                for other in self.pending(self.tree.nodes[task.queue].name):
                    if other is not task and other.wait_reason != WaitReason.STRICT_FIFO:
                        other.wait_reason = WaitReason.STRICT_FIFO
        return self.counters.evicted - evicted_before + int(admitted_after_block)

    # ------------------------------------------------------------------ one task
    def _attempt(self, task: Task, now: float) -> bool:
        self.counters.attempts += 1
        started = time.perf_counter()
        timed = False
        try:
            held = self.tree.switches.held(task.queue)
            if held is not None:
                self._wait(task, *held, now)
                return False
            limit = self.tree.over_limit(task.queue, task.estimate)
            if limit is not None:
                self._wait(task, WaitReason.QUEUE_LIMIT, limit, now)
                return False
            placement = None
            if not self.memo.known_not_to_fit(task.shape, task.request):
                timed = True
                self.counters.engine_calls += 1
                placement = self.engine.try_place(task.request)
                if placement is None:
                    self.memo.did_not_fit(task.shape)
            if placement is not None:
                placement, charge, reason, why = judge_quota(self.tree, self.resources, self.engine, task, placement)
                if placement is None:
                    # It fits but may not borrow what is free.  An admission later in the pass can take the
                    # room it fits in, and a task that does not fit may evict: that calls for another pass.
                    self._blocked_in_pass |= self.preemptive and reason in LENDING_REASONS
                    self._wait(task, reason, why, now)
                    return False
                self.state.book(task, placement, charge, now)
                kind = "guaranteed" if reason == "guaranteed" else "borrowing"
                self.state.emit(
                    EventKind.ADMITTED,
                    task,
                    now,
                    reason=kind,
                    nodes=tuple(placement.nodes),
                    data={"waited_s": now - task.submitted_at},
                )
                return True
            if self.preemptive:
                searches = self.counters.victim_searches
                planned = self.evictions.plan(task, now)
                timed = timed or self.counters.victim_searches > searches
                if planned is not None:
                    self.evictions.commit(task, *planned, now)
                    return True
                self._blocked_in_pass = True
                if self.tree.entitled_at(task.queue, task.estimate) is None:
                    detail = "borrowing (over its queue's guarantee): no idle capacity fits it now"
                else:
                    detail = "within its queue's guarantee, but no eviction the rules allow would make room"
            else:
                detail = "does not fit now (evictions are off: enable-preemptive is false)"
            self._wait(task, WaitReason.NO_CAPACITY, detail, now)
            return False
        finally:
            if timed and self.timings is not None:
                self.timings.append(time.perf_counter() - started)

    def _wait(self, task: Task, reason: WaitReason | str, detail: str, now: float) -> None:
        if task.wait_reason != reason:
            task.wait_reason = str(reason)
            self.state.emit(EventKind.WAITING, task, now, reason=str(reason), detail=detail)
