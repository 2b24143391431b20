"""Giving an allocation back: exactly once, never from under a running workload unless told to.

``release_from`` removes an allocation from its ledger and undoes what granting it made (partitions, limiter
regions).  A workload process still registered alive in the allocation's regions refuses the release
(``AllocationInUse``, naming the pids) unless it is forced; a forced release (and every eviction) revokes the
regions first, so those processes can allocate no more device memory, and records ``allocation.revoked``.
What those processes still hold stays booked in the ledger, as an allocation ``revoked-<id>`` of its own, until
they exit; then the next commit (``reclaim_revoked``) releases it by the same path as any release.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hami_devices.errors import AllocationInUse, InvalidRequest
from hami_devices.holdings import held_mib
from hami_devices.isolation import live_processes, remove_regions, revoke_regions
from hami_devices.ledger import Ledger, LedgerView, lifecycle
from hami_devices.ledger.conflicts import forget_conflict
from hami_devices.models import DeviceHandle, Grant, group_key
from hami_devices.registry import adapter_for

if TYPE_CHECKING:
    from hami_devices.adapter import VendorAdapter

__all__ = ["REVOKED_FROM", "REVOKED_PREFIX", "evict", "reclaim_revoked", "release", "release_from", "undo_side_effects"]


def undo_side_effects(
    handle: DeviceHandle, adapters: Mapping[str, VendorAdapter], keep_regions: Sequence[str] = ()
) -> None:
    """Tear down what granting ``handle`` made on the devices (partitions) and its limiter regions (those
    in ``keep_regions`` stay: revoked regions that live processes still use)."""
    by_vendor: dict[str, list[Grant]] = defaultdict(list)
    for grant in handle.grants:
        by_vendor[grant.vendor].append(grant)
    for vendor, grants in by_vendor.items():
        if vendor in adapters:
            adapters[vendor].teardown(grants)
    remove_regions(handle, keep_regions)


def release(
    handle: DeviceHandle | str,
    *,
    ledger: Ledger | None = None,
    adapters: Mapping[str, VendorAdapter] | None = None,
    reason: str | None = None,
    force: bool = False,
) -> DeviceHandle:
    """Release exactly this allocation: ``hd.release(handle)`` after ``hd.allocate``.

    A handle read back from JSON, or a bare id, needs the ``ledger`` it lives in.
    ``UnknownAllocation`` if it is not live (a second release is an error, never a
    silent double free).  ``AllocationInUse`` (naming the pids) while workload
    processes still use it, unless ``force``: then their limiter regions are revoked
    (every further device allocation of theirs is refused) and that is recorded as an
    ``allocation.revoked`` event.  ``reason`` is kept on the ``allocation.released`` event.
    """
    if ledger is None and isinstance(handle, DeviceHandle):
        ledger = handle._ledger
    if ledger is None:
        raise InvalidRequest("ledger", "name the ledger the allocation lives in (hd.release(handle, ledger=...))")
    if adapters is None and isinstance(handle, DeviceHandle):
        adapters = handle._adapters
    return release_from(ledger, handle, adapters or {}, reason=reason, force=force)


def release_from(
    ledger: Ledger,
    handle: DeviceHandle | str,
    adapters: Mapping[str, VendorAdapter],
    *,
    reason: str | None = None,
    evicted_by: str | None = None,
    force: bool = False,
    ended: bool = False,
) -> DeviceHandle:
    """Remove exactly this allocation from ``ledger``; ``UnknownAllocation`` if it is not live.

    Live workload processes (the limiter regions' process slots) refuse the release with
    ``AllocationInUse`` unless ``force`` or ``ended``; their regions are then revoked and
    ``allocation.revoked`` recorded.  ``force`` (an operator's decision, an eviction) keeps the
    revoked files for the workload, so processes it starts later are refused too
    (``allocations gc`` removes them once no process uses them); ``ended`` (the caller's
    framework says the workload is over: what lingers is exiting) removes them.  Every released
    region is revoked before its file goes, so a process that attaches meanwhile is refused
    too.  The ``allocation.released`` event (``allocation.evicted`` when ``evicted_by`` names
    the reclaimer) commits with the removal, carrying ``reason``.
    """
    if not isinstance(handle, str | DeviceHandle):
        raise InvalidRequest("handle", f"expected a DeviceHandle or an allocation id, got {type(handle).__name__}")
    handle_id = handle if isinstance(handle, str) else handle.id
    with ledger.transaction() as view:
        return _release_in(view, handle_id, adapters, reason=reason, evicted_by=evicted_by, force=force, ended=ended)


def _release_in(
    view: LedgerView,
    handle_id: str,
    adapters: Mapping[str, VendorAdapter],
    *,
    reason: str | None = None,
    evicted_by: str | None = None,
    force: bool = False,
    ended: bool = False,
) -> DeviceHandle:
    """``release_from`` inside an open transaction: the one path every release takes."""
    current = view.get(handle_id)
    users = live_processes(current)
    if users and not (force or ended):
        raise AllocationInUse(handle_id, users)
    revoked = revoke_regions(current)
    removed = view.remove(handle_id)
    forget_conflict(view, handle_id)
    kept = revoked if users and force else []
    if kept:
        holding = _holding(removed, kept)
        view.add(holding)
        view.record_event(lifecycle.revoked(removed, users, revoked, reason=reason, holding=holding))
    elif users:
        view.record_event(lifecycle.revoked(removed, users, revoked, reason=reason))
    view.record_event(lifecycle.ended(removed, reason=reason, evicted_by=evicted_by))
    missing = {g.vendor for g in removed.grants} - set(adapters)
    resolved = dict(adapters)
    if missing:
        resolved.update({vendor: adapter_for(vendor) for vendor in missing})
    undo_side_effects(removed, resolved, keep_regions=kept)
    return removed


REVOKED_PREFIX = "revoked-"
"""Id prefix of what a revoked allocation's live processes still hold (``revoked-<allocation id>``)."""
REVOKED_FROM = "hami.io/revoked-from"
"""Metadata key on such a holding: the id of the allocation that was revoked."""


def _holding(revoked: DeviceHandle, regions: list[str]) -> DeviceHandle:
    """What the processes of ``revoked`` still hold through ``regions``, as an allocation of its own: every
    reader of the ledger (engines, ``hd.allocate``, the DRA plugin, the extender) sees it booked until they
    exit (``reclaim_revoked``).  Each grant keeps its device slot, cores and host charge; its memory is what
    the processes hold there now; exclusivity and partitions went with the release."""
    held = held_mib(revoked, regions)
    kept_groups = {k for k, path in revoked.regions.items() if path in regions}
    grants = [
        g.model_copy(update={"memory_mib": held.get(g.uuid, 0), "exclusive": False, "partition": None,
                             "partition_uuid": None})
        for g in revoked.grants
        if group_key(g.node, g.vendor) in kept_groups
    ]
    return DeviceHandle(
        id=REVOKED_PREFIX + revoked.id,
        request=revoked.request,
        grants=grants,
        node=revoked.host,
        regions={k: p for k, p in revoked.regions.items() if k in kept_groups},
        metadata={**revoked.metadata, REVOKED_FROM: revoked.id},
    )


def reclaim_revoked(view: LedgerView, adapters: Mapping[str, VendorAdapter], ids: Sequence[str]) -> int:
    """Release, by the path of any release, each revoked holding among ``ids`` whose processes have all
    exited; returns how many.  Runs in every commit (``hd.allocate``): cheap when nothing is revoked."""
    freed = 0
    for handle_id in ids:
        if not handle_id.startswith(REVOKED_PREFIX):
            continue
        holding = view.get(handle_id)
        if REVOKED_FROM in holding.metadata and not live_processes(holding):
            _release_in(view, handle_id, adapters, reason="its revoked processes exited", ended=True)
            freed += 1
    return freed


def evict(
    ledger: Ledger,
    handle: DeviceHandle | str,
    *,
    reclaimer: str,
    reason: str,
    adapters: Mapping[str, VendorAdapter] | None = None,
) -> DeviceHandle:
    """Take an allocation back for someone else: a release recorded as ``allocation.evicted``.

    ``reclaimer`` names who needed the capacity (a queue, a request); ``reason`` says
    why (e.g. ``"reclaim: queue a over its guarantee"``).
    """
    if not reclaimer:
        raise InvalidRequest("reclaimer", "name who reclaims the allocation")
    # taking capacity back from a running workload is what eviction is: its processes are revoked
    return release_from(ledger, handle, adapters or {}, reason=reason, evicted_by=reclaimer, force=True)
