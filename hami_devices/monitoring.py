"""Assembling ``Metrics``: vendor readings, ledger accounting and limiter usage."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hami_devices import limiter
from hami_devices.accounting import usage_of
from hami_devices.errors import LimiterError
from hami_devices.ledger import Ledger
from hami_devices.models import (
    NOT_AVAILABLE,
    AllocationUsage,
    DeviceHandle,
    DeviceInfo,
    Health,
    Metrics,
    MetricValue,
    ProcessUsage,
    Taint,
)

MIB = 1024 * 1024


@dataclass(frozen=True)
class HostResources:
    """The host CPU and memory of a device's node, its labels and taints, where an inventory describes them."""

    cpu_milli: int
    memory_mib: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Taint] = ()


@dataclass
class DeviceReadings:
    """What the vendor library reports about a device right now."""

    memory_used_mib: MetricValue = NOT_AVAILABLE
    utilization_pct: MetricValue = NOT_AVAILABLE
    temperature_c: MetricValue = NOT_AVAILABLE
    power_w: MetricValue = NOT_AVAILABLE
    health: Health | None = None
    processes: list[ProcessUsage] = field(default_factory=list)
    extra: dict[str, MetricValue] = field(default_factory=dict)


_Usage = tuple[MetricValue, MetricValue, list[ProcessUsage], MetricValue, list[limiter.ProcessRecord]]
_UNKNOWN: _Usage = (NOT_AVAILABLE, NOT_AVAILABLE, [], NOT_AVAILABLE, [])


def context_memory_mib(charged: Sequence[limiter.ProcessRecord], seen: Sequence[ProcessUsage]) -> MetricValue:
    """What an allocation's live processes hold on a device outside its share: for each process the vendor
    library lists (``seen``, by the pid this machine gives it), its used memory less what the limiter charges
    it (``charged``: its region records on this device).  That is its context (and anything else the runtime
    took without an allocation call).  ``NOT_AVAILABLE`` when no process of the allocation is listed."""
    used = {p.pid: float(p.memory_used_mib) for p in seen if p.memory_used_mib != NOT_AVAILABLE}
    pairs = [(used[r.host_pid or r.pid], r.memory_used_bytes / MIB) for r in charged if (r.host_pid or r.pid) in used]
    if not pairs:
        return NOT_AVAILABLE
    return sum(max(0.0, total - share) for total, share in pairs)


def _region_usage(handle: DeviceHandle, info: DeviceInfo) -> _Usage:
    """Live usage the limiter's region records for this device's slot in the handle."""
    path = handle.region_for(info.node, info.vendor)
    if path is None:
        return _UNKNOWN
    vendor_grants = [g for g in handle.grants if g.vendor == info.vendor and g.node == info.node]
    slot = next(i for i, g in enumerate(vendor_grants) if g.uuid == info.uuid)
    try:
        with limiter.Region.open(path) as region:
            # A process that is gone holds no device memory: give its reservation back before reading,
            # so usage never counts the dead (the shims do it too, but only when they next allocate).
            region.reclaim_dead()
            records = [r for r in region.device_usage() if r.device == slot]
            processes = [p for p in region.process_usage() if p.device == slot and p.alive]
    except (LimiterError, OSError):
        return _UNKNOWN
    if not records:
        return _UNKNOWN
    record = records[0]
    utilization: MetricValue = NOT_AVAILABLE if record.utilization_pct is None else record.utilization_pct
    procs = [ProcessUsage(pid=p.pid, memory_used_mib=p.memory_used_bytes / MIB) for p in processes]
    return record.memory_used_bytes / MIB, utilization, procs, record.memory_spilled_bytes / MIB, processes


def build_metrics(info: DeviceInfo, readings: DeviceReadings, ledger: Ledger) -> Metrics:
    """One device's metrics: its ``readings``, what ``ledger`` grants on it, and each allocation's live usage."""
    handles = list(ledger.handles_on(info.uuid))
    grants = [g for h in handles for g in h.grants if g.uuid == info.uuid]
    usage = usage_of(grants)
    allocations: list[AllocationUsage] = []
    for handle in handles:
        for grant in (g for g in handle.grants if g.uuid == info.uuid):
            used, utilization, procs, spilled, charged = _region_usage(handle, info)
            allocations.append(
                AllocationUsage(
                    handle_id=handle.id,
                    metadata=handle.metadata,
                    memory_limit_mib=grant.memory_mib,
                    cores_limit=grant.cores,
                    core_policy=grant.core_policy,
                    memory_used_mib=used,
                    utilization_pct=utilization,
                    processes=procs,
                    memory_spilled_mib=spilled,
                    context_booked_mib=grant.context_mib,
                    context_memory_mib=context_memory_mib(charged, readings.processes),
                )
            )
    return Metrics(
        uuid=info.uuid,
        vendor=info.vendor,
        model=info.model,
        health=readings.health or info.health,
        memory_total_mib=info.memory_mib,
        memory_used_mib=readings.memory_used_mib,
        utilization_pct=readings.utilization_pct,
        temperature_c=readings.temperature_c,
        power_w=readings.power_w,
        allocated_memory_mib=usage.memory_mib,
        allocated_cores=usage.cores,
        sharers=usage.sharers,
        allocations=allocations,
        processes=readings.processes,
        extra=readings.extra,
    )
