"""Release order: the same allocations released FIFO, LIFO and in a random order.

After every release the suite compares what the device side says - the ledger, monitor(), the
limiter regions and, where the adapter's profile (or the suite, for the built-ins) can read them,
the partitions the vendor library reports - with the grants it knows are still live.
"""

from __future__ import annotations

import random

from hami_conformance.bench import Bench, capacity, expect, profiles_of, share
from hami_conformance.checks import check
from hami_conformance.facts import (
    hardware_partition_problems,
    ledger_problems,
    monitor_problems,
    region_problems,
    reported_partitions,
)
from hami_conformance.invariants import device_problems
from hami_devices.adapter import Capability
from hami_devices.device import Device
from hami_devices.errors import InsufficientResources
from hami_devices.models import DeviceHandle

ORDERS = ("FIFO", "LIFO", "random")
SEED = 17
MAX_PARTITIONS = 4


def _partition_device(bench: Bench) -> Device | None:
    if Capability.PARTITIONS not in bench.adapter.capabilities:
        return None
    partitioned = sorted((d for d in bench.healthy() if profiles_of(d)), key=lambda d: d.info.index)
    return partitioned[0] if partitioned else None


def _allocate_mix(bench: Bench) -> list[DeviceHandle]:
    """Two shares on each of up to three devices, a two-device share, and partitions of distinct
    profiles on one partitioned device (kept apart: some vendors never mix shares and partitions)."""
    reserved = _partition_device(bench)
    plain = [d for d in bench.healthy() if d is not reserved][:3]
    handles: list[DeviceHandle] = []
    for device in plain:
        cap = capacity(device)
        for cores in (10, 20):
            handles.append(bench.allocate_on(device, share(max(1, cap.memory_mib // 8), min(cores, cap.cores))))
    nodes: dict[str, list[Device]] = {}
    for device in plain:
        nodes.setdefault(device.info.node, []).append(device)
    pair = max(nodes.values(), key=len, default=[])[:2]
    if len(pair) == 2:
        memory = max(1, min(capacity(d).memory_mib for d in pair) // 8)
        handles.append(bench.allocate_many(pair, share(memory, 10, count=2, uuids=[d.uuid for d in pair])))
    if reserved is not None:
        granted = 0
        for profile in sorted(profiles_of(reserved), key=lambda p: (p.memory_mib, p.cores)):
            if granted == MAX_PARTITIONS:
                break
            try:
                handles.append(bench.allocate_on(reserved, share(1, 0, partition=profile.name)))
            except InsufficientResources:
                continue
            granted += 1
    expect(len(handles) >= 2, f"only {len(handles)} allocations could be made to release in order")
    return [bench.recorded(h) for h in handles]


def _ordered(handles: list[DeviceHandle], order: str) -> list[DeviceHandle]:
    if order == "LIFO":
        return list(reversed(handles))
    if order == "random":
        shuffled = list(handles)
        random.Random(SEED).shuffle(shuffled)
        return shuffled
    return list(handles)


def _one_order(bench: Bench, order: str) -> None:
    reader = bench.target.profile.hardware_partitions
    baseline = {d.uuid: reported_partitions(reader, d) for d in bench.healthy()}
    handles = _allocate_mix(bench)
    live = list(handles)
    touched = [bench.by_uuid(u) for u in dict.fromkeys(g.uuid for h in handles for g in h.grants)]
    for step, handle in enumerate(_ordered(handles, order), 1):
        bench.release(handle)
        live.remove(handle)
        problems = ledger_problems(bench, live) + region_problems(handle, live=False)
        for other in live:
            problems += region_problems(other, live=True)
        for device in touched:
            problems += monitor_problems(device, live) + device_problems(bench, device)
            reported = reported_partitions(reader, device)
            problems += hardware_partition_problems(device, reported, baseline.get(device.uuid), live)
        expect(
            not problems,
            f"{order} release, step {step} of {len(handles)} (released {handle.id[:8]} on {handle.uuids}): "
            + "; ".join(problems[:4]),
        )


@check("release.any-order")
def any_order(bench: Bench) -> None:
    bench.cleanup()  # each order runs on a fresh bench
    for order in ORDERS:
        fresh = bench.target.bench()
        try:
            _one_order(fresh, order)
        finally:
            fresh.cleanup()
