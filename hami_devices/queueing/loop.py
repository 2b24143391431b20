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
A node agent commits an admission with ``hd.allocate(devices, event placement)``
(``task(name).placement``) and kills evicted tasks before starting the task
they made room for.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hami_devices.assembly import build_engine
from hami_devices.errors import HamiError, InvalidRequest
from hami_devices.models import ResourceRequest
from hami_devices.queueing.events import Event, EventBus, EventKind, EvictionReason, Listener, WaitReason
from hami_devices.queueing.footprints import Footprints
from hami_devices.queueing.planner import EvictionPlanner, Planned
from hami_devices.queueing.preemption import Rule
from hami_devices.queueing.prefilter import fits_any
from hami_devices.queueing.resources import Resources, Vector
from hami_devices.queueing.spec import QueueFile, load_queues
from hami_devices.queueing.tasks import Task, TaskState
from hami_devices.queueing.tree import QueueTree, exceeds
from hami_devices.queueing.victims import MAX_NODES, Choice
from hami_devices.scheduling.engine import Engine, Placement

if TYPE_CHECKING:
    from hami_devices.config import HamiConfig
    from hami_devices.inventory import Inventory

MAX_PASSES = 64  # a tick's passes; each pass after the first follows evictions, which cannot repeat forever


@dataclass
class PreemptionPlan:
    """What admitting a request would take: the victims, why, and the placement once they are gone."""

    reason: EvictionReason | None  # None: it fits without evicting anything
    victims: list[str]
    placement: Placement
    details: dict[str, str] = field(default_factory=dict)  # victim -> the readable why


@dataclass
class Counters:
    attempts: int = 0
    engine_calls: int = 0
    skipped_identical: int = 0  # group heads known not to fit (no engine call)
    victim_searches: int = 0
    admitted: int = 0
    evicted: int = 0
    passes: int = 0


