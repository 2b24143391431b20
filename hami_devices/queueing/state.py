"""The admission loop's state: tasks, the queue tree, what runs where, and the events it emits.

``LoopState`` keeps the bookkeeping every part of the loop shares (booking and
unbooking a task, the groups of identical pending requests, the event bus);
``evictions`` and ``loop`` add the decisions.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.models import ResourceRequest
from hami_devices.queueing.events import Event, EventBus, EventKind, Listener
from hami_devices.queueing.footprints import Footprints
from hami_devices.queueing.planner import EvictionPlanner
from hami_devices.queueing.resources import Resources, Vector
from hami_devices.queueing.spec import QueueFile, load_queues
from hami_devices.queueing.tasks import Task, TaskState
from hami_devices.queueing.tree import QueueTree
from hami_devices.queueing.victims import MAX_NODES
from hami_devices.scheduling.defrag.checkpoint import CheckpointHook
from hami_devices.scheduling.engine import Engine, Placement
from hami_devices.traits import did_you_mean


@dataclass
class Counters:
    attempts: int = 0
    engine_calls: int = 0
    skipped_identical: int = 0  # group heads known not to fit (no engine call)
    victim_searches: int = 0
    admitted: int = 0
    evicted: int = 0
    passes: int = 0


class LoopState:
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
        self.resources = Resources(QueueTree.collect_keys(queues), queues.classes, self.cluster, source=source)
        self.tree = QueueTree(queues, self.resources)
        self.preemptive = preemptive
        self.requeue_victims = requeue
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
        # evictions of checkpointable tasks save their state; their next admission restores it
        self.checkpoints = checkpoints
        self._saved: dict[str, str] = {}

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

    # ------------------------------------------------------------------ what a submission becomes
    def _prepared(self, request: ResourceRequest) -> ResourceRequest:
        """The request as the loop keeps it: the engine's defaults filled in, a priority class made a priority."""
        request = self.engine.with_defaults(request)
        name = request.priority_class
        if name is None:
            return request
        classes = self.tree.spec.priority_classes
        if name not in classes:
            hint = did_you_mean(name, classes)
            known = ", ".join(sorted(classes)) or "none declared"
            raise InvalidRequest("priority_class", f"unknown priority class {name!r}{hint} (known: {known})")
        return request.model_copy(update={"priority": classes[name]})

    def set_queue_state(self, queue: str, *, state: str | None = None, stop_policy: str | None = None) -> None:
        """Open, close or drain a queue, or set its stop-policy, while the loop runs (from the next tick)."""
        self.tree.set_state(queue, state, stop_policy)
        self._dirty = True

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
        state = self._saved.pop(task.name, None)
        if state is not None and self.checkpoints is not None:
            uuids = ",".join(g.uuid for g in placement.grants)
            self.checkpoints.restore(task.name, state, {"HAMI_DEVICE_UUIDS": uuids})

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
