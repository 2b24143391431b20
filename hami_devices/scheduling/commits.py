"""What an engine built with a ledger commits through (``Engine.allocate``, ``commit``, ``release``, ``refresh``).

The scheduling layer decides and never writes a ledger; the layer above it
(``hami_devices.committing``) implements this protocol with the same transaction
``hd.allocate`` runs, and ``hami_devices.build_engine(..., ledger=...)`` binds it to the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from hami_devices.errors import InvalidRequest, NoLedger
from hami_devices.inputs import as_request
from hami_devices.models import DeviceHandle, ResourceRequest
from hami_devices.scheduling.placement import Placement

if TYPE_CHECKING:
    from hami_devices.device import Device
    from hami_devices.ledger import Ledger
    from hami_devices.scheduling.engine import Engine


class Committer(Protocol):
    """Commits an engine's decisions to one ledger and keeps the engine's cluster in step with it."""

    ledger: Ledger

    @property
    def devices(self) -> list[Device]: ...

    def allocate(
        self, engine: Engine, request: ResourceRequest, metadata: Mapping[str, str] | None, handle_id: str | None
    ) -> DeviceHandle: ...

    def commit(
        self, placement: Placement, metadata: Mapping[str, str] | None, handle_id: str | None
    ) -> DeviceHandle: ...

    def release(self, handle: DeviceHandle | str, force: bool, reason: str | None) -> DeviceHandle: ...

    def refresh(self) -> int: ...


class Commits:
    """An engine's commits, when it was built with a ledger (``committer``); the engine decides, this commits."""

    committer: Committer | None

    @property
    def ledger_bound(self) -> bool:
        """Whether ``allocate``, ``commit``, ``release`` and ``refresh`` have a ledger to work on."""
        return self.committer is not None

    def _committer(self, operation: str) -> Committer:
        if self.committer is None:
            raise NoLedger(operation)
        return self.committer

    def allocate(
        self,
        request: ResourceRequest | Mapping[str, Any],
        *,
        metadata: Mapping[str, str] | None = None,
        handle_id: str | None = None,
    ) -> DeviceHandle:
        """Place ``request`` and commit it, in one ledger transaction (``hd.allocate``'s), on this engine's
        cluster brought in step with the ledger first; the engine's cluster holds the allocation after.
        ``InsufficientResources`` (recorded as a refusal event) when it does not fit."""
        committer = self._committer("allocate")
        return committer.allocate(cast("Engine", self), as_request(request), metadata, handle_id)

    def commit(
        self, placement: Placement, *, metadata: Mapping[str, str] | None = None, handle_id: str | None = None
    ) -> DeviceHandle:
        """Commit a placement decided earlier (``place``), exactly as ranked, or refuse it with
        ``InsufficientResources`` (``permanent=False``) if what the ledger holds now makes it stale."""
        if not isinstance(placement, Placement):
            raise InvalidRequest("placement", f"expected a Placement (engine.place), got {type(placement).__name__}")
        return self._committer("commit").commit(placement, metadata, handle_id)

    def release(self, handle: DeviceHandle | str, *, force: bool = False, reason: str | None = None) -> DeviceHandle:
        """Release an allocation of the engine's ledger (a handle or its id) and take it out of the cluster."""
        if not isinstance(handle, DeviceHandle | str):
            raise InvalidRequest("handle", f"expected a DeviceHandle or its id, got {type(handle).__name__}")
        return self._committer("release").release(handle, force, reason)

    @property
    def devices(self) -> list[Device]:
        """The devices the engine commits on (its inventory on the simulated back end, on its ledger): for
        ``hd.allocate``, ``monitor`` or the exporter."""
        return self._committer("devices").devices

    def refresh(self) -> int:
        """Take in what other writers of the ledger committed or released; returns how many allocations
        were new to this engine."""
        return self._committer("refresh").refresh()
