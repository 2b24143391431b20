"""Running tasks as arrays: what each holds where, so that the victim search filters thousands at once.

One *slot* per running task (priority, start, flags, leaf queue) and one row per
grant (device row, MiB, cores, exclusive) and per host charge (node row, CPU,
memory).  Released tasks leave a tombstone; the arrays are rebuilt when half
are dead or when the cluster's device rows change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from hami_devices.queueing.tasks import Task
from hami_devices.scheduling.cluster import Booking, ClusterState

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class Footprints:
    def __init__(self, cluster: ClusterState, running: Callable[[], Iterable[Task]]) -> None:
        self.cluster = cluster
        self._running = running
        self._clear()

    def _clear(self) -> None:
        self.tasks: list[Task | None] = []
        self.slot_of: dict[str, int] = {}
        self._slot: dict[str, list[float]] = {
            "priority": [],
            "start": [],
            "interruptible": [],
            "recomputable": [],
            "leaf": [],
        }
        self._grant: dict[str, list[float]] = {"slot": [], "row": [], "mem": [], "cores": [], "excl": []}
        self._host: dict[str, list[float]] = {"slot": [], "node": [], "cpu": [], "mem": []}
        self._alive: list[bool] = []
        self._dead = 0
        self._arrays: dict[str, npt.NDArray[np.generic]] | None = None
        self._layout = self.cluster.layout_version

    def add(self, task: Task, booking: Booking) -> None:
        c = self.cluster
        slot = len(self.tasks)
        self.tasks.append(task)
        self.slot_of[task.name] = slot
        self._alive.append(True)
        s = self._slot
        s["priority"].append(task.priority)
        s["start"].append(task.started_at or 0.0)
        s["interruptible"].append(task.interruptible)
        s["recomputable"].append(task.recomputable)
        s["leaf"].append(task.queue)
        g = self._grant
        for grant in booking.grants:
            row = c.uuid_index.get(grant.uuid)
            if row is None:
                continue
            g["slot"].append(slot)
            g["row"].append(row)
            g["mem"].append(grant.memory_mib)
            g["cores"].append(grant.cores)
            g["excl"].append(grant.exclusive)
        h = self._host
        for name in booking.host_nodes or (booking.node,):
            if name in c.nodes:
                h["slot"].append(slot)
                h["node"].append(c.node_row(name))
                h["cpu"].append(booking.host_cpu_milli)
                h["mem"].append(booking.host_memory_mib)
        self._arrays = None

    def remove(self, task: Task) -> None:
        slot = self.slot_of.pop(task.name, None)
        if slot is None:
            return
        self._alive[slot] = False
        self.tasks[slot] = None
        self._dead += 1
        self._arrays = None

    def rebuild(self, running: Iterable[Task]) -> None:
        self._clear()
        for task in running:
            booking = self.cluster.bookings.get(task.booking_id or "")
            if booking is not None:
                self.add(task, booking)

    def arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """The columns as arrays (``slot_*``, ``grant_*``, ``host_*``), rebuilt when stale."""
        if self._layout != self.cluster.layout_version or self._dead > max(64, len(self.tasks) // 2):
            self.rebuild(list(self._running()))
        if self._arrays is None:
            a: dict[str, npt.NDArray[np.generic]] = {}
            a["slot_alive"] = np.array(self._alive, dtype=bool)
            a["slot_priority"] = np.array(self._slot["priority"], dtype=np.int64)
            a["slot_start"] = np.array(self._slot["start"], dtype=np.float64)
            a["slot_interruptible"] = np.array(self._slot["interruptible"], dtype=bool)
            a["slot_recomputable"] = np.array(self._slot["recomputable"], dtype=bool)
            a["slot_leaf"] = np.array(self._slot["leaf"], dtype=np.int64)
            for key, dtype in (("slot", np.int64), ("row", np.int64), ("mem", np.int64), ("cores", np.int64)):
                a[f"grant_{key}"] = np.array(self._grant[key], dtype=dtype)
            a["grant_excl"] = np.array(self._grant["excl"], dtype=bool)
            for key in ("slot", "node", "cpu", "mem"):
                a[f"host_{key}"] = np.array(self._host[key], dtype=np.int64)
            self._arrays = a
        return self._arrays
