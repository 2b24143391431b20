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
from hami_devices.limiter import Region, RegionUsage, UsageReader
from hami_devices.models import DeviceHandle, group_key

REFUSAL_KINDS = ("memory", "compute")
"""What a region counts as refused: allocations over the memory limit, launches the pacer held back."""


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
    memory_spilled_bytes: int = 0  # the part of memory_used_bytes served from host memory (virtual memory)
    refusals: dict[str, int] = field(default_factory=dict)  # "memory" / "compute" -> refused since the region was made


@dataclass(frozen=True)
class RegionReading:
    """One (node, vendor) group of an allocation: its region's processes and each grant's slot."""

    handle_id: str
    group: str
    processes: list[ProcessReading]  # one per registered process, alive or not
    grants: dict[str, GrantReading]  # device uuid -> reading


@dataclass(frozen=True)
class _Plan:
    """Where one (node, vendor) group of a handle keeps its region, and which grant each slot is."""

    handle_id: str
    group: str
    path: str
    slots: list[str]  # device slot -> grant uuid


def _plans(handle: DeviceHandle) -> list[_Plan]:
    plans = []
    for node, vendor in handle.groups:
        path = handle.region_for(node, vendor)
        if path is not None:
            slots = [g.uuid for g in handle.grants if g.node == node and g.vendor == vendor]
            plans.append(_Plan(handle.id, group_key(node, vendor), path, slots))
    return plans


def _reading(plan: _Plan, usage: RegionUsage) -> RegionReading:
    per_process: dict[tuple[int, int], ProcessReading] = {}
    grants: dict[str, GrantReading] = {}
    for record in usage.devices:
        if record.device >= len(plan.slots):
            continue
        mine = [
            ProcessReading(p.pid, p.start_time, p.alive, p.memory_used_bytes, p.host_pid, p.pid_namespace)
            for p in usage.processes
            if p.device == record.device
        ]
        util = None if record.utilization_pct is None else record.utilization_pct / 100.0
        grants[plan.slots[record.device]] = GrantReading(
            record.memory_limit_bytes,
            record.memory_used_bytes,
            record.memory_peak_bytes,
            util,
            mine,
            record.memory_spilled_bytes,
            dict(zip(REFUSAL_KINDS, (record.memory_refusals, record.compute_refusals), strict=True)),
        )
        for p in mine:
            key = (p.pid, p.start_time)
            held = per_process.get(key)
            total = p.memory_used_bytes + (held.memory_used_bytes if held else 0)
            per_process[key] = ProcessReading(p.pid, p.start_time, p.alive, total, p.host_pid, p.pid_namespace)
    return RegionReading(plan.handle_id, plan.group, list(per_process.values()), grants)


class RegionReader:
    """Reads the regions of the given handles; not thread-safe (one collector thread owns it).

    All regions are read in one native call; a region whose accounting did not
    change since the last read gives back the same ``RegionReading`` object, so
    the exporter re-renders only the allocations whose usage moved.
    """

    def __init__(self) -> None:
        self._open: dict[str, Region] = {}
        self._plans: dict[str, list[_Plan]] = {}  # handle id -> its groups (a handle never changes)
        self._usage: UsageReader | None = None
        self._readings: dict[str, tuple[RegionUsage, _Plan, RegionReading]] = {}  # path -> the last reading

    def read(self, handles: Iterable[DeviceHandle]) -> list[RegionReading]:
        plans: dict[str, list[_Plan]] = {}
        targets: list[tuple[_Plan, Region]] = []
        for handle in handles:
            mine = self._plans.get(handle.id)
            if mine is None:
                mine = _plans(handle)
            plans[handle.id] = mine
            for plan in mine:
                region = self._region(plan.path)
                if region is not None:
                    targets.append((plan, region))
        self._plans = plans
        wanted = {plan.path for group in plans.values() for plan in group}
        for path in set(self._open) - wanted:
            self._open.pop(path).close()
        if not targets:
            self._readings = {}
            return []
        if self._usage is None:
            self._usage = UsageReader()
        usages = self._usage.read([region for _plan, region in targets])
        readings: list[RegionReading] = []
        last, kept = self._readings, {}
        for (plan, _region), usage in zip(targets, usages, strict=True):
            if usage is None:
                continue
            seen = last.get(plan.path)
            unchanged = seen is not None and seen[0] is usage and seen[1] is plan
            reading = seen[2] if seen is not None and unchanged else _reading(plan, usage)
            kept[plan.path] = (usage, plan, reading)
            readings.append(reading)
        self._readings = kept
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

    def close(self) -> None:
        for region in self._open.values():
            region.close()
        self._open.clear()
        self._readings.clear()
