"""How a cluster state mirrors a ledger's allocations: ``sync``, ``follow``, ``follow_changes`` and ``mirror``.

The ledger is the truth: a cluster state books each of its allocations as confirmed, by allocation id,
and forgets the confirmed ones the ledger no longer holds; assumed placements not yet in the ledger are
kept.  ``hami_devices.following`` chooses, per look, between ``follow`` (every id) and ``follow_changes``
(the ledger's change log since the last look).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from hami_devices.models import DeviceHandle
from hami_devices.scheduling.bookings import Booking, PlacementState

if TYPE_CHECKING:
    from hami_devices.scheduling.tables import NodeState


class LedgerMirror:
    """``ClusterState``'s ledger-facing half (the cluster's bookings, devices and nodes are its own)."""

    bookings: dict[str, Booking]
    uuid_index: dict[str, int]
    nodes: dict[str, NodeState]
    _elsewhere: set[str]  # ledger allocations with nothing on this cluster: asked for once

    def book(self, handle: DeviceHandle, *, node: str | None = None, verified: bool = False) -> Booking:
        raise NotImplementedError

    def forget(self, booking_id: str) -> Booking:
        raise NotImplementedError

    def sync(self, handles: Iterable[DeviceHandle], *, partial: bool = False) -> None:
        """Make the confirmed bookings exactly ``handles`` (a ledger's, after a restart or a missed event).

        Assumed placements that are not yet in the ledger are kept.  With ``partial`` the
        cluster holds only some of the ledger's devices: grants on the others are ignored.
        Allocations that break a limit are booked all the same (see ``book``).
        """
        live = {h.id: h for h in handles}
        self.follow(list(live), live.__getitem__, partial=partial)

    def follow(
        self, ids: Sequence[str], fetch: Callable[[str], DeviceHandle], *, partial: bool = False
    ) -> int:
        """``sync`` to the allocations ``ids`` (in the ledger's order), fetching only those not booked yet;
        returns how many were fetched.

        The one way a cluster state is brought in step with a ledger: a reader inside a ledger
        transaction passes its allocation ids and its ``get``, so a commit decodes only what
        changed since the last one.  Booking identity is the allocation id.
        """
        fetched = 0
        live = set(ids)
        for booking in list(self.bookings.values()):
            if booking.state == PlacementState.CONFIRMED and booking.id not in live:
                self.forget(booking.id)
        self._elsewhere &= live
        for handle_id in ids:
            fetched += self._take_held(handle_id, self.bookings.get(handle_id), fetch, partial)
        return fetched

    def follow_changes(
        self, changes: Sequence[tuple[str, bool]], fetch: Callable[[str], DeviceHandle], *, partial: bool = False
    ) -> int:
        """``follow`` by what changed instead of by every id: ``changes`` are (allocation id, added) in the
        ledger's order since this state was last in step with it; returns how many allocations were fetched.

        An id removed and added again is fetched again (another writer may have reused it), one added
        then removed is never fetched, and an assumed placement the ledger now holds becomes confirmed.
        """
        last: dict[str, bool] = {}
        removed: set[str] = set()
        for handle_id, added in changes:
            last.pop(handle_id, None)  # kept in the order of each id's last change
            last[handle_id] = added
            if not added:
                removed.add(handle_id)
        fetched = 0
        for handle_id, added in last.items():
            held = self.bookings.get(handle_id)
            if handle_id in removed:
                self._elsewhere.discard(handle_id)
                if held is not None and held.state == PlacementState.CONFIRMED:
                    self.forget(handle_id)
                    held = None
            if added:
                fetched += self._take_held(handle_id, held, fetch, partial)
        return fetched

    def _take_held(
        self, handle_id: str, held: Booking | None, fetch: Callable[[str], DeviceHandle], partial: bool
    ) -> int:
        """A ledger allocation this state holds: an assumed booking of it confirmed, or it fetched and mirrored
        unless it has nothing here; returns how many allocations were fetched (0 or 1)."""
        if held is not None:
            held.state = PlacementState.CONFIRMED
            return 0
        if handle_id in self._elsewhere:
            return 0
        self.mirror(fetch(handle_id), partial=partial)
        return 1

    def mirror(self, handle: DeviceHandle, *, partial: bool = False, verified: bool = False) -> None:
        """Book a ledger allocation (see ``book``); with ``partial`` only its grants on this cluster's devices,
        and nothing when it has none here."""
        if not partial:
            self.book(handle, verified=verified)
            return
        grants = [g for g in handle.grants if g.uuid in self.uuid_index]
        if grants:
            self.book(handle.model_copy(update={"grants": grants}), verified=verified)
        elif not handle.grants and handle.node in self.nodes:  # a host-only allocation on a node here
            self.book(handle, verified=verified)
        else:
            self._elsewhere.add(handle.id)  # on devices of another cluster: asked once, not at every follow
