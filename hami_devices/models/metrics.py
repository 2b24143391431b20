"""Readings: a device's figures and each allocation's live usage (``"n/a"`` where a device cannot say)."""

from __future__ import annotations

import time

from pydantic import Field

from hami_devices.models.base import NOT_AVAILABLE, HamiModel, MetricValue
from hami_devices.models.devices import Health
from hami_devices.models.requests import CorePolicy


class ProcessUsage(HamiModel):
    pid: int
    memory_used_mib: MetricValue
    utilization_pct: MetricValue = NOT_AVAILABLE


class AllocationUsage(HamiModel):
    """One allocation's grant on one device, with the live usage the limiter records."""

    handle_id: str
    memory_limit_mib: int
    cores_limit: int
    core_policy: CorePolicy = Field(default="cap", description="how the cores are kept: cap, share or unlimited")
    metadata: dict[str, str] = Field(default_factory=dict, description="the allocation's workload identity")
    memory_used_mib: MetricValue = NOT_AVAILABLE
    utilization_pct: MetricValue = NOT_AVAILABLE
    processes: list[ProcessUsage] = Field(default_factory=list)
    memory_spilled_mib: MetricValue = Field(
        default=NOT_AVAILABLE, description="the part of memory_used_mib served from host memory (virtual memory)"
    )
    context_booked_mib: int = Field(
        default=0, ge=0, description="device memory the scheduler books for the grant's context, on top of the share"
    )
    context_memory_mib: MetricValue = Field(
        default=NOT_AVAILABLE,
        description="device memory the allocation's live processes hold outside the share (their contexts): the "
        "vendor library's per-process used memory less what the limiter charges them; n/a before a process "
        "registers or where the vendor library gives no per-process figure",
    )


class Metrics(HamiModel):
    """Device-wide figures plus each allocation's usage.  ``"n/a"`` means not reportable."""

    uuid: str
    """The device."""
    vendor: str
    """The device's vendor."""
    model: str
    """The device's model."""
    timestamp: float = Field(default_factory=time.time)
    """When the readings were taken, in seconds since the epoch."""
    health: Health
    """The device's health."""
    memory_total_mib: int
    """Device memory, in MiB."""
    memory_used_mib: MetricValue
    """Device memory in use, as the vendor library reports it, or "n/a"."""
    utilization_pct: MetricValue
    """Compute utilization in percent, or "n/a"."""
    temperature_c: MetricValue
    """Temperature in degrees Celsius, or "n/a"."""
    power_w: MetricValue
    """Power draw in watts, or "n/a"."""
    allocated_memory_mib: int = 0
    """Device memory the live allocations were granted, in MiB."""
    allocated_cores: int = 0
    """Compute the live allocations were granted, in percent of the device."""
    sharers: int = 0
    """How many live allocations share the device."""
    allocations: list[AllocationUsage] = Field(default_factory=list)
    """Each live allocation's limits and usage, as its limiter region records it."""
    processes: list[ProcessUsage] = Field(default_factory=list)
    """The processes the vendor library sees on the device."""
    extra: dict[str, MetricValue] = Field(default_factory=dict)
    """The other fields the vendor library reports (clocks, ECC counts ...), by name."""
