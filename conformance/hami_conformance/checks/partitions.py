"""Partitions, where declared: the catalog discovery reports, profiles granted whole, never overlapping.

The catalog is the one each device carries in its DeviceInfo, as discovery reported it (what a
scheduler sees), not the adapter's ``partition_catalog()`` helper.  A granted partition outside it
is allowed only to an adapter that declares the dynamic-profiles capability.
"""

from __future__ import annotations

import random

from hami_conformance.bench import Bench, CheckFailed, expect, profiles_of, share
from hami_conformance.checks import check
from hami_conformance.invariants import device_problems, partition_overlap_problems
from hami_devices.adapter import Capability
from hami_devices.device import Device
from hami_devices.errors import InsufficientResources
from hami_devices.models import DeviceHandle, PartitionProfile

MAX_GRANTS = 64


def partitioned_devices(bench: Bench) -> list[Device]:
    """The healthy devices carrying a partition catalog; fails the check when there are none."""
    devices = [d for d in bench.healthy() if profiles_of(d)]
    if not devices:
        helper = {d.info.model: len(bench.adapter.partition_catalog(d.info.model)) for d in bench.healthy()}
        listed = {model: n for model, n in helper.items() if n}
        hint = (
            f"; partition_catalog() lists profiles for {sorted(listed)} but discovery does not put them in "
            "DeviceInfo.partitions (call complete_info, or set partitions in discover)"
            if listed
            else ""
        )
        raise CheckFailed(
            f"the adapter declares partitions but no healthy device carries a partition catalog in its DeviceInfo{hint}"
        )
    return devices


def one_per_model(devices: list[Device]) -> list[Device]:
    seen: dict[str, Device] = {}
    for device in devices:
        seen.setdefault(device.info.model, device)
    return list(seen.values())


@check("partition.catalog")
def catalog(bench: Bench) -> None:
    for device in one_per_model(partitioned_devices(bench)):
        profiles = profiles_of(device)
        names = [p.name for p in profiles]
        expect(len(names) == len(set(names)), f"{device.type}: duplicate profile names {names}")
        for p in profiles:
            expect(isinstance(p, PartitionProfile), f"{device.type}: {p!r} is not a PartitionProfile")
            expect(
                0 < p.memory_mib <= device.info.memory_mib,
                f"{device.type}: profile {p.name} has {p.memory_mib} MiB, device has {device.info.memory_mib}",
            )
            expect(1 <= p.cores <= 100, f"{device.type}: profile {p.name} has {p.cores}% cores")
            expect(p.max_instances >= 1, f"{device.type}: profile {p.name} allows {p.max_instances} instances")
            # a catalog promising more instances than the device holds is refused only when a scheduler
            # has already counted on the last of them
            expect(
                p.max_instances * p.memory_mib <= device.info.memory_mib and p.max_instances * p.cores <= 100,
                f"{device.type}: profile {p.name} allows {p.max_instances} instances of {p.memory_mib} MiB/"
                f"{p.cores}% cores, {p.max_instances * p.memory_mib} MiB/{p.max_instances * p.cores}% in all, "
                f"the device has {device.info.memory_mib} MiB/100%",
            )


def _expect_profile(handle: DeviceHandle, profile: PartitionProfile) -> None:
    grant = handle.grants[0]
    expect(grant.partition == profile.name, f"asked for {profile.name}, granted partition {grant.partition!r}")
    expect(
        (grant.memory_mib, grant.cores) == (profile.memory_mib, profile.cores),
        f"partition {profile.name} granted {grant.memory_mib} MiB/{grant.cores}%, "
        f"the profile is {profile.memory_mib} MiB/{profile.cores}%",
    )


@check("partition.granted-from-catalog")
def granted_from_catalog(bench: Bench) -> None:
    for device in one_per_model(partitioned_devices(bench)):
        profiles = profiles_of(device)
        for profile in profiles:
            try:
                handle = bench.allocate_on(device, share(1, 0, partition=profile.name))
            except InsufficientResources as exc:
                raise CheckFailed(f"{device.type}: profile {profile.name} refused on an empty device: {exc}") from exc
            _expect_profile(bench.recorded(handle), profile)
            bench.release(handle)
        smallest = min(profiles, key=lambda p: (p.memory_mib, p.cores))
        ask = max(1, smallest.memory_mib // 2)
        best = min(p.memory_mib for p in profiles if p.memory_mib >= ask)
        handle = bench.allocate_on(device, share(ask, 0, partition="auto"))
        grant = bench.recorded(handle).grants[0]
        known = {p.name: p for p in profiles}
        expect(grant.partition, f"{device.type}: 'auto' for {ask} MiB granted no partition")
        if grant.partition in known:
            _expect_profile(bench.recorded(handle), known[grant.partition or ""])
            expect(
                grant.memory_mib == best,
                f"{device.type}: 'auto' for {ask} MiB granted {grant.partition} with {grant.memory_mib} MiB, "
                f"the smallest fitting catalog profile has {best} MiB",
            )
        else:
            expect(
                Capability.DYNAMIC_PROFILES in bench.adapter.capabilities,
                f"{device.type}: 'auto' for {ask} MiB granted {grant.partition!r}, which is not in the device's "
                f"catalog {sorted(known)}; carving profiles outside it needs the dynamic-profiles capability",
            )
            # a carved profile fits the request, and is never larger than the catalog's answer
            expect(
                ask <= grant.memory_mib <= best,
                f"{device.type}: 'auto' for {ask} MiB carved {grant.partition!r} with {grant.memory_mib} MiB, "
                f"the smallest fitting catalog profile has {best} MiB",
            )
        bench.release(handle)


@check("partition.no-overlap")
def no_overlap(bench: Bench) -> None:
    for device in one_per_model(partitioned_devices(bench)):
        profiles = profiles_of(device)
        rng = random.Random(device.info.model)
        for _ in range(3):
            handles: list[DeviceHandle] = []
            refusals = 0
            while len(handles) < MAX_GRANTS and refusals < 2 * len(profiles):
                profile = rng.choice(profiles)
                try:
                    handle = bench.allocate_on(device, share(1, 0, partition=profile.name))
                except InsufficientResources:
                    refusals += 1
                    continue
                handles.append(handle)
                grants = [g for h in handles for g in h.grants]
                problems = partition_overlap_problems(device, grants) + device_problems(bench, device)
                expect(
                    not problems, f"{device.type} after granting {[g.partition for g in grants]}: {'; '.join(problems)}"
                )
            expect(handles, f"{device.type}: no partition could be granted on an empty device")
            for handle in handles:
                bench.release(handle)
            expect(bench.state(device).usage.sharers == 0, f"{device.type}: partitions left after release")
        largest = max(profiles, key=lambda p: (p.memory_mib, p.cores))
        again = bench.allocate_on(device, share(1, 0, partition=largest.name))
        _expect_profile(bench.recorded(again), largest)
