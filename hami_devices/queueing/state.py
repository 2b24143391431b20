"""The admission loop's bookkeeping: its tasks, where each stands, and the events it emits.

``LoopState`` is one part the loop owns: the groups of identical pending
requests per queue, the running tasks per queue and their footprints, booking
and unbooking a task (with its queues' usage and the checkpoint it restores),
and the event bus.  The decisions are the loop's (``loop``) and the evictions'
(``evictions``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.models import ResourceRequest
from hami_devices.queueing.events import Event, EventBus, EventKind
from hami_devices.queueing.footprints import Footprints
from hami_devices.queueing.memo import Memo
from hami_devices.queueing.resources import Resources, Vector
from hami_devices.queueing.tasks import Task, TaskState
from hami_devices.queueing.tree import QueueTree
from hami_devices.scheduling.cluster import Booking
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
        tree: QueueTree,
        resources: Resources,
        bus: EventBus,
        memo: Memo,
        counters: Counters,
        checkpoints: CheckpointHook | None = None,
    ) -> None:
        self.engine = engine
        self.cluster = engine.cluster
        self.tree = tree
        self.resources = resources
        self.bus = bus
        self.memo = memo
        self.counters = counters
        self.tasks: dict[str, Task] = {}
        leaves = [n.index for n in tree if n.leaf]
        self.groups: dict[int, dict[str, list[Task]]] = {leaf: {} for leaf in leaves}  # leaf -> shape -> in line
        self.running_in: dict[int, dict[str, Task]] = {leaf: {} for leaf in leaves}  # leaf -> name -> task
        self.footprints = Footprints(self.cluster, self.running)
        # evictions of checkpointable tasks save their state; their next admission restores it
        self.checkpoints = checkpoints
        self._saved: dict[str, str] = {}

    def emit(self, kind: EventKind, task: Task, now: float, **fields: Any) -> Event:
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
        leaves = [self.tree.leaf(queue).index] if queue else list(self.groups)
        out = [t for leaf in leaves for g in self.groups[leaf].values() for t in g]
        return sorted(out, key=Task.order_key)

    def running(self, queue: str | None = None) -> list[Task]:
        leaves = [self.tree.leaf(queue).index] if queue else list(self.running_in)
        return [t for leaf in leaves for t in self.running_in[leaf].values()]

    def why_waiting(self, task: Task) -> str | None:
        """The reason a pending task waits (a task behind an identical one waits for the same reason)."""
        if task.state != TaskState.PENDING:
            return None
        if task.wait_reason:
            return task.wait_reason
        group = self.groups[task.queue].get(task.shape) or []
        if group and group[0] is not task and group[0].wait_reason:
            return f"{group[0].wait_reason} (behind {group[0].name}, an identical request)"
        return None

    def prepared(self, request: ResourceRequest) -> ResourceRequest:
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

    def new_task(self, name: str, request: ResourceRequest, leaf: int, at: float, seq: int) -> Task:
        """A task of ``request`` in ``leaf`` since ``at``, with its shape (the request less its name: identical
        requests share it) and its estimate in the queues' resources."""
        task = Task(name, request, leaf, at, seq)
        task.shape = request.model_dump_json(exclude={"name"})
        task.estimate = self.resources.estimate(request)
        return task

    # ------------------------------------------------------------------ groups of identical requests
    def enqueue(self, task: Task) -> None:
        group = self.groups[task.queue].setdefault(task.shape, [])
        key = (task.submitted_at, task.seq)
        if not group or (group[-1].submitted_at, group[-1].seq) <= key:
            group.append(task)
        else:  # a requeued victim keeps its place in line
            i = next(i for i, t in enumerate(group) if (t.submitted_at, t.seq) > key)
            group.insert(i, task)

    def heads(self, leaf: int) -> list[Task]:
        """The first task of each group of ``leaf`` (the first of all when the queue is strict-fifo)."""
        heads = [g[0] for g in self.groups[leaf].values() if g]
        if self.tree.nodes[leaf].spec.strict_fifo and heads:
            return [min(heads, key=Task.order_key)]
        return heads

    def dequeue(self, task: Task) -> None:
        groups = self.groups[task.queue]
        group = groups[task.shape]
        if group and group[0] is task:
            group.pop(0)
        else:
            group.remove(task)
        if not group:
            del groups[task.shape]

    # ------------------------------------------------------------------ booking
    def book(self, task: Task, placement: Placement, charge: Vector, now: float) -> None:
        booking = self.engine.assume(placement)
        placement.booking_id = booking.id
        if task.state == TaskState.PENDING:
            self.dequeue(task)
        task.state = TaskState.RUNNING
        task.placement = placement
        task.started_at = now
        if task.first_started_at is None:
            task.first_started_at = now
        task.wait_reason = None
        self.hold(task, booking, charge)
        self.counters.admitted += 1
        state = self._saved.pop(task.name, None)
        if state is not None and self.checkpoints is not None:
            uuids = ",".join(g.uuid for g in placement.grants)
            self.checkpoints.restore(task.name, state, {"HAMI_DEVICE_UUIDS": uuids})

    def hold(self, task: Task, booking: Booking, charge: Vector) -> None:
        """Count a running task on its booking: its queues' usage, the running tasks, its footprint."""
        task.booking_id = booking.id
        task.charge = charge
        self.tree.charge(task.queue, charge)
        self.running_in[task.queue][task.name] = task
        self.footprints.add(task, booking)
        self.memo.saw_cluster()

    def unbook(self, task: Task) -> None:
        if task.booking_id is not None and task.booking_id in self.cluster.bookings:
            booking = self.cluster.forget(task.booking_id)
            c = self.cluster
            names = {*(g.node for g in booking.grants), *(booking.host_nodes or (booking.node,))}
            self.memo.freed_rows([c.node_row(name) for name in names if name in c.nodes])
        self.tree.uncharge(task.queue, task.charge)
        del self.running_in[task.queue][task.name]
        self.footprints.remove(task)
        task.booking_id = None
        self.memo.saw_cluster()

    def checkpoint(self, victim: Task) -> bool:
        """Save an evicted task's state when it can be saved (its next admission restores it)."""
        if self.checkpoints is None or not self.checkpoints.checkpointable(victim.name):
            return False
        self._saved[victim.name] = self.checkpoints.checkpoint(victim.name)
        return True
