"""Virtual device memory: a share granted more than the card has free is served from host memory beyond it.

The fake device has 256 MiB of physical memory and another workload holds 200 MiB of it.  A virtual share of
128 MiB then gets its first 32 MiB from the card and the rest from managed memory the driver keeps on the
host (the fake counts that on the host, never against the card) -- up to its limit and never beyond, and
within the host cap when one is set.  Without virtual memory the same share is refused once the card is
full.  Spilled bytes are recorded per grant in the region, where the exporter and ``monitor`` read them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hami_devices import discover
from hami_devices.config import parse_config
from hami_devices.device import Device
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import SqliteLedger
from hami_devices.limiter import DeviceLimit, Region, fake_gpu_snapshot
from hami_devices.observability.regions import RegionReader
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import NO_CONTEXT, Env

MIB = 1 << 20
OK, OOM = "0", "2"


@contextmanager
def hog(drivers: Drivers, wenv: Env, mib: int) -> Iterator[None]:
    """Another workload (no limiter) holding `mib` of the card's physical memory."""
    env = wenv.build(**NO_CONTEXT, shim=None, HAMI_FAKE_CUDA_MEMORY_MIB="256")
    proc = subprocess.Popen([str(drivers.cuda), "hold", str(mib * MIB)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY rc=0"
        yield
    finally:
        proc.kill()
        proc.wait()


def spill(drivers: Drivers, env: dict[str, str], n: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(drivers.scenarios), "spill", "32", str(n)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def read_until_ready(proc: subprocess.Popen[str]) -> dict[str, str]:
    assert proc.stdout is not None
    found: dict[str, str] = {}
    for line in proc.stdout:
        if line.strip() == "READY":
            return found
        head, _, rest = line.strip().partition(" ")
        found[head] = rest.removeprefix("rc=")
    raise AssertionError(f"the scenario ended early: {found}")


def test_virtual_share_spills_beyond_the_free_card_up_to_its_limit(drivers: Drivers, wenv: Env) -> None:
    Region.create(wenv.region, [DeviceLimit(128 * MIB, 0, virtual_memory=True)]).close()
    env = wenv.build(**NO_CONTEXT, HAMI_REGION_PATH=str(wenv.region), HAMI_FAKE_CUDA_MEMORY_MIB="256")
    with hog(drivers, wenv, 200):
        proc = spill(drivers, env, 5)
        try:
            f = read_until_ready(proc)
            # 32 MiB fit on the card (200 + 32 <= 256), the next three come from the host, the fifth would
            # pass the 128 MiB limit.
            assert [f[f"alloc{i}"] for i in range(1, 6)] == [OK, OK, OK, OK, OOM]
            assert f["meminfo"] == f"free=0 total={128 * MIB}"
            with Region.open(wenv.region) as region:
                usage = region.device_usage()[0]
            assert usage.virtual_memory
            assert (usage.memory_used_bytes, usage.memory_spilled_bytes) == (128 * MIB, 96 * MIB)
            device = fake_gpu_snapshot(wenv.state)[0]
            assert device.used_bytes == 232 * MIB and device.peak_used_bytes <= 256 * MIB  # the card: never over
            assert device.host_bytes == 96 * MIB
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert read_until_ready(proc)["freed"] == OK
            with Region.open(wenv.region) as region:
                usage = region.device_usage()[0]
            assert (usage.memory_used_bytes, usage.memory_spilled_bytes) == (0, 0)
            assert usage.memory_spilled_peak_bytes == 96 * MIB
            assert fake_gpu_snapshot(wenv.state)[0].host_bytes == 0
        finally:
            proc.kill()
            proc.wait()


def test_host_cap_bounds_what_spills(drivers: Drivers, wenv: Env) -> None:
    capped = DeviceLimit(128 * MIB, 0, virtual_memory=True, host_spill_limit_bytes=64 * MIB)
    Region.create(wenv.region, [capped]).close()
    env = wenv.build(**NO_CONTEXT, HAMI_REGION_PATH=str(wenv.region), HAMI_FAKE_CUDA_MEMORY_MIB="256")
    with hog(drivers, wenv, 200):
        proc = spill(drivers, env, 4)
        try:
            f = read_until_ready(proc)
            assert [f[f"alloc{i}"] for i in range(1, 5)] == [OK, OK, OK, OOM]  # 32 on the card, 64 on the host
            assert fake_gpu_snapshot(wenv.state)[0].host_bytes == 64 * MIB
        finally:
            proc.kill()
            proc.wait()


def test_without_virtual_memory_a_full_card_refuses(drivers: Drivers, wenv: Env) -> None:
    # The control: the same share, not virtual, gets what the card has and then the driver's own refusal.
    Region.create(wenv.region, [DeviceLimit(128 * MIB, 0)]).close()
    env = wenv.build(**NO_CONTEXT, HAMI_REGION_PATH=str(wenv.region), HAMI_FAKE_CUDA_MEMORY_MIB="256")
    with hog(drivers, wenv, 200):
        proc = spill(drivers, env, 3)
        try:
            f = read_until_ready(proc)
            assert [f[f"alloc{i}"] for i in range(1, 4)] == [OK, OOM, OOM]
            assert fake_gpu_snapshot(wenv.state)[0].host_bytes == 0
            with Region.open(wenv.region) as region:
                assert region.device_usage()[0].memory_used_bytes == 32 * MIB  # refusals are not charged
        finally:
            proc.kill()
            proc.wait()


def test_private_region_takes_virtual_memory_from_the_environment(drivers: Drivers, wenv: Env) -> None:
    env = wenv.build(
        **NO_CONTEXT,
        HAMI_DEVICE_MEMORY_LIMIT="128m", HAMI_VIRTUAL_MEMORY="1", HAMI_FAKE_CUDA_MEMORY_MIB="256"
    )
    with hog(drivers, wenv, 200):
        proc = spill(drivers, env, 5)
        try:
            f = read_until_ready(proc)
            assert [f[f"alloc{i}"] for i in range(1, 6)] == [OK, OK, OK, OK, OOM]
        finally:
            proc.kill()
            proc.wait()


INVENTORY = {"nodes": [{"name": "n", "devices": [{"vendor": "nvidia", "model": "T4", "count": 1}]}]}


def _device(ledger_path: Path, overcommit: float = 1.0) -> Device:
    config = parse_config({"device-plugin": {"memory-overcommit": overcommit, "virtual-memory-host-limit-mib": 0}})
    (dev,) = discover(parse_inventory(INVENTORY), ledger=SqliteLedger(ledger_path), config=config)
    return dev


@pytest.mark.parametrize("how", ["request", "overcommit"])
def test_allocation_spills_and_reports_it(drivers: Drivers, wenv: Env, tmp_path: Path, how: str) -> None:
    # A request part asking for virtual memory, or a device plugin that overcommits memory: the allocation's
    # region is virtual, and monitor and the exporter's reading show what it spilled.
    device = _device(tmp_path / "ledger.db", overcommit=2.0 if how == "overcommit" else 1.0)
    part: dict[str, object] = {"memory_mib": 128, "cores": 10}
    if how == "request":
        part["virtual-memory"] = True
    handle = device.allocate({"parts": [part]})
    env = {**wenv.build(**NO_CONTEXT, shim=None, HAMI_FAKE_CUDA_MEMORY_MIB="256"), **handle.env}
    with hog(drivers, wenv, 200):
        proc = spill(drivers, env, 4)
        try:
            f = read_until_ready(proc)
            assert [f[f"alloc{i}"] for i in range(1, 5)] == [OK, OK, OK, OK]
            (usage,) = device.monitor().allocations
            assert usage.memory_used_mib == 128 and usage.memory_spilled_mib == 96
            (reading,) = RegionReader().read([handle])
            assert reading.grants[device.uuid].memory_spilled_bytes == 96 * MIB
        finally:
            proc.kill()
            proc.wait()
    device.release(handle)


def test_a_plain_allocation_is_not_virtual(wenv: Env, tmp_path: Path) -> None:
    device = _device(tmp_path / "ledger.db")
    handle = device.allocate({"parts": [{"memory_mib": 128, "cores": 10}]})
    path = handle.region_for("n", "nvidia")
    assert path is not None
    with Region.open(path) as region:
        assert not region.device_usage()[0].virtual_memory
    (usage,) = device.monitor().allocations
    assert usage.memory_spilled_mib == 0
    device.release(handle)
