"""The accounting invariants every check re-verifies, as functions returning the problems found."""

from __future__ import annotations

from collections.abc import Iterable

from hami_conformance.bench import Bench, capacity, profiles_of
from hami_devices.adapter import Capability
from hami_devices.device import Device
from hami_devices.models import NOT_AVAILABLE, DeviceHandle, Grant


def _num(value: object) -> float | None:
    if value == NOT_AVAILABLE:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def grant_problems(device: Device, handle: DeviceHandle, grant: Grant) -> list[str]:
    """A grant names its device as discovery reported it, gives at least what its request part
    asked, and a catalog partition in whole.

    Adapters may round up - to their memory unit, to a partition profile (Ascend
    templates, sMLU instances) or to the whole device - but never down.  A partition
    outside the device's catalog needs the dynamic-profiles capability.
    """
    problems: list[str] = []
    where = f"handle {handle.id[:8]} on {device.uuid}"
    info = device.info
    said = (grant.node, grant.vendor, grant.model, grant.index)
    found = (info.node, info.vendor, info.model, info.index)
    if said != found:
        problems.append(f"{where}: the grant names node/vendor/model/index {said}, discovery reported {found}")
    if grant.part >= len(handle.request.parts):
        return [f"{where}: grant names part {grant.part}, the request has {len(handle.request.parts)}"]
    part = handle.request.parts[grant.part]
    named = part.partition not in (None, "auto")
    profiles = {p.name: p for p in profiles_of(device)}
    if not named:
        asked = part.memory_for(device.info.memory_mib)
        if grant.memory_mib < asked:
            problems.append(f"{where}: granted {grant.memory_mib} MiB for a request of {asked} MiB")
        if grant.cores < part.cores:
            problems.append(f"{where}: granted {grant.cores}% cores for a request of {part.cores}%")
        # a partition with all of the device's compute (a full-size MIG instance) is exclusive by hardware
        whole_partition = grant.partition is not None and grant.cores >= 100
        if part.exclusive and not grant.exclusive and not whole_partition:
            problems.append(f"{where}: an exclusive request (cores 100) got a non-exclusive grant")
    elif grant.partition != part.partition:
        problems.append(f"{where}: asked for partition {part.partition!r}, granted {grant.partition!r}")
    if grant.partition:
        profile = profiles.get(grant.partition)
        dynamic = Capability.DYNAMIC_PROFILES in device.adapter.capabilities
        if profile is None and (named or not dynamic):
            problems.append(
                f"{where}: granted partition {grant.partition!r}, not one of the device's catalog {sorted(profiles)}"
                + ("" if named else " (carving other profiles needs the dynamic-profiles capability)")
            )
        if profile is not None and (grant.memory_mib, grant.cores) != (profile.memory_mib, profile.cores):
            problems.append(
                f"{where}: partition {profile.name} accounts {grant.memory_mib} MiB/{grant.cores}% "
                f"but the profile is {profile.memory_mib} MiB/{profile.cores}%"
            )
    return problems


def rounded(device: Device, handle: DeviceHandle) -> bool:
    """Whether the adapter gave more than asked (a profile, its memory unit, the whole device)."""
    for grant in handle.grants:
        if grant.uuid != device.uuid:
            continue
        part = handle.request.parts[grant.part]
        if grant.partition or grant.memory_mib > part.memory_for(device.info.memory_mib) or grant.cores > part.cores:
            return True
    return False


