"""The allocation lifecycle events: what each one records, built from the handle it describes.

Each event carries what a reader needs without the handle (which is gone once
released): the workload's metadata and every grant, with the device's total
memory on the grant event so that usage reports can weigh memory shares.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from hami_devices.errors import InsufficientResources
from hami_devices.ledger.events import Event, EventKind
from hami_devices.models import DeviceHandle, Grant, ResourceRequest


def _request_summary(request: ResourceRequest) -> dict[str, Any]:
    return {
        "name": request.name,
        "queue": request.queue,
        "task_type": str(request.task_type),
        "priority": request.priority,
        "preemptible": request.preemptible,
    }


def _grant_summary(grant: Grant, device_memory_mib: int | None = None) -> dict[str, Any]:
    row: dict[str, Any] = grant.model_dump(mode="json", exclude={"partition_uuid"})
    if device_memory_mib is not None:
        row["device_memory_mib"] = device_memory_mib
    return row


def _single_node(handle: DeviceHandle) -> str | None:
    nodes = {g.node for g in handle.grants} or ({handle.node} if handle.node else set())
    return next(iter(nodes)) if len(nodes) == 1 else None


def _single_uuid(handle: DeviceHandle) -> str | None:
    return handle.grants[0].uuid if len(handle.grants) == 1 else None


def granted(handle: DeviceHandle, device_memory_mib: Mapping[str, int], policy: str | None = None) -> Event:
    """``device_memory_mib``: each granted device's total memory (uuid -> MiB)."""
    return Event(
        time=handle.created_at,
        kind=EventKind.GRANTED,
        allocation_id=handle.id,
        uuid=_single_uuid(handle),
        node=_single_node(handle),
        data={
            "request": _request_summary(handle.request),
            "metadata": dict(handle.metadata),
            "grants": [_grant_summary(g, device_memory_mib.get(g.uuid)) for g in handle.grants],
            "policy": policy,
        },
    )


def refused(request: ResourceRequest, error: InsufficientResources, metadata: Mapping[str, str]) -> Event:
    """The reason codes and their counts, not the per-device detail, which grows with the cluster."""
    return Event(
        kind=EventKind.REFUSED,
        data={
            "request": _request_summary(request),
            "metadata": dict(metadata),
            "message": error.summary_message,
            "counts": {str(code): n for code, n in error.counts.items()},
            "permanent": error.permanent,
            "nearest": error.nearest[:5],
        },
    )


def ended(handle: DeviceHandle, *, reason: str | None = None, evicted_by: str | None = None) -> Event:
    """``allocation.evicted`` when ``evicted_by`` names the reclaimer, else ``allocation.released``."""
    now = time.time()
    data: dict[str, Any] = {
        "metadata": dict(handle.metadata),
        "request": _request_summary(handle.request),
        "grants": [_grant_summary(g) for g in handle.grants],
        "held_s": max(0.0, now - handle.created_at),
    }
    if reason is not None:
        data["reason"] = reason
    if evicted_by is not None:
        data["reclaimer"] = evicted_by
    return Event(
        time=now,
        kind=EventKind.EVICTED if evicted_by is not None else EventKind.RELEASED,
        allocation_id=handle.id,
        uuid=_single_uuid(handle),
        node=_single_node(handle),
        data=data,
    )


def revoked(
    handle: DeviceHandle,
    processes: list[str],
    regions: list[str],
    *,
    reason: str | None = None,
    holding: DeviceHandle | None = None,
) -> Event:
    """A release that went ahead while ``processes`` still used the allocation: its ``regions`` now refuse
    every further device allocation of theirs.  ``holding``: what they still hold, booked under its own
    id until they exit."""
    data: dict[str, Any] = {
        "metadata": dict(handle.metadata),
        "processes": list(processes),
        "regions": list(regions),
    }
    if holding is not None:
        data["holding"] = {"id": holding.id, "grants": [_grant_summary(g) for g in holding.grants]}
    if reason is not None:
        data["reason"] = reason
    return Event(
        kind=EventKind.REVOKED,
        allocation_id=handle.id,
        uuid=_single_uuid(handle),
        node=_single_node(handle),
        data=data,
    )
