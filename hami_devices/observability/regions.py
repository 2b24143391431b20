"""Live usage of allocations, read from their limiter regions (kept open between scrapes).

Opening a region maps and validates its file; with hundreds of allocations per
node that would dominate a scrape, so regions stay open while their allocation
is live and are closed as soon as it is gone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from hami_devices.errors import LimiterError
from hami_devices.limiter import Region
from hami_devices.models import DeviceHandle, group_key


@dataclass(frozen=True)
class ProcessReading:
    pid: int  # in the workload's own PID namespace
    start_time: int
    alive: bool
    memory_used_bytes: int
    host_pid: int = 0  # as this machine's /proc numbers it, where the limiter knows it (0: unknown)
    pid_namespace: int = 0  # inode of the workload's PID namespace (0: unknown)


@dataclass(frozen=True)
class GrantReading:
    """What the limiter records for one grant (one device slot of a region)."""

    memory_limit_bytes: int
    memory_used_bytes: int
    memory_peak_bytes: int
    utilization_ratio: float | None  # None: not measured recently
    processes: list[ProcessReading] = field(default_factory=list)


@dataclass(frozen=True)
class RegionReading:
    """One (node, vendor) group of an allocation: its region's processes and each grant's slot."""

    handle_id: str
    group: str
    processes: list[ProcessReading]  # one per registered process, alive or not
    grants: dict[str, GrantReading]  # device uuid -> reading


class RegionReader:
    """Reads the regions of the given handles; not thread-safe (one collector thread owns it)."""

    def __init__(self) -> None:
        self._open: dict[str, Region] = {}

    def read(self, handles: Iterable[DeviceHandle]) -> list[RegionReading]:
        readings: list[RegionReading] = []
        wanted: set[str] = set()
        for handle in handles:
            for (node, vendor) in handle.groups:
                path = handle.region_for(node, vendor)
                if path is None:
                    continue
                wanted.add(path)
                reading = self._read_one(handle, node, vendor, path)
                if reading is not None:
                    readings.append(reading)
        for path in set(self._open) - wanted:
            self._open.pop(path).close()
        return readings

    def _region(self, path: str) -> Region | None:
        region = self._open.get(path)
        if region is None:
            # Regions of other nodes' allocations are not on this machine: a stat is cheaper than a failed open.
            if not os.path.exists(path):
                return None
            try:
                region = Region.open(path)
            except LimiterError:
                return None
            self._open[path] = region
        return region

    def _read_one(self, handle: DeviceHandle, node: str, vendor: str, path: str) -> RegionReading | None:
        region = self._region(path)
        if region is None:
            return None
        try:
            devices = region.device_usage()
            procs = region.process_usage()
        except LimiterError:
            self._open.pop(path, None)
            region.close()
            return None
        slots = [g.uuid for g in handle.grants if g.node == node and g.vendor == vendor]
        per_process: dict[tuple[int, int], ProcessReading] = {}
        grants: dict[str, GrantReading] = {}
        for record in devices:
            if record.device >= len(slots):
                continue
            mine = [
                ProcessReading(p.pid, p.start_time, p.alive, p.memory_used_bytes, p.host_pid, p.pid_namespace)
                for p in procs
                if p.device == record.device
            ]
            util = None if record.utilization_pct is None else record.utilization_pct / 100.0
            grants[slots[record.device]] = GrantReading(
                record.memory_limit_bytes, record.memory_used_bytes, record.memory_peak_bytes, util, mine
            )
            for p in mine:
                key = (p.pid, p.start_time)
                held = per_process.get(key)
                total = p.memory_used_bytes + (held.memory_used_bytes if held else 0)
                per_process[key] = ProcessReading(p.pid, p.start_time, p.alive, total, p.host_pid, p.pid_namespace)
        return RegionReading(handle.id, group_key(node, vendor), list(per_process.values()), grants)

    def close(self) -> None:
        for region in self._open.values():
            region.close()
        self._open.clear()
