"""Release and handles: exact release, double release, unique ids, JSON round-trip, multi-device."""

from __future__ import annotations

import json

from hami_conformance.bench import Bench, CheckFailed, capacity, expect, profiles_of, share
from hami_conformance.checks import check
from hami_conformance.checks.allocation import expect_clean, expect_refused
from hami_devices.device import Device
from hami_devices.errors import InsufficientResources, UnknownAllocation
from hami_devices.models import DeviceHandle, ResourceRequest


def expect_unknown(bench: Bench, handle: DeviceHandle | str, what: str) -> None:
    before = bench.states()
    try:
        bench.release(handle)
    except UnknownAllocation:
        pass
    except Exception as exc:
        raise CheckFailed(f"{what}: raised {type(exc).__name__}: {exc}, expected UnknownAllocation") from exc
    else:
        raise CheckFailed(f"{what}: returned without raising UnknownAllocation")
    after = bench.states()
    changed = {u: before[u].differences(after[u]) for u in before if before[u] != after[u]}
    expect(not changed, f"{what}: changed the devices: {changed}")


@check("release.exact")
def release_exact(bench: Bench) -> None:
    device = bench.device()
    cap = capacity(device)
    keep = bench.allocate_on(device, share(max(1, cap.memory_mib // 8), min(10, cap.cores)))
    before = bench.state(device)
    handle = bench.allocate_on(device, share(max(1, cap.memory_mib // 4), min(20, cap.cores)))
    expect(bench.state(device) != before, "an allocation did not change the device's accounting")
    bench.release(handle)
    after = bench.state(device)
    expect(after == before, f"release did not restore the device exactly: {before.differences(after)}")
    expect(bench.live_ids() == {keep.id}, f"live allocations after release: {sorted(bench.live_ids())}")
    expect_clean(bench, device)


@check("release.double-raises")
def double_release(bench: Bench) -> None:
    device = bench.device()
    keep = bench.allocate_on(device, share(1, 0))
    handle = bench.allocate_on(device, share(1, 0))
    bench.release(handle)
    expect_unknown(bench, handle, "a second release of the same handle")
    expect_unknown(bench, handle.id, "a second release by handle id")
    expect_unknown(bench, "0" * 32, "the release of a never-issued handle id")
    expect(bench.live_ids() == {keep.id}, f"live allocations: {sorted(bench.live_ids())}, expected only {keep.id}")
    expect_clean(bench, device)


@check("handle.unique")
def unique_handles(bench: Bench) -> None:
    device = bench.device()
    seen: list[str] = []
    for _ in range(3):
        batch = [bench.allocate_on(device, share(1, 0)) for _ in range(min(4, capacity(device).split_count))]
        seen.extend(h.id for h in batch)
        for handle in batch:
            bench.release(handle)
    expect(all(isinstance(i, str) and i for i in seen), "handle ids must be non-empty strings")
    dupes = sorted({i for i in seen if seen.count(i) > 1})
    expect(not dupes, f"handle ids were reused: {dupes}")


@check("handle.json-roundtrip")
def json_roundtrip(bench: Bench) -> None:
    group = bench.same_node_group(1)
    devices = group[:2]
    request = share(1, 10, count=len(devices), uuids=[d.uuid for d in devices])
    handle = bench.allocate_many(devices, request)
    text = handle.model_dump_json()
    json.loads(text)
    again = DeviceHandle.model_validate_json(text)
    expect(again == handle, "the handle changed through JSON")
    expect(again.env == handle.env and again.grants == handle.grants, "grants or env changed through JSON")
    expect(all(isinstance(v, str) for v in handle.env.values()), "environment values must all be strings")
    bench.release(again)
    expect(not bench.live_ids(), "releasing the round-tripped handle left the allocation live")


@check("multi.grants-distinct-devices")
def multi_distinct(bench: Bench) -> None:
    group = bench.same_node_group(2)
    count = len(group)
    handle = bench.allocate_many(group, share(1, 10, count=count))
    uuids = handle.uuids
    expect(len(uuids) == count, f"a request for {count} devices got {len(uuids)} grants")
    expect(len(set(uuids)) == count, f"grants are not on distinct devices: {uuids}")
    for device in group:
        expect(bench.state(device).usage.sharers == 1, f"{device.uuid} does not hold the grant")
    bench.release(handle)
    for device in group:
        expect(bench.state(device).usage.sharers == 0, f"{device.uuid} still holds a grant after release")


def fill(bench: Bench, device: Device) -> None:
    """Take every MiB the device still grants, largest shares first (what is free may be less than its
    capacity: partitions someone else made hold memory the ledger does not know about)."""
    size = capacity(device).memory_mib
    while size >= 1:
        try:
            bench.allocate_on(device, share(size, 0))
        except InsufficientResources:
            size //= 2
    expect(bench.state(device).usage.sharers, f"{device.uuid} granted no share at all on an empty device")


@check("multi.all-or-nothing")
def all_or_nothing(bench: Bench) -> None:
    # Fill one device (one that shares whole, where there is one: a whole-device share needs no
    # profile of that size), so a request for every device of the node fits on all but one.
    group = sorted(bench.same_node_group(2), key=lambda d: (not profiles_of(d), d.info.index))
    blocker = group[-1]
    fill(bench, blocker)
    memory = min(capacity(d).memory_mib for d in group[:-1])
    before = bench.states()
    live = bench.live_ids()

    def unchanged(what: str) -> None:
        after = bench.states()
        changed = {u: before[u].differences(after[u]) for u in before if before[u] != after[u]}
        expect(not changed, f"{what} was refused but left state behind: {changed}")
        expect(bench.live_ids() == live, f"{what} was refused but left allocations {bench.live_ids() - live}")

    expect_refused(
        lambda: bench.allocate_many(group, share(memory // 2 or 1, 0, count=len(group))),
        f"a request for all {len(group)} devices with one full",
        blocker,
    )
    unchanged("a multi-device request")
    two_parts = ResourceRequest(
        name="conformance",
        parts=[
            {"count": len(group) - 1, "memory_mib": memory // 2 or 1},
            {"count": 1, "memory_mib": capacity(blocker).memory_mib},
        ],
    )
    try:
        handle = bench.allocate_many(group, two_parts)
    except InsufficientResources:
        pass
    else:
        raise CheckFailed(f"a two-part request that cannot fit was granted: {handle.uuids}")
    unchanged("a two-part request")
    for device in group:
        expect_clean(bench, device)
