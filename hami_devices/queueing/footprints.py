"""Running tasks as arrays: what each holds where, so that the victim search filters thousands at once.

One *slot* per running task (priority, start, flags, leaf queue) and one row per
grant (device row, MiB, cores, exclusive) and per host charge (node row, CPU,
memory), in arrays that grow by doubling.  A released task leaves a dead slot;
the arrays are rebuilt when half the slots are dead or when the cluster's device
rows change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from hami_devices.queueing.tasks import Task
from hami_devices.scheduling.cluster import Booking, ClusterState

_SLOT = {
    "alive": bool,
    "priority": np.int64,
    "start": np.float64,
    "submitted": np.float64,
    "seq": np.int64,
    "interruptible": bool,
    "recomputable": bool,
    "leaf": np.int64,
}
_GRANT = {"slot": np.int64, "row": np.int64, "mem": np.int64, "cores": np.int64, "excl": bool}
_HOST = {"slot": np.int64, "node": np.int64, "cpu": np.int64, "mem": np.int64}


class _Table:
    """Columns of one kind of row, grown by doubling."""

    def __init__(self, columns: dict[str, Any]) -> None:
        self.dtypes = columns
        self.size = 0
        self.cols: dict[str, npt.NDArray[Any]] = {k: np.zeros(64, dtype=t) for k, t in columns.items()}

    def append(self, **values: Any) -> int:
        if self.size == next(iter(self.cols.values())).size:
            for k, col in self.cols.items():
                grown = np.zeros(2 * col.size, dtype=col.dtype)
                grown[: col.size] = col
                self.cols[k] = grown
        i = self.size
        for k, v in values.items():
            self.cols[k][i] = v
        self.size += 1
        return i

    def view(self, prefix: str) -> dict[str, npt.NDArray[Any]]:
        return {f"{prefix}_{k}": col[: self.size] for k, col in self.cols.items()}


class Footprints:
    def __init__(self, cluster: ClusterState, running: Callable[[], Iterable[Task]]) -> None:
        self.cluster = cluster
        self._running = running
        self._clear()

    def _clear(self) -> None:
        self.tasks: list[Task | None] = []
        self.slot_of: dict[str, int] = {}
        self._slots = _Table(_SLOT)
        self._grants = _Table(_GRANT)
        self._hosts = _Table(_HOST)
        self._dead = 0
        self._layout = self.cluster.layout_version

    def add(self, task: Task, booking: Booking) -> None:
        c = self.cluster
        slot = self._slots.append(
            alive=True,
            priority=task.priority,
            start=task.started_at or 0.0,
            submitted=task.submitted_at,
            seq=task.seq,
            interruptible=task.interruptible,
            recomputable=task.recomputable,
            leaf=task.queue,
        )
        self.tasks.append(task)
        self.slot_of[task.name] = slot
        for grant in booking.grants:
            row = c.uuid_index.get(grant.uuid)
            if row is not None:
                self._grants.append(
                    slot=slot, row=row, mem=grant.booked_mib, cores=grant.cores, excl=grant.exclusive
                )
        for name in booking.host_nodes or (booking.node,):
            if name in c.nodes:
                self._hosts.append(
                    slot=slot, node=c.node_row(name), cpu=booking.host_cpu_milli, mem=booking.host_memory_mib
                )

    def remove(self, task: Task) -> None:
        slot = self.slot_of.pop(task.name, None)
        if slot is None:
            return
        self._slots.cols["alive"][slot] = False
        self.tasks[slot] = None
        self._dead += 1

    def rebuild(self, running: Iterable[Task]) -> None:
        self._clear()
        for task in running:
            booking = self.cluster.bookings.get(task.booking_id or "")
            if booking is not None:
                self.add(task, booking)

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The columns (``slot_*``, ``grant_*``, ``host_*``) as views; rebuilt first when stale."""
        if self._layout != self.cluster.layout_version or self._dead > max(256, len(self.tasks) // 2):
            self.rebuild(list(self._running()))
        return {**self._slots.view("slot"), **self._grants.view("grant"), **self._hosts.view("host")}
