"""Reading many regions in one native call (``hami_regions_usage`` via ``UsageReader``): the same records as
reading each region on its own once the reader has reclaimed the dead, the same object back for a region that
did not change, room grown when the process slots outnumber the buffer."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_devices import _native  # type: ignore[attr-defined]
from hami_devices.limiter import DeviceLimit, Region, RegionUsage, UsageReader
from tests.limiter.test_region import _child

GIB = 1 << 30
lib = _native.lib


def _one_by_one(regions: list[Region]) -> list[RegionUsage]:
    return [RegionUsage(r.device_usage(), r.process_usage()) for r in regions]


def _register(region: Region, pid: int, reserve: dict[int, int]) -> None:
    """A slot for ``pid`` (no liveness lock: alive only while /proc shows that pid) holding ``reserve``."""
    slot = lib.hami_region_register(region._handle, pid, lib.hami_proc_start_time(pid) or 1000 + pid)
    assert slot >= 0
    for device, nbytes in reserve.items():
        assert lib.hami_region_reserve(region._handle, slot, device, nbytes) == 0


# A region: its devices' (memory limit, core limit), and processes as (pid, {device: bytes reserved}).  Most
# of those pids are not running: registering the next one reclaims their slots, as the shims' would.
Spec = tuple[list[tuple[int, int]], list[tuple[int, dict[int, int]]]]
_limits = st.lists(st.tuples(st.integers(0, 4 * GIB), st.integers(0, 100)), min_size=1, max_size=4)
_reserve = st.dictionaries(st.integers(0, 3), st.integers(1, 1 << 20), max_size=2)
_procs = st.lists(st.tuples(st.integers(2, 4_000_000), _reserve), max_size=6, unique_by=lambda p: p[0])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(st.tuples(_limits, _procs), max_size=8))
def test_one_call_reads_what_each_region_says(tmp_path: Path, specs: list[Spec]) -> None:
    folder = tmp_path / os.urandom(4).hex()
    regions = []
    for i, (limits, procs) in enumerate(specs):
        region = Region.create(folder / f"{i}.region", [DeviceLimit(0, core) for _, core in limits])
        for pid, reserve in [(os.getpid(), {0: 4096}), *procs]:
            _register(region, pid, {d: n for d, n in reserve.items() if d < len(limits)})
        for device, (memory, core) in enumerate(limits):
            region.set_limit(device, DeviceLimit(memory, core))
        regions.append(region)
    try:
        before = _one_by_one(regions)  # a plain read reclaims nothing: the dead still hold their reservations
        reader = UsageReader()
        first = reader.read(regions)
        after = _one_by_one(regions)  # ... which the reader gave back
        for was, read, now in zip(before, first, after, strict=True):
            assert read is not None
            assert read.devices == now.devices and [p for p in read.processes if p.alive] == now.processes
            dead = [p for p in was.processes if not p.alive]
            assert [p for p in read.processes if not p.alive] == dead  # listed once, with what they held
            for device, record in enumerate(read.devices):
                freed = sum(p.memory_used_bytes for p in dead if p.device == device)
                assert record.memory_used_bytes == was.devices[device].memory_used_bytes - freed
        again = reader.read(regions)
        assert again == after
        third = reader.read(regions)
        assert all(a is b for a, b in zip(again, third, strict=True))  # nothing changed: the same objects
        if regions:
            regions[-1].set_limit(0, DeviceLimit(5 * GIB, 7))
            moved = reader.read(regions)
            assert moved == _one_by_one(regions)
            assert moved[-1] is not third[-1] and moved[-1].devices[0].memory_limit_bytes == 5 * GIB
            assert all(a is b for a, b in zip(moved[:-1], third[:-1], strict=True))
    finally:
        for region in regions:
            region.close()


def test_live_process_and_its_exit_are_seen(tmp_path: Path) -> None:
    path = tmp_path / "a.region"
    with Region.create(path, [DeviceLimit(GIB, 0), DeviceLimit(0, 0)]) as region:
        reader = UsageReader()
        (empty,) = reader.read([region])
        assert empty is not None and empty.processes == [] and empty.devices[0].memory_used_bytes == 0
        child = _child(path, "sleep", 4096)
        try:
            (held,) = reader.read([region])
            assert held is not None
            assert [(p.pid, p.device, p.memory_used_bytes, p.alive) for p in held.processes] == [
                (child.pid, 0, 4096, True), (child.pid, 1, 0, True),
            ]
            assert held.devices[0].memory_used_bytes == 4096
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        # The liveness lock went with the process: the reader gives back what it held, and says so once.
        (gone,) = reader.read([region])
        assert gone is not None and gone.devices[0].memory_used_bytes == 0
        assert [(p.pid, p.device, p.memory_used_bytes, p.alive) for p in gone.processes] == [
            (child.pid, 0, 4096, False), (child.pid, 1, 0, False),
        ]
        assert _one_by_one([region])[0] == RegionUsage(gone.devices, [])
        (later,) = reader.read([region])
        assert later == RegionUsage(gone.devices, [])


def test_more_processes_than_the_buffer_holds(tmp_path: Path) -> None:
    """The reader starts with room for 256 process entries; 100 live processes in each of 3 regions make it
    retry with more.  (A registered pid must be alive: a dead one's slot is reclaimed by the next register.)"""
    sleepers = [subprocess.Popen(["sleep", "120"]) for _ in range(100)]
    regions = [Region.create(tmp_path / f"{i}.region", [DeviceLimit(GIB, 0)]) for i in range(3)]
    try:
        for region in regions:
            for n, sleeper in enumerate(sleepers):
                slot = lib.hami_region_register(region._handle, sleeper.pid, lib.hami_proc_start_time(sleeper.pid))
                assert slot >= 0 and lib.hami_region_reserve(region._handle, slot, 0, n + 1) == 0
        read = UsageReader().read(regions)
        assert read == _one_by_one(regions)
        assert [len(r.processes) for r in read if r is not None] == [100, 100, 100]
        assert all(p.alive for r in read if r is not None for p in r.processes)
    finally:
        for region in regions:
            region.close()
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def test_a_closed_region_reads_as_none(tmp_path: Path) -> None:
    kept = Region.create(tmp_path / "a.region", [DeviceLimit(GIB, 0)])
    closed = Region.create(tmp_path / "b.region", [DeviceLimit(GIB, 0)])
    closed.close()
    try:
        usage, nothing = UsageReader().read([kept, closed])
        assert usage == _one_by_one([kept])[0] and nothing is None
    finally:
        kept.close()
