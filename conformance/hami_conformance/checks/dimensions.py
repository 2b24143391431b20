"""Partition requests where each dimension decides: memory, cores, the profile's name and the count.

An adapter that rounds requests onto profiles by one dimension only (memory, typically) passes every
check that asks by that dimension.  Here each dimension is the one that decides in turn, and the
expected profile is found from the definition - the smallest (memory, then cores) catalog profile
that covers what was asked - over the catalog the device reports, not through the adapter.
"""

from __future__ import annotations

from hami_conformance.bench import Bench, CheckFailed, expect, profiles_of, share
from hami_conformance.checks import check
from hami_conformance.checks.partitions import one_per_model, partitioned_devices
from hami_devices.adapter import Capability
from hami_devices.device import Device
from hami_devices.errors import InsufficientResources
from hami_devices.models import Grant, PartitionProfile


def smallest_covering(profiles: list[PartitionProfile], memory_mib: int, cores: int) -> PartitionProfile | None:
    fitting = [p for p in profiles if p.memory_mib >= memory_mib and p.cores >= cores]
    return min(fitting, key=lambda p: (p.memory_mib, p.cores), default=None)


def _expect_rounded(bench: Bench, device: Device, memory_mib: int, cores: int, decides: str) -> None:
    """``partition: auto`` for (memory_mib, cores) is granted the smallest profile covering both."""
    profiles = profiles_of(device)
    best = smallest_covering(profiles, memory_mib, cores)
    if best is None:
        return
    what = f"{device.type}: 'auto' for {memory_mib} MiB/{cores}% ({decides} decides)"
    try:
        handle = bench.allocate_on(device, share(memory_mib, cores, partition="auto"))
    except InsufficientResources as exc:
        raise CheckFailed(f"{what} refused on an empty device, {best.name} covers it: {exc}") from exc
    grant = bench.recorded(handle).grants[0]
    bench.release(handle)
    _expect_covers(bench, grant, best, memory_mib, cores, what)


def _expect_covers(bench: Bench, grant: Grant, best: PartitionProfile, memory_mib: int, cores: int, what: str) -> None:
    said = f"{grant.partition} with {grant.memory_mib} MiB/{grant.cores}%"
    expect(
        grant.memory_mib >= memory_mib and grant.cores >= cores,
        f"{what} granted {said}, less than was asked",
    )
    if Capability.DYNAMIC_PROFILES in bench.adapter.capabilities and grant.partition != best.name:
        # a carved profile may be tighter than the catalog's answer, never larger
        expect(grant.memory_mib <= best.memory_mib, f"{what} carved {said}, larger than {best.name}")
        return
    expect(
        (grant.memory_mib, grant.cores) == (best.memory_mib, best.cores),
        f"{what} granted {said}, the smallest catalog profile covering it is {best.name} "
        f"({best.memory_mib} MiB/{best.cores}%)",
    )


def _beyond_named(device: Device, profile: PartitionProfile) -> list[tuple[int, int, str]]:
    """Requests naming ``profile`` with more memory, or more cores, than it holds."""
    asks = [(profile.memory_mib + 1, 0, "memory")]
    if profile.cores + 1 < 100:
        asks.append((1, profile.cores + 1, "cores"))
    return [(m, c, d) for m, c, d in asks if m <= device.info.memory_mib]


def _named_beyond(bench: Bench, device: Device, profile: PartitionProfile, *, refused: bool) -> None:
    """A request naming a profile gets that profile or nothing - never another one; with ``refused``,
    nothing at all when it asks more than the profile holds."""
    for memory, cores, dimension in _beyond_named(device, profile):
        what = (
            f"{device.type}: profile {profile.name} ({profile.memory_mib} MiB/{profile.cores}%) asked with "
            f"{memory} MiB/{cores}% ({dimension} beyond the named profile)"
        )
        try:
            handle = bench.allocate_on(device, share(memory, cores, partition=profile.name))
        except InsufficientResources:
            continue
        grant = bench.recorded(handle).grants[0]
        bench.release(handle)
        said = f"{grant.partition} ({grant.memory_mib} MiB/{grant.cores}%)"
        expect(grant.partition == profile.name, f"{what}: granted another profile, {said}")
        expect(not refused, f"{what}: granted {said}, less than was asked, instead of refusing")


def _count_decides(bench: Bench, devices: list[Device]) -> None:
    """count N of a named profile: N grants of exactly that profile on N distinct devices."""
    by_node: dict[tuple[str, str], list[Device]] = {}
    for device in devices:
        by_node.setdefault((device.info.node, device.info.model), []).append(device)
    group = max(by_node.values(), key=len)
    if len(group) < 2:
        bench.notes.append("count: no two devices of one model with partitions on one node")
        return
    pair = group[:2]
    for profile in profiles_of(pair[0]):
        if not all(_grants_alone(bench, device, profile) for device in pair):
            continue  # the count cannot decide what one of the devices refuses by itself
        uuids = [d.uuid for d in pair]
        try:
            handle = bench.allocate_many(pair, share(1, 0, count=2, uuids=uuids, partition=profile.name))
        except InsufficientResources as exc:
            raise CheckFailed(f"count 2 of {profile.name} refused on two empty devices {uuids}: {exc}") from exc
        grants = bench.recorded(handle).grants
        bench.release(handle)
        expect(
            len(grants) == 2 and {g.uuid for g in grants} == set(uuids),
            f"count 2 of {profile.name} granted {[(g.uuid, g.partition) for g in grants]}, expected one on each of "
            f"{uuids}",
        )
        for grant in grants:
            expect(
                (grant.partition, grant.memory_mib, grant.cores) == (profile.name, profile.memory_mib, profile.cores),
                f"count 2 of {profile.name}: {grant.uuid} granted {grant.partition} with {grant.memory_mib} MiB/"
                f"{grant.cores}%, the profile is {profile.memory_mib} MiB/{profile.cores}%",
            )


def _grants_alone(bench: Bench, device: Device, profile: PartitionProfile) -> bool:
    try:
        handle = bench.allocate_on(device, share(1, 0, partition=profile.name))
    except InsufficientResources:
        return False
    bench.release(handle)
    return True


@check("partition.each-dimension")
def each_dimension(bench: Bench) -> None:
    devices = partitioned_devices(bench)
    for device in one_per_model(devices):
        for profile in profiles_of(device):
            _expect_rounded(bench, device, profile.memory_mib, 0, "memory")
            if profile.cores < 100:
                _expect_rounded(bench, device, 1, profile.cores, "cores")
            _named_beyond(bench, device, profile, refused=False)
    _count_decides(bench, devices)


@check("partition.named-covers")
def named_covers(bench: Bench) -> None:
    for device in one_per_model(partitioned_devices(bench)):
        for profile in profiles_of(device):
            _named_beyond(bench, device, profile, refused=True)
