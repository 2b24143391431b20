"""Restart: a new adapter instance discovering over the same durable SQLite ledger.

A node agent restarts; its ledger survives on disk.  The adapter instance that comes up
must find the same devices and honour every allocation the old one made: nothing an
adapter kept only in memory (minted uuids, partition-id counters, its own usage tallies)
may decide identity or capacity.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hami_conformance.bench import Bench, CheckFailed, Target, capacity, expect, profiles_of, share
from hami_conformance.checks import check
from hami_conformance.checks.allocation import expect_refused
from hami_conformance.checks.release import expect_unknown
from hami_conformance.facts import (
    hardware_partition_problems,
    ledger_problems,
    monitor_problems,
    region_problems,
    reported_partitions,
)
from hami_conformance.invariants import device_problems, partition_overlap_problems
from hami_devices.adapter import Capability
from hami_devices.device import Device
from hami_devices.errors import InsufficientResources
from hami_devices.ledger import SqliteLedger
from hami_devices.models import DeviceHandle, PartitionProfile


@contextlib.contextmanager
def _restart(target: Target) -> Iterator[tuple[Bench, Path]]:
    """A bench on a durable ledger, of an adapter instance that has just started (as the one after
    the restart will have); whatever bench comes last cleans everything up."""
    with tempfile.TemporaryDirectory(prefix="hami-conformance-ledger-") as tmp:
        path = Path(tmp) / "ledger.db"
        first = target.restarted().bench(SqliteLedger(path))
        try:
            yield first, path
        finally:
            first.cleanup()


def _rediscover(target: Target, path: Path, benches: list[Bench]) -> Bench:
    """The restarted process: a new adapter instance and a new connection to the same ledger file."""
    second = target.restarted().bench(SqliteLedger(path))
    benches.append(second)
    return second


def _identity(device: Device) -> tuple[str, int, str, int]:
    info = device.info
    return (info.node, info.index, info.model, info.memory_mib)


@check("restart.same-devices")
def same_devices(bench: Bench) -> None:
    bench.cleanup()
    later: list[Bench] = []
    with _restart(bench.target) as (first, path):
        try:
            device = first.device()
            first.allocate_on(device, share(max(1, capacity(device).memory_mib // 8), 0))
            before = {d.uuid: _identity(d) for d in first.devices}
            second = _rediscover(bench.target, path, later)
            uuids = [d.uuid for d in second.devices]
            after = {d.uuid: _identity(d) for d in second.devices}
            expect(len(uuids) == len(set(uuids)), f"rediscovery reports duplicate uuids: {sorted(uuids)}")
            lost, new = sorted(set(before) - set(after)), sorted(set(after) - set(before))
            expect(
                not lost and not new,
                f"after a restart the devices {lost} are gone and {new} appeared: a uuid must stay the same "
                "across restarts (the ledger's grants name devices by it)",
            )
            changed = {u: f"{before[u]} -> {after[u]}" for u in before if before[u] != after[u]}
            expect(not changed, f"after a restart devices changed their (node, index, model, memory): {changed}")
        finally:
            for other in later:
                other.cleanup()


def _shared_profile(device: Device) -> PartitionProfile | None:
    """A profile that fits at least twice: one instance before the restart, one after."""
    fitting = [p for p in profiles_of(device) if p.max_instances >= 2 and 2 * p.memory_mib <= device.info.memory_mib]
    return min(fitting, key=lambda p: (p.memory_mib, p.cores), default=None)


def _plan(bench: Bench) -> tuple[Device | None, Device, list[Device]]:
    """(a partitioned device, the device for the big share, the pair for a two-device share)."""
    partitioned = None
    if Capability.PARTITIONS in bench.adapter.capabilities:
        candidates = sorted((d for d in bench.healthy() if _shared_profile(d)), key=lambda d: d.info.index)
        partitioned = candidates[0] if candidates else None
    rest = [d for d in bench.healthy() if d is not partitioned]
    expect(rest, "the restart check needs a healthy device besides the partitioned one")
    big = max(rest, key=lambda d: (d.info.memory_mib, -d.info.index))
    nodes: dict[str, list[Device]] = {}
    for device in rest:
        nodes.setdefault(device.info.node, []).append(device)
    pair = max(nodes.values(), key=len)[:2]
    return partitioned, big, pair if len(pair) == 2 else []


def _before(first: Bench) -> tuple[list[DeviceHandle], Device, Device | None]:
    partitioned, big, pair = _plan(first)
    handles = [first.allocate_on(big, share(max(1, capacity(big).memory_mib // 2), 25))]
    if pair:
        memory = max(1, min(capacity(d).memory_mib for d in pair) // 8)
        handles.append(first.allocate_many(pair, share(memory, 10, count=2, uuids=[d.uuid for d in pair])))
    if partitioned is not None:
        profile = _shared_profile(partitioned)
        assert profile is not None
        handles.append(first.allocate_on(partitioned, share(1, 0, partition=profile.name)))
    return [first.recorded(h) for h in handles], big, partitioned


def _agree(bench: Bench, live: list[DeviceHandle], baseline: dict[str, set[str] | None], when: str) -> None:
    reader = bench.target.profile.hardware_partitions
    problems = ledger_problems(bench, live)
    touched = {g.uuid for h in live for g in h.grants} | set(baseline)
    for device in bench.devices:
        if device.uuid not in touched:
            continue
        problems += monitor_problems(device, live) + device_problems(bench, device)
        reported = reported_partitions(reader, device)
        problems += hardware_partition_problems(device, reported, baseline.get(device.uuid), live)
    for handle in live:
        problems += region_problems(handle, live=True)
    expect(not problems, f"{when}: " + "; ".join(problems[:4]))


@check("restart.ledger-honoured")
def ledger_honoured(bench: Bench) -> None:
    bench.cleanup()
    later: list[Bench] = []
    with _restart(bench.target) as (first, path):
        try:
            reader = bench.target.profile.hardware_partitions
            baseline = {d.uuid: reported_partitions(reader, d) for d in first.healthy()}
            made, big, partitioned = _before(first)
            second = _rediscover(bench.target, path, later)
            known = {d.uuid for d in second.devices}
            expect(
                {g.uuid for h in made for g in h.grants} <= known,
                "after a restart the rediscovered devices do not include every device the ledger's grants name",
            )
            _agree(second, made, baseline, "after a restart")
            _still_full(second, big, made)
            live = list(made) + _after(second, partitioned, made)
            _agree(second, live, baseline, "after allocating again following a restart")
            for handle in made:
                second.release(handle)
                live.remove(handle)
                expect(
                    not region_problems(handle, live=False),
                    "; ".join(region_problems(handle, live=False)),
                )
                _agree(second, live, baseline, f"after releasing pre-restart allocation {handle.id[:8]}")
                expect_unknown(second, handle, f"a second release of pre-restart allocation {handle.id[:8]}")
        finally:
            for other in later:
                other.cleanup()


def _still_full(second: Bench, big_before: Device, made: list[DeviceHandle]) -> None:
    """The rediscovered device refuses what no longer fits beside the pre-restart grants."""
    big = second.by_uuid(big_before.uuid)
    held = sum(g.memory_mib for h in made for g in h.grants if g.uuid == big.uuid)
    free = capacity(big).memory_mib - held
    expect_refused(
        lambda: second.allocate_on(big, share(free + 1, 0)),
        f"after a restart, {free + 1} MiB on {big.uuid}, where pre-restart grants hold {held} MiB",
        big,
    )


def _after(second: Bench, partitioned: Device | None, made: list[DeviceHandle]) -> list[DeviceHandle]:
    """New allocations after the restart never reuse a live handle or partition id."""
    issued = {h.id for h in made}
    new: list[DeviceHandle] = []
    with contextlib.suppress(InsufficientResources):  # nothing free is no fault here
        new.append(second.recorded(second.allocate_many(second.healthy(), share(1, 0))))
    if partitioned is not None:
        device = second.by_uuid(partitioned.uuid)
        profile = _shared_profile(device)
        if profile is None:
            raise CheckFailed(f"after a restart {device.uuid} no longer carries the partition catalog it had")
        try:
            new.append(second.recorded(second.allocate_on(device, share(1, 0, partition=profile.name))))
        except InsufficientResources as exc:
            raise CheckFailed(
                f"after a restart a second {profile.name} (max {profile.max_instances}) was refused on {device.uuid}: "
                f"{exc}"
            ) from exc
        grants = [g for h in [*made, *new] for g in h.grants if g.uuid == device.uuid]
        ids = [g.partition_uuid for g in grants if g.partition_uuid]
        expect(len(ids) == len(set(ids)), f"after a restart a live partition id was issued again: {sorted(ids)}")
        problems = partition_overlap_problems(device, grants)
        expect(not problems, "after a restart: " + "; ".join(problems))
    reused = sorted(h.id for h in new if h.id in issued)
    expect(not reused, f"after a restart handle ids {reused} were issued again")
    return new
