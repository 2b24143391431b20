"""An engine's commits to its ledger: ``hd.allocate``'s transaction, on the engine's own cluster.

``hd.build_engine(inventory, config, ledger=ledger)`` binds a ``LedgerCommitter`` to the engine
(``Engine.committer``).  The committer's device set (``device_sets.DeviceSet``: the inventory's
devices on the simulated back end, their adapters, that ledger) holds the engine's cluster as its
own, so there is one view: every commit brings it in step with the ledger inside the ledger
transaction (``booked``), re-checks the placement there by the one rule set and books the
allocation in it, exactly as ``hd.allocate`` does for any caller.  The devices are made on the
first commit (a scheduler that only decides never pays for them).

A scheduler runs on a host of its own: by default (``prepare_on_node``) its allocations carry no path
of that host and create no limiter region there; the node that runs the workload makes them with
``hami-devices prepare HANDLE_ID`` (``hami_devices.handoff``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from hami_devices.allocation import allocate_on
from hami_devices.device import Device
from hami_devices.device_sets import DeviceSet, booked, device_set
from hami_devices.errors import InsufficientResources
from hami_devices.following import follow_ledger
from hami_devices.ledger import Ledger
from hami_devices.models import DeviceHandle, ResourceRequest
from hami_devices.releasing import release_from
from hami_devices.scheduling.engine import Engine, Placement

if TYPE_CHECKING:
    from hami_devices.scheduling.cluster import ClusterState

__all__ = ["LedgerCommitter"]


class LedgerCommitter:
    """Commits one engine's placements to ``ledger`` through ``hd.allocate``'s transaction (``allocate_on``)."""

    def __init__(
        self,
        ledger: Ledger,
        cluster: ClusterState,
        make_devices: Callable[[Ledger], list[Device]],
        *,
        prepare_on_node: bool = True,
    ) -> None:
        self.ledger = ledger
        self.prepare_on_node = prepare_on_node
        self._cluster = cluster
        self._make_devices = make_devices
        self._set: DeviceSet | None = None
        # one user of the cluster at a time in this process, before the first commit as after (the set's lock)
        self._lock = threading.Lock()

    @property
    def devices(self) -> list[Device]:
        """The engine's devices on the ledger (for ``hd.allocate``, ``monitor``, the exporter ...)."""
        return list(self._device_set().devices)

    def _device_set(self) -> DeviceSet:
        if self._set is None:
            with self._lock:
                if self._set is None:
                    devices = self._make_devices(self.ledger)
                    if not devices:
                        raise InsufficientResources("the engine's inventory has no devices to commit", permanent=True)
                    kept = device_set(devices)
                    # The engine's cluster is the set's: one view, brought in step with the ledger by each commit.
                    kept.cluster = self._cluster
                    kept.lock = self._lock
                    kept.prepare_on_node = self.prepare_on_node
                    self._set = kept
        return self._set

    def allocate(
        self, engine: Engine, request: ResourceRequest, metadata: Mapping[str, str] | None, handle_id: str | None
    ) -> DeviceHandle:
        return allocate_on(self._device_set(), request, metadata=metadata, handle_id=handle_id, engine=engine)

    def commit(self, placement: Placement, metadata: Mapping[str, str] | None, handle_id: str | None) -> DeviceHandle:
        return allocate_on(self._device_set(), placement, metadata=metadata, handle_id=handle_id)

    def release(self, handle: DeviceHandle | str, force: bool, reason: str | None) -> DeviceHandle:
        kept = self._device_set()
        released = release_from(self.ledger, handle, kept.adapters, reason=reason, force=force)
        self.refresh()  # forgets it, and books what a forced release left held (``revoked-<id>``)
        return released

    def refresh(self) -> int:
        with self._lock, self.ledger.reading() as view:
            if self._set is None:  # no commit yet: the engine's cluster alone follows the ledger
                return follow_ledger(self._cluster, self.ledger, view)
            booked(self._set, view, note=False)
            return self._set.fetched
