"""Compute limits: launch loops under the CUDA shim reach their share of the fake device's timeline.

Fake kernels occupy a virtual device timeline (hami_fake_gpu.h), so utilization is measured
independently of the shim: busy nanoseconds the fake device accumulated over a wall-clock window.
Windows are 2 s here to keep the suite short; bench/limiter.py measures the formal 5 s windows.

What a loaded machine may change is kept out of the measurement, not allowed for in the tolerance.
A launcher's kernels queue on the device as on a real one (up to 50 ms ahead), so a launcher that
waits for a CPU does not idle the device; the window opens once every launcher's kernels have reached
the device and closes before any launcher is told to stop (they run until SIGTERM); and each reading
is taken with the time it was read to within 5 ms.
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from hami_devices.errors import LimiterError
from hami_devices.limiter import DeviceLimit, FakeDeviceSnapshot, Region, fake_gpu_snapshot
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import Env

WARMUP_S = 1.0
WINDOW_S = 2.0
TOLERANCE = 5.0
UNTIL_STOPPED = "0"  # a driver's SECS for "until SIGTERM" (tests/limiter/progs/launch_loop.h)
STARTUP_S = 120.0  # how long a loaded machine may take to start a launcher


@dataclass
class Load:
    proc: subprocess.Popen[str]
    state: Path
    devices: int = 1


def launcher(cmd: list[str], env: dict[str, str], devices: int = 1) -> Load:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return Load(proc, Path(env["HAMI_FAKE_GPU_STATE"]), devices)


def start(drivers: Drivers, env: dict[str, str], kind: str, kernel_us: int, devices: str = "0") -> Load:
    cmd = [str(drivers.cuda), "launch", kind, str(kernel_us), UNTIL_STOPPED, devices]
    return launcher(cmd, env, devices.count(",") + 1)


def timed_snapshot(state: Path) -> tuple[list[FakeDeviceSnapshot], float]:
    """The fake state and the time it was read, to within 5 ms however this process is scheduled."""
    while True:
        t0 = time.monotonic()
        snapshot = fake_gpu_snapshot(state)
        t1 = time.monotonic()
        if t1 - t0 < 0.005:
            return snapshot, (t0 + t1) / 2


def launched(load: Load) -> bool:
    """Whether this launcher's kernels have reached each of its devices."""
    try:
        devices = fake_gpu_snapshot(load.state)[: load.devices]
    except (FileNotFoundError, LimiterError):  # the fake creates its state at its first call
        return False
    return len(devices) == load.devices and all(d.process_busy_ns.get(load.proc.pid, 0) > 0 for d in devices)


def wait_until_launching(loads: list[Load]) -> None:
    deadline = time.monotonic() + STARTUP_S
    for load in loads:
        while not launched(load):
            assert load.proc.poll() is None, load.proc.communicate()
            assert time.monotonic() < deadline, f"launcher {load.proc.args} not launching after {STARTUP_S} s"
            time.sleep(0.01)


def stop(loads: list[Load]) -> None:
    for load in loads:
        load.proc.send_signal(signal.SIGTERM)
    for load in loads:
        _, err = load.proc.communicate(timeout=60)
        assert load.proc.returncode == 0, err


def busy(state: Path) -> tuple[list[int], float]:
    snapshot, at = timed_snapshot(state)
    return [d.busy_ns for d in snapshot], at


def utilization(loads: list[Load]) -> list[list[float]]:
    """Percent busy per load and device over the same window, after the warm-up."""
    wait_until_launching(loads)
    time.sleep(WARMUP_S)
    before = [busy(load.state) for load in loads]
    time.sleep(WINDOW_S)
    after = [busy(load.state) for load in loads]
    stop(loads)
    return [
        [(a - b) / (t1 - t0) / 1e7 for a, b in zip(x, y, strict=True)]
        for (x, t1), (y, t0) in zip(after, before, strict=True)
    ]


def env_for(wenv: Env, name: str, **extra: str) -> dict[str, str]:
    # The test build of the shim: it can read device time from the fake state (the shipped one reads NVML,
    # which test_compute_nvml.py covers).
    return wenv.build(hooks=True, HAMI_FAKE_GPU_STATE=str(wenv.tmp / f"{name}.state"), **extra)