def device_problems(bench: Bench, device: Device, *, check_monitor: bool = True) -> list[str]:
    """Every capacity rule on one device, from the ledger's grants and from monitor()."""
    problems: list[str] = []
    cap = capacity(device)
    handles = [h for h in bench.ledger.handles() if device.uuid in h.uuids]
    grants = [(h, g) for h in handles for g in h.grants if g.uuid == device.uuid]
    memory = sum(g.memory_mib for _, g in grants)
    cores = sum(g.cores for _, g in grants)
    name = f"{device.type} {device.uuid}"
    if memory > cap.memory_mib:
        problems.append(f"{name}: {memory} MiB granted, capacity is {cap.memory_mib} MiB")
    if cores > cap.cores:
        problems.append(f"{name}: {cores}% cores granted, capacity is {cap.cores}%")
    if len(grants) > cap.split_count:
        problems.append(f"{name}: {len(grants)} sharers, split count is {cap.split_count}")
    if any(g.exclusive for _, g in grants) and len(grants) > 1:
        problems.append(f"{name}: an exclusive grant shares the device with {len(grants) - 1} other grant(s)")
    if grants and not device.info.healthy:
        problems.append(f"{name}: unhealthy device holds {len(grants)} grant(s)")
    per_handle = {h.id for h, _ in grants}
    if len(per_handle) != len(grants):
        problems.append(f"{name}: one allocation holds several grants on the same device")
    for handle, grant in grants:
        problems.extend(grant_problems(device, handle, grant))
    problems.extend(partition_overlap_problems(device, [g for _, g in grants]))
    if check_monitor:
        metrics = device.monitor()
        if metrics.allocated_memory_mib != memory:
            problems.append(f"{name}: monitor says {metrics.allocated_memory_mib} MiB allocated, grants hold {memory}")
        if metrics.allocated_cores != cores:
            problems.append(f"{name}: monitor says {metrics.allocated_cores}% cores allocated, grants hold {cores}")
        if metrics.sharers != len(grants):
            problems.append(f"{name}: monitor says {metrics.sharers} sharers, grants are {len(grants)}")
        listed = sorted(a.handle_id for a in metrics.allocations)
        if listed != sorted(per_handle):
            problems.append(f"{name}: monitor lists allocations {listed}, the ledger has {sorted(per_handle)}")
        used = _num(metrics.memory_used_mib)
        if used is not None and used > metrics.memory_total_mib:
            problems.append(f"{name}: memory used {used} MiB > total {metrics.memory_total_mib} MiB")
    return problems


def partition_overlap_problems(device: Device, grants: Iterable[Grant]) -> list[str]:
    """Live partitions on one device must fit it together, within their instance counts, with distinct ids."""
    parts = [g for g in grants if g.partition]
    if not parts:
        return []
    problems: list[str] = []
    name = f"{device.type} {device.uuid}"
    profiles = {p.name: p for p in profiles_of(device)}
    counts: dict[str, int] = {}
    memory = cores = 0
    for grant in parts:
        counts[grant.partition or ""] = counts.get(grant.partition or "", 0) + 1
        profile = profiles.get(grant.partition or "")
        memory += profile.memory_mib if profile else grant.memory_mib
        cores += profile.cores if profile else grant.cores
    for profile_name, count in sorted(counts.items()):
        profile = profiles.get(profile_name)
        if profile is not None and count > profile.max_instances:
            problems.append(f"{name}: {count} instances of {profile_name}, the profile allows {profile.max_instances}")
    if memory > device.info.memory_mib:
        problems.append(f"{name}: partitions overlap: their profiles need {memory} MiB of {device.info.memory_mib} MiB")
    if cores > 100:
        problems.append(f"{name}: partitions overlap: their profiles need {cores}% of the compute")
    ids = [g.partition_uuid for g in parts if g.partition_uuid]
    if len(ids) != len(set(ids)):
        problems.append(f"{name}: two live partitions share a partition id: {sorted(ids)}")
    return problems


def bench_problems(bench: Bench, *, check_monitor: bool = True) -> list[str]:
    problems: list[str] = []
    ids = [h.id for h in bench.ledger.handles()]
    if len(ids) != len(set(ids)):
        problems.append("the ledger holds duplicate handle ids")
    known = {d.uuid for d in bench.devices}
    for handle in bench.ledger.handles():
        stray = [u for u in handle.uuids if u not in known]
        if stray:
            problems.append(f"handle {handle.id[:8]} holds grants on unknown devices {stray}")
    for device in bench.devices:
        problems.extend(device_problems(bench, device, check_monitor=check_monitor))
    return problems
