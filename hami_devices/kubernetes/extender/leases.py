"""A pod's allocation in the ledger, and its bind lease.

There is no node lock object.  A bind commits its allocation in one ledger transaction
(SQLite ``BEGIN IMMEDIATE``: the database's own write lock, dropped by the operating
system if the process dies, so it cannot leak), and that transaction is the only thing
two binds to one node share.  The allocation carries its pod's identity and a *lease*
in its request labels: ``pending`` until the API server has the binding, then
``bound``.  A pending allocation whose lease ran out belonged to a bind that failed,
timed out or died with its process: the reaper asks the API server where that pod is
bound and either marks the allocation bound or releases it.  Every change re-reads the
allocation inside the transaction and acts only if it is still the same one (same
``created_at``), so a reaper and a retried bind of the same pod never undo each other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from hami_devices.allocation import undo_side_effects
from hami_devices.errors import UnknownAllocation
from hami_devices.kubernetes.extender.pods import OURS, PodRef
from hami_devices.models import DeviceHandle, ResourceRequest

if TYPE_CHECKING:
    from hami_devices.adapter import VendorAdapter
    from hami_devices.ledger import Ledger

POD_UID = OURS + "pod-uid"
POD_NAMESPACE = OURS + "pod-namespace"
POD_NAME = OURS + "pod-name"
BIND_STATE = OURS + "bind-state"
LEASE_UNTIL = OURS + "lease-until"
PENDING = "pending"
BOUND = "bound"


def handle_id(uid: str) -> str:
    """The allocation id of a pod: fixed by its UID, so a retried bind finds what an earlier one committed."""
    return "pod-" + re.sub(r"[^A-Za-z0-9_.-]", "_", uid)


def pod_of(handle: DeviceHandle) -> PodRef | None:
    labels = handle.request.labels
    if POD_UID not in labels:
        return None
    return PodRef(labels.get(POD_NAMESPACE, "default"), labels.get(POD_NAME, ""), labels[POD_UID])


def node_of(handle: DeviceHandle) -> str | None:
    return handle.grants[0].node if handle.grants else None


def pending(handle: DeviceHandle) -> bool:
    return handle.request.labels.get(BIND_STATE) == PENDING


def expired(handle: DeviceHandle, now: float) -> bool:
    try:
        return float(handle.request.labels.get(LEASE_UNTIL, "0")) <= now
    except ValueError:
        return True


def leased(request: ResourceRequest, until: float) -> ResourceRequest:
    return request.model_copy(
        update={"labels": {**request.labels, BIND_STATE: PENDING, LEASE_UNTIL: f"{until:.3f}"}}
    )


def mark_bound(ledger: Ledger, handle: DeviceHandle) -> bool:
    """Turn the pending allocation bound (in one transaction); False if it is no longer the same allocation."""
    with ledger.transaction() as view:
        current = _current(view.get, handle)
        if current is None:
            return False
        if not pending(current):
            return True
        labels = {k: v for k, v in current.request.labels.items() if k != LEASE_UNTIL}
        labels[BIND_STATE] = BOUND
        updated = current.model_copy(update={"request": current.request.model_copy(update={"labels": labels})})
        view.remove(current.id)
        view.add(updated)
    return True


def release_if(
    ledger: Ledger,
    handle: DeviceHandle,
    adapters: Mapping[str, VendorAdapter],
    still: Callable[[DeviceHandle], bool] = lambda h: True,
) -> bool:
    """Release ``handle`` if it is still the same allocation and ``still(it)`` holds, undoing its side
    effects (partitions, limiter regions) inside the transaction; True when released."""
    with ledger.transaction() as view:
        current = _current(view.get, handle)
        if current is None or not still(current):
            return False
        view.remove(current.id)
        undo_side_effects(current, adapters)
    return True


def _current(get: Callable[[str], DeviceHandle], handle: DeviceHandle) -> DeviceHandle | None:
    try:
        current = get(handle.id)
    except UnknownAllocation:
        return None
    return current if current.created_at == handle.created_at else None
