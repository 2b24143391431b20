"""What a region's accounting reads as: records of devices and processes, and their conversion from C."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_VIRTUAL = 1  # HAMI_DEV_VIRTUAL
_SHARE = 2  # HAMI_DEV_SHARE


@dataclass(frozen=True)
class DeviceUsageRecord:
    """Usage of one device of a region, as its shims account it."""

    device: int
    memory_limit_bytes: int
    core_limit_pct: int
    memory_used_bytes: int
    utilization_pct: float | None  # measured by the throttle; None when not measured recently
    memory_peak_bytes: int = 0  # high-water mark of memory_used_bytes since creation
    virtual_memory: bool = False  # allocations the card cannot hold spill to host memory
    memory_spilled_bytes: int = 0  # the part of memory_used_bytes served from host memory
    memory_spilled_peak_bytes: int = 0
    host_spill_limit_bytes: int = 0  # 0: up to the memory limit
    core_policy: str = "cap"  # "cap": at most core_limit_pct; "share": at least it, idle time on top
    memory_refusals: int = 0  # allocations the shims refused over the memory limit, since the region was made
    compute_refusals: int = 0  # launches the pacer held back past its burst, since the region was made


@dataclass(frozen=True)
class ProcessRecord:
    """Memory one process holds on one device of a region."""

    pid: int  # in the process's own PID namespace (a container's first process is 1)
    start_time: int  # /proc/<pid>/stat field 22: tells a reused pid from the original process
    device: int
    memory_used_bytes: int
    alive: bool  # its liveness lock is held (valid across PID namespaces), or /proc shows it running
    pid_namespace: int = 0  # inode of its /proc/self/ns/pid; 0 when unknown
    host_pid: int = 0  # its pid as the /proc it saw numbers it (the host's pid when it shared the host's /proc)


def _device_record(device: int, info: Any) -> DeviceUsageRecord:
    return DeviceUsageRecord(
        device=device,
        memory_limit_bytes=int(info.memory_limit),
        core_limit_pct=int(info.core_limit),
        memory_used_bytes=int(info.memory_used),
        utilization_pct=int(info.util_x100) / 100.0 if info.util_valid else None,
        memory_peak_bytes=int(info.memory_peak),
        virtual_memory=bool(int(info.flags) & _VIRTUAL),
        memory_spilled_bytes=int(info.spill_used),
        memory_spilled_peak_bytes=int(info.spill_peak),
        host_spill_limit_bytes=int(info.spill_limit),
        core_policy="share" if int(info.flags) & _SHARE else "cap",
        memory_refusals=int(info.refused_memory),
        compute_refusals=int(info.refused_compute),
    )


def _process_records(infos: Sequence[Any], devices: int) -> list[ProcessRecord]:
    return [
        ProcessRecord(
            pid=int(info.pid),
            start_time=int(info.start_time),
            device=device,
            memory_used_bytes=int(info.used[device]),
            alive=bool(info.alive),
            pid_namespace=int(info.pidns),
            host_pid=int(info.host_pid),
        )
        for info in infos
        for device in range(devices)
    ]


@dataclass(frozen=True)
class RegionUsage:
    """One region's ``device_usage()`` and ``process_usage()``, read together.

    From a ``UsageReader`` the processes also list, once, those the read found dead and reclaimed
    (``alive=False``, with what they held); the devices' usage is without them already.
    """

    devices: list[DeviceUsageRecord]
    processes: list[ProcessRecord]