def test_limits_10_30_50_80_hold(drivers: Drivers, wenv: Env) -> None:
    targets = [10, 30, 50, 80]
    loads = [
        start(
            drivers,
            env_for(wenv, f"t{t}", HAMI_DEVICE_CORE_LIMIT=str(t), HAMI_REGION_PATH=str(wenv.tmp / f"{t}.r")),
            "kernel",
            2000,
        )
        for t in targets
    ]
    measured = [u[0] for u in utilization(loads)]
    for target, got in zip(targets, measured, strict=True):
        assert abs(got - target) <= TOLERANCE, f"target {target}%: measured {got:.1f}%"


def test_unlimited_loop_saturates_the_device(drivers: Drivers, wenv: Env) -> None:
    # The control for the test above: without a limit the same loop keeps the device busy.
    (got,) = utilization([start(drivers, env_for(wenv, "free"), "kernel", 2000)])
    assert got[0] > 95


def test_two_devices_hold_their_own_limits(drivers: Drivers, wenv: Env) -> None:
    env = env_for(
        wenv,
        "two",
        HAMI_FAKE_CUDA_DEVICES="2",
        HAMI_DEVICE_CORE_LIMIT_0="30",
        HAMI_DEVICE_CORE_LIMIT_1="70",
        HAMI_REGION_PATH=str(wenv.region),
    )
    (got,) = utilization([start(drivers, env, "kernel", 1000, "0,1")])
    assert abs(got[0] - 30) <= TOLERANCE and abs(got[1] - 70) <= TOLERANCE, got
    with Region.open(wenv.region) as region:
        reported = [u.utilization_pct for u in region.device_usage()[:2]]
    assert all(r is not None for r in reported), reported  # the throttle publishes what it measured


def test_graph_cooperative_and_ex_launches_are_throttled(drivers: Drivers, wenv: Env) -> None:
    kinds = ["graph", "coop", "ex"]
    loads = [
        start(
            drivers, env_for(wenv, k, HAMI_DEVICE_CORE_LIMIT="40", HAMI_REGION_PATH=str(wenv.tmp / f"{k}.r")), k, 1000
        )
        for k in kinds
    ]
    for kind, got in zip(kinds, utilization(loads), strict=True):
        assert abs(got[0] - 40) <= TOLERANCE, f"{kind}: {got[0]:.1f}%"


def allocation_busy(state: Path, pids: list[int]) -> tuple[int, float]:
    snapshot, at = timed_snapshot(state)
    return sum(snapshot[0].process_busy_ns.get(pid, 0) for pid in pids), at


def test_processes_of_one_allocation_share_its_limit(drivers: Drivers, wenv: Env) -> None:
    # The allocation's share is the device time its processes' kernels ran (what NVML reports per process).
    # Three processes of it time-slice with each other, so the device is busy longer than that: the
    # switches between them are not time any kernel ran (hami_fake_timeline.h).  Started at once, their first
    # timings are stretched by each other and corrected over the first second or so (by new timings and by
    # the reading), during which the allocation may run over its share: the window opens after that.
    Region.create(wenv.region, [DeviceLimit(0, 45)]).close()
    env = env_for(wenv, "shared", HAMI_REGION_PATH=str(wenv.region))
    loads = [start(drivers, env, "kernel", 1000) for _ in range(3)]
    pids = [load.proc.pid for load in loads]
    wait_until_launching(loads)
    time.sleep(2 * WARMUP_S)
    before, t0 = allocation_busy(loads[0].state, pids)
    time.sleep(WINDOW_S)
    after, t1 = allocation_busy(loads[0].state, pids)
    stop(loads)
    got = (after - before) / (t1 - t0) / 1e7
    assert abs(got - 45) <= TOLERANCE, got


def test_limit_changed_while_running(drivers: Drivers, wenv: Env) -> None:
    Region.create(wenv.region, [DeviceLimit(0, 80)]).close()
    env = env_for(wenv, "change", HAMI_REGION_PATH=str(wenv.region))
    load = start(drivers, env, "kernel", 1000)
    wait_until_launching([load])
    time.sleep(0.8)
    with Region.open(wenv.region) as region:
        region.set_limit(0, DeviceLimit(0, 20))
    (got,) = utilization([load])
    assert abs(got[0] - 20) <= TOLERANCE, got
