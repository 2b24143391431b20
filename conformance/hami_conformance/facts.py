"""Comparisons with facts the adapter cannot bend: the ledger's contents, the limiter regions'
contents and the partitions the vendor library reports, each against the grants a check knows
are live.  Each function returns the problems it found (empty: all agree)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path

from hami_conformance.bench import Bench
from hami_conformance.profile import PartitionReader
from hami_devices import limiter
from hami_devices.device import Device
from hami_devices.errors import LimiterError
from hami_devices.models import DeviceHandle

MIB = 1024 * 1024


def ledger_problems(bench: Bench, live: Iterable[DeviceHandle]) -> list[str]:
    """The ledger holds exactly ``live``, each as it was recorded when it was granted."""
    expected = {h.id: h for h in live}
    stored = {h.id: h for h in bench.ledger.handles()}
    problems = []
    if set(stored) != set(expected):
        gone = sorted(set(expected) - set(stored))
        extra = sorted(set(stored) - set(expected))
        problems.append(f"the ledger lost live allocations {gone} and/or holds released ones {extra}")
    for handle_id in set(stored) & set(expected):
        a, b = expected[handle_id], stored[handle_id]
        if (a.grants, a.env, a.regions) != (b.grants, b.env, b.regions):
            problems.append(f"the ledger's allocation {handle_id[:8]} changed while it was live")
    return problems


def monitor_problems(device: Device, live: Iterable[DeviceHandle]) -> list[str]:
    """monitor() reports exactly the live grants on ``device``: totals, sharers and the allocation list."""
    grants = [(h, g) for h in live for g in h.grants if g.uuid == device.uuid]
    metrics = device.monitor()
    name = f"{device.type} {device.uuid}"
    problems = []
    want = (sum(g.memory_mib for _, g in grants), sum(g.cores for _, g in grants), len(grants))
    said = (metrics.allocated_memory_mib, metrics.allocated_cores, metrics.sharers)
    if said != want:
        problems.append(f"{name}: monitor reports {said} MiB/%/sharers, the live grants hold {want}")
    listed = {a.handle_id: (a.memory_limit_mib, a.cores_limit) for a in metrics.allocations}
    expected = {h.id: (g.memory_mib, g.cores) for h, g in grants}
    if listed != expected:
        problems.append(f"{name}: monitor lists allocations {listed}, the live grants are {expected}")
    return problems


def region_problems(handle: DeviceHandle, *, live: bool) -> list[str]:
    """A live allocation's regions exist and limit each device to its grant; a released one's are gone."""
    problems = []
    for group, path in handle.regions.items():
        node, _, vendor = group.rpartition("/")
        exists = Path(path).exists()
        if not live:
            if exists:
                problems.append(f"released allocation {handle.id[:8]} left its limiter region {path}")
            continue
        if not exists:
            problems.append(f"live allocation {handle.id[:8]} lost its limiter region {path}")
            continue
        grants = [g for g in handle.grants if g.vendor == vendor and g.node == node]
        try:
            with limiter.Region.open(path) as region:
                limits = [r.memory_limit_bytes for r in region.device_usage()]
        except LimiterError as exc:
            problems.append(f"live allocation {handle.id[:8]}: region {path} cannot be read: {exc}")
            continue
        want = [g.memory_mib * MIB for g in grants]
        if limits != want:
            problems.append(f"allocation {handle.id[:8]}: region {path} limits {limits} bytes, its grants {want}")
    return problems


def _matches(partition_uuid: str, reported: str) -> bool:
    return partition_uuid == reported or partition_uuid.startswith(reported + "#")


def reported_partitions(reader: PartitionReader | None, device: Device) -> set[str] | None:
    """What the vendor library reports on ``device``; None when there is no reader, or when the reader
    answers None: "my library does not know this device" (a simulated one), which is never compared."""
    if reader is None:
        return None
    reported = reader(device)
    return None if reported is None else set(reported)


def hardware_partition_problems(
    device: Device, reported: Collection[str] | None, baseline: Collection[str] | None, live: Iterable[DeviceHandle]
) -> list[str]:
    """The partitions the vendor library reports, beyond those there before the check, are exactly
    the live grants' partitions on ``device`` (nothing to compare where the library does not know it)."""
    if reported is None:
        return []
    baseline = baseline or ()
    grants = [g for h in live for g in h.grants if g.uuid == device.uuid and g.partition]
    ours = [r for r in reported if r not in baseline]
    name = f"{device.type} {device.uuid}"
    problems = []
    missing = [g for g in grants if g.partition_uuid and not any(_matches(g.partition_uuid, r) for r in ours)]
    if missing:
        problems.append(
            f"{name}: the vendor library no longer reports the live partitions "
            f"{[f'{g.partition} {g.partition_uuid}' for g in missing]} (it reports {sorted(ours)})"
        )
    stray = [r for r in ours if not any(g.partition_uuid and _matches(g.partition_uuid, r) for g in grants)]
    if stray:
        problems.append(f"{name}: the vendor library still reports partitions {sorted(stray)} no live grant holds")
    if not missing and not stray and len(ours) != len(grants):
        problems.append(f"{name}: the vendor library reports {len(ours)} partitions for {len(grants)} live grants")
    return problems
