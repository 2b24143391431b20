"""From queue to ledger in one object: the admission loop's decisions committed to the devices' ledger.

``QueueRunner(loop, devices)`` subscribes to the loop and commits each decision
as it is made, in the order it is made:

* an admission becomes ``hd.allocate(devices, placement)``: the loop's exact
  placement, re-checked inside the ledger transaction (the handle carries the
  task and queue as metadata);
* an eviction becomes ``allocation.evict`` (recorded as ``allocation.evicted``,
  naming the task it made room for and why), before the admission it makes room
  for is committed;
* a finish or a cancellation becomes ``hd.release``.

The loop's cluster is built from the same devices, so it and the ledger hold the
same grants.  A placement the ledger refuses (another writer took the devices
meanwhile) is put back in line with ``AdmissionLoop.requeue`` after the tick,
and the loop tries again at the next one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hami_devices.allocation import allocate, evict, release
from hami_devices.assembly import configure_engine
from hami_devices.config import HamiConfig
from hami_devices.device import Device
from hami_devices.discovery import discover
from hami_devices.errors import InsufficientResources, InvalidRequest
from hami_devices.inputs import as_config
from hami_devices.inventory import Inventory
from hami_devices.ledger import Ledger
from hami_devices.models import DeviceHandle, ResourceRequest
from hami_devices.queueing.events import Event, EventKind
from hami_devices.queueing.loop import AdmissionLoop
from hami_devices.queueing.spec import QueueFile
from hami_devices.queueing.tasks import Task
from hami_devices.scheduling.cluster import ClusterState


class QueueRunner:
    """An ``AdmissionLoop`` whose admissions, evictions and releases reach the devices' ledger."""

    def __init__(self, loop: AdmissionLoop, devices: Sequence[Device]) -> None:
        if not devices:
            raise InvalidRequest("devices", "a queue runner needs the devices it grants")
        unknown = [d.uuid for d in devices if d.uuid not in loop.cluster.uuid_index]
        if unknown:
            raise InvalidRequest("devices", f"device {unknown[0]!r} is not in the loop's cluster")
        self.loop = loop
        self.devices = list(devices)
        self.ledger: Ledger = devices[0].ledger
        self.handles: dict[str, DeviceHandle] = {}  # running task -> its allocation
        self.stale: list[str] = []  # admissions the ledger refused this tick
        loop.subscribe(self._commit)

    @classmethod
    def from_config(
        cls,
        inventory: str | Path | Inventory,
        queues: QueueFile | str | Path,
        config: HamiConfig | Mapping[str, Any] | str | Path | None = None,
        *,
        ledger: Ledger | None = None,
        policy: str | None = None,
        **options: Any,
    ) -> QueueRunner:
        """Devices from ``inventory`` (``hd.discover``), the loop's engine over them as ``configure_engine``
        builds it, evictions when ``enable-preemptive`` is on (``options`` go to ``AdmissionLoop``)."""
        config = as_config(config)
        devices = discover(inventory, config=config, ledger=ledger)
        engine = configure_engine(ClusterState.from_devices(devices, devices[0].ledger.handles()), config,
                                  policy=policy)
        options.setdefault("preemptive", config.scheduler.resource_allocation.enable_preemptive)
        return cls(AdmissionLoop(engine, queues, **options), devices)

    # ------------------------------------------------------------------ the loop's verbs
    def submit(self, request: ResourceRequest | Mapping[str, Any], *, name: str | None = None,
               now: float | None = None) -> Task:
        return self.loop.submit(request, name=name, now=now)

    def tick(self, now: float | None = None, *, force: bool = False) -> list[Event]:
        """The loop's tick, every decision committed to the ledger; refused admissions go back in line."""
        events = self.loop.tick(now, force=force)
        stale, self.stale = self.stale, []
        for name in stale:
            self.loop.requeue(name, now=now)
        return events

    def finish(self, name: str, *, now: float | None = None) -> Task:
        return self.loop.finish(name, now=now)

    def cancel(self, name: str, *, now: float | None = None) -> Task:
        return self.loop.cancel(name, now=now)

    def handle(self, name: str) -> DeviceHandle:
        """The allocation of a running task (its environment: ``handle.env``)."""
        try:
            return self.handles[name]
        except KeyError:
            raise InvalidRequest("task", f"task {name!r} holds no allocation") from None

    # ------------------------------------------------------------------ committing
    def _commit(self, event: Event) -> None:
        if event.kind == EventKind.ADMITTED:
            task = self.loop.task(event.task)
            if task.placement is None or not task.placement.grants:
                return  # host CPU and memory only: nothing for the devices' ledger to grant
            try:
                self.handles[task.name] = allocate(
                    self.devices, task.placement, metadata={"task": task.name, "queue": event.queue}
                )
            except InsufficientResources:
                self.stale.append(task.name)
        elif event.kind == EventKind.EVICTED:
            handle = self.handles.pop(event.task, None)
            if handle is not None:
                who = event.by or f"queue {event.queue}"
                evict(self.ledger, handle, reclaimer=who, reason=f"{event.reason}: {event.detail or ''}")
        elif event.kind in (EventKind.FINISHED, EventKind.CANCELLED, EventKind.REQUEUED):
            handle = self.handles.pop(event.task, None)
            if handle is not None:
                release(handle, ledger=self.ledger)