class AdmissionLoop:
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
    ) -> None:
        source = None
        if not isinstance(queues, QueueFile):
            source = str(queues)
            queues = load_queues(queues)
        self.engine = engine
        self.cluster = engine.cluster
        self.resources = Resources(QueueTree.collect_keys(queues), queues.classes, self.cluster, source=source)
        self.tree = QueueTree(queues, self.resources)
        self.preemptive = preemptive
        self.requeue = requeue
        self.max_nodes = max_nodes
        self._clock = clock
        self.bus = EventBus(keep_events)
        self.tasks: dict[str, Task] = {}
        self._groups: dict[int, dict[str, list[Task]]] = {n.index: {} for n in self.tree if n.leaf}
        self._running: dict[int, dict[str, Task]] = {n.index: {} for n in self.tree if n.leaf}
        self._footprints = Footprints(self.cluster, self.running)
        self._planner = EvictionPlanner(engine, self.tree, self.resources, self._footprints, self._running, max_nodes)
        self._seq = itertools.count()
        # "Did not fit" memo: a shape that did not fit can only fit once capacity is freed, and only on
        # the nodes where it was.  The loop logs the nodes it frees; ``_epoch`` bumps when the cluster
        # changed in ways the loop did not see (then every memo is void).
        self._epoch = 0
        self._freed: list[int] = []  # node rows freed by the loop, in order
        self._nofit: dict[str, tuple[int, int]] = {}  # shape -> (epoch, len(_freed)) when it last did not fit
        self._nopreempt: dict[str, tuple[int, float]] = {}  # shape -> (cluster version, valid until)
        self._seen_version = self.cluster.version
        # This pass: a task found no eviction the rules allow (see ``_pass``).
        self._blocked_in_pass = False
        self._dirty = True
        self._wake_at = float("inf")
        self.counters = Counters()
        self.timings: list[float] | None = [] if record_timings else None

    @classmethod
    def from_config(
        cls,
        inventory: str | Path | Inventory,
        queues: QueueFile | str | Path,
        config: HamiConfig | str | Path | None = None,
        *,
        policy: str | None = None,
        policies: str | Path | None = None,
        **options: Any,
    ) -> AdmissionLoop:
        """The engine as ``hami-devices schedule`` builds it; evictions only when ``enable-preemptive`` is on."""
        from hami_devices.config import HamiConfig, load_config

        if not isinstance(config, HamiConfig):
            config = load_config(config) if config is not None else HamiConfig()
        engine = build_engine(inventory, config, policy=policy, policies=policies)
        options.setdefault("preemptive", config.scheduler.resource_allocation.enable_preemptive)
        return cls(engine, queues, **options)

    # ------------------------------------------------------------------ events
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every event as it happens; returns a function that unsubscribes."""
        return self.bus.subscribe(listener)

    def events(self) -> Iterator[Event]:
        """The events not yet drained, oldest first."""
        return self.bus.drain()

    def _emit(self, kind: EventKind, task: Task, now: float, **fields: Any) -> Event:
        event = Event(kind, now, task.name, self.tree.nodes[task.queue].name, **fields)
        self.bus.emit(event)
        return event

    # ------------------------------------------------------------------ queries
    def task(self, name: str) -> Task:
        try:
            return self.tasks[name]
        except KeyError:
            raise InvalidRequest("task", f"unknown task {name!r}") from None

    def pending(self, queue: str | None = None) -> list[Task]:
        leaves = [self.tree.leaf(queue).index] if queue else list(self._groups)
        out = [t for leaf in leaves for g in self._groups[leaf].values() for t in g]
        return sorted(out, key=Task.order_key)

    def running(self, queue: str | None = None) -> list[Task]:
        leaves = [self.tree.leaf(queue).index] if queue else list(self._running)
        return [t for leaf in leaves for t in self._running[leaf].values()]

    def why_waiting(self, task: Task) -> str | None:
        """The reason a pending task waits (a task behind an identical one waits for the same reason)."""
        if task.state != TaskState.PENDING:
            return None
        if task.wait_reason:
            return task.wait_reason
        group = self._groups[task.queue].get(task.shape) or []
        if group and group[0] is not task and group[0].wait_reason:
            return f"{group[0].wait_reason} (behind {group[0].name}, an identical request)"
        return None

    def usage(self, queue: str) -> dict[str, float]:
        return self.resources.to_dict(self.tree.usage[self.tree.by_name[queue].index], skip_zero=False)

    def _now(self, now: float | None) -> float:
        return self._clock() if now is None else float(now)

    # ------------------------------------------------------------------ requests
    def submit(
        self, request: ResourceRequest | Mapping[str, Any], *, name: str | None = None, now: float | None = None
    ) -> Task:
        """Queue a task in ``request.queue``; it is considered at the next ``tick``."""
        if not isinstance(request, ResourceRequest):
            request = ResourceRequest.model_validate(dict(request))
        now = self._now(now)
        leaf = self.tree.leaf(request.queue)
        seq = next(self._seq)
        name = name or request.name or f"task-{seq}"
        if name in self.tasks and self.tasks[name].state in (TaskState.PENDING, TaskState.RUNNING):
            raise InvalidRequest("name", f"task {name!r} is already {self.tasks[name].state}")
        task = Task(name, request, leaf.index, now, seq)
        task.shape = request.model_dump_json(exclude={"name"})
        task.estimate = self.resources.estimate(request)
        self.tasks[name] = task
        self._enqueue(task)
        self._emit(EventKind.SUBMITTED, task, now)
        self._dirty = True
        return task

    def adopt(
        self, request: ResourceRequest, booking_id: str, *, name: str | None = None, started_at: float | None = None
    ) -> Task:
        """Take over a task already running on a booking of the cluster (after a restart, or admitted elsewhere)."""
        leaf = self.tree.leaf(request.queue)
        booking = self.cluster.bookings.get(booking_id)
        if booking is None:
            raise InvalidRequest("booking_id", f"no booking {booking_id!r} in the cluster")
        seq = next(self._seq)
        started = self._now(started_at)
        task = Task(name or request.name or booking_id, request, leaf.index, started, seq)
        task.shape = request.model_dump_json(exclude={"name"})
        task.estimate = self.resources.estimate(request)
        task.state = TaskState.RUNNING
        task.started_at = task.first_started_at = started
        task.booking_id = booking_id
        task.charge = self.resources.of_booking(booking)
        self.tasks[task.name] = task
        self.tree.charge(leaf.index, task.charge)
        self._running[leaf.index][task.name] = task
        self._footprints.add(task, booking)
        self._seen_version = self.cluster.version
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

    def _end(self, name: str, kind: EventKind, state: TaskState, now: float) -> Task:
        task = self.task(name)
        if task.state == TaskState.PENDING:
            self._dequeue(task)
        elif task.state == TaskState.RUNNING:
            self._unbook(task)
        else:
            raise InvalidRequest("task", f"task {name!r} already {task.state}")
        task.state = state
        self._emit(kind, task, now)
        self._dirty = True
        return task

    # ------------------------------------------------------------------ groups of identical requests
    def _enqueue(self, task: Task) -> None:
        group = self._groups[task.queue].setdefault(task.shape, [])
        key = (task.submitted_at, task.seq)
        if not group or (group[-1].submitted_at, group[-1].seq) <= key:
            group.append(task)
        else:  # a requeued victim keeps its place in line
            i = next(i for i, t in enumerate(group) if (t.submitted_at, t.seq) > key)
            group.insert(i, task)

    def _dequeue(self, task: Task) -> None:
        groups = self._groups[task.queue]
        group = groups[task.shape]
        if group and group[0] is task:
            group.pop(0)
        else:
            group.remove(task)
        if not group:
            del groups[task.shape]

    # ------------------------------------------------------------------ booking
    def _book(self, task: Task, placement: Placement, charge: Vector, now: float) -> None:
        booking = self.engine.book(placement)
        placement.booking_id = booking.id
        if task.state == TaskState.PENDING:
            self._dequeue(task)
        task.state = TaskState.RUNNING
        task.placement = placement
        task.booking_id = booking.id
        task.charge = charge
        task.started_at = now
        if task.first_started_at is None:
            task.first_started_at = now
        task.wait_reason = None
        self.tree.charge(task.queue, charge)
        self._running[task.queue][task.name] = task
        self._footprints.add(task, booking)
        self._seen_version = self.cluster.version
        self.counters.admitted += 1

    def _unbook(self, task: Task) -> None:
        if task.booking_id is not None and task.booking_id in self.cluster.bookings:
            booking = self.cluster.forget(task.booking_id)
            c = self.cluster
            for name in {*(g.node for g in booking.grants), *(booking.host_nodes or (booking.node,))}:
                if name in c.nodes:
                    self._freed.append(c.node_row(name))
        self.tree.uncharge(task.queue, task.charge)
        del self._running[task.queue][task.name]
        self._footprints.remove(task)
        task.booking_id = None
        if len(self._freed) > 200_000:  # forget the log: every memo is void
            self._freed.clear()
            self._epoch += 1
        self._seen_version = self.cluster.version

    # ------------------------------------------------------------------ tick
    def tick(self, now: float | None = None, *, force: bool = False) -> list[Event]:
        """Admit, evict and explain until nothing more can change; returns this tick's events.

        A tick with nothing new (no submission, release, eviction, cluster change or
        minimum runtime passing) returns at once; ``force`` examines every pending task anyway.
        """
        now = self._now(now)
        if force:
            self._dirty = True
            self._nopreempt.clear()
            self._nofit.clear()
        if self.cluster.version != self._seen_version:  # the cluster changed under us (nodes, health, bookings)
            self._epoch += 1
            self._seen_version = self.cluster.version
            self._dirty = True
        if not self._dirty and now < self._wake_at:
            return []
        self.tree.refresh_capacity()
        self._dirty = False
        self._wake_at = float("inf")
        out: list[Event] = []
        unsubscribe = self.bus.subscribe(out.append)
        try:
            for _ in range(MAX_PASSES):
                self.counters.passes += 1
                if not self._pass(now):
                    break
        finally:
            unsubscribe()
        return out

    def _known_not_to_fit(self, task: Task) -> bool:
        """It did not fit, and no node freed since could take it."""
        memo = self._nofit.get(task.shape)
        if memo is None or memo[0] != self._epoch:
            return False
        seen = memo[1]
        if seen < len(self._freed):
            nodes = np.unique(np.array(self._freed[seen:], dtype=np.int64))
            if fits_any(self.cluster, task.request, nodes):
                return False
            self._nofit[task.shape] = (self._epoch, len(self._freed))
        return True

    def _hopeless(self, task: Task, now: float) -> bool:
        """Known not to fit, and no eviction could change that now."""
        if not self._known_not_to_fit(task):
            return False
        if not self.preemptive:
            return True
        memo = self._nopreempt.get(task.shape)
        return memo is not None and memo[0] == self.cluster.version and now < memo[1]

    def _key(self, task: Task) -> tuple[Any, ...]:
        if self.tree.entitled_at(task.queue, task.estimate) is not None:
            return (0, (), task.order_key())
        return (1, self.tree.share_path(task.queue), task.order_key())

    def _heads(self, leaf: int) -> list[Task]:
        groups = self._groups[leaf]
        heads = [g[0] for g in groups.values() if g]
        if self.tree.nodes[leaf].spec.strict_fifo and heads:
            return [min(heads, key=Task.order_key)]
        return heads

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
            if self._hopeless(task, now):
                self.counters.skipped_identical += 1
                return
            heapq.heappush(heap, (self._key(task), next(order), task))

        for leaf in self._groups:
            for head in self._heads(leaf):
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
                nxt = self._heads(task.queue)
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
            limit = self.tree.over_limit(task.queue, task.estimate)
            if limit is not None:
                self._wait(task, WaitReason.QUEUE_LIMIT, limit, now)
                return False
            placement = None
            if not self._known_not_to_fit(task):
                timed = True
                self.counters.engine_calls += 1
                placement = self.engine.try_place(task.request)
                if placement is None:
                    self._nofit[task.shape] = (self._epoch, len(self._freed))
            if placement is not None:
                placement, charge, reason, why = self._quota(task, placement)
                if placement is None:
                    self._wait(task, reason, why, now)
                    return False
                self._book(task, placement, charge, now)
                kind = "guaranteed" if reason == "guaranteed" else "borrowing"
                self._emit(
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
                planned = self._plan(task, now)
                timed = timed or self.counters.victim_searches > searches
                if planned is not None:
                    self._commit(task, *planned, now)
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
            self._emit(EventKind.WAITING, task, now, reason=str(reason), detail=detail)

    def _quota(self, task: Task, placement: Placement) -> tuple[Placement | None, Vector, str, str]:
        """The placement's exact charge against the limits, the guarantee and the lending limits.

        A placement that breaks a limit on a scoped resource only (``device-cores@big``)
        is tried once more away from those devices.
        """
        charge = self.resources.of_placement(placement)
        limit = self.tree.over_limit(task.queue, charge)
        if limit is not None:
            retry = self._away_from_scopes(task, charge)
            if retry is None:
                return None, charge, WaitReason.QUEUE_LIMIT, limit
            placement, charge = retry
        if self.tree.entitled_at(task.queue, charge) is not None:
            return placement, charge, "guaranteed", ""
        if self.tree.lends_all and task.interruptible:
            return placement, charge, "borrowing", ""
        free = self.tree.capacity - self.resources.used()
        blocked = self.tree.lending_blocked(task.queue, charge, free)
        if blocked is not None:
            return None, charge, WaitReason.LENDING_LIMIT, f"borrowing: {blocked}"
        if not task.interruptible:
            blocked = self.tree.lending_blocked(task.queue, charge, free, everything=True)
            if blocked is not None:
                return (
                    None,
                    charge,
                    WaitReason.GUARANTEES_RESERVED,
                    (
                        f"over its queue's guarantee and not interruptible, it may borrow only what no queue is "
                        f"guaranteed: {blocked}"
                    ),
                )
        return placement, charge, "borrowing", ""

    def _away_from_scopes(self, task: Task, charge: Vector) -> tuple[Placement, Vector] | None:
        tree, res = self.tree, self.resources
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
        placement = self.engine.try_place(task.request.model_copy(update={"parts": parts}))
        if placement is None:
            return None
        charge = self.resources.of_placement(placement)
        if tree.over_limit(task.queue, charge) is not None:
            return None
        placement.request = task.request
        return placement, charge

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

    def _evict(self, victim: Task, reason: EvictionReason, by: Task, why: str, now: float) -> None:
        lost = victim.runtime(now) * victim.device_share()
        nodes = tuple(victim.placement.nodes) if victim.placement else ()
        self._unbook(victim)
        victim.evictions += 1
        self.counters.evicted += 1
        requeue = self.requeue and victim.recomputable
        self._emit(
            EventKind.EVICTED,
            victim,
            now,
            reason=str(reason),
            by=by.name,
            detail=why,
            nodes=nodes,
            data={"lost_device_seconds": lost, "requeued": requeue, "by_queue": self.tree.nodes[by.queue].name},
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
        task = Task(request.name or "<request>", request, leaf.index, now, -1)
        task.shape = "<dry-run>"
        task.estimate = self.resources.estimate(request)
        if self.tree.over_limit(leaf.index, task.estimate) is not None:
            return None
        placement = self.engine.try_place(request)
        if placement is not None:
            placement, _, _, _ = self._quota(task, placement)
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
