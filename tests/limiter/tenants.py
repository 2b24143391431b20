"""Compute tenants on the calibrated fake driver: real processes (progs/compute_load.c) with the shipped CUDA
shim and the fake libnvidia-ml, as a workload runs on an NVIDIA host, and what the fake device says they got.

Shared by tests/limiter/test_compute_shares.py and bench/compute_share.py.  Throughput is read from the fake
device, not from the tenants: the device time each process's kernels ran over one window (each kind's work
per unit is fixed, so device time is throughput).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from hami_devices.limiter import DeviceLimit, Region, fake_gpu_snapshot, fake_library, shim_library

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Tenant:
    kind: str
    limit: int = 0  # 0: no limit
    policy: str = "cap"
    shim: bool = True


@dataclass
class Running:
    tenant: Tenant
    proc: subprocess.Popen[str]


class Tenants:
    """Runs cases of tenants, each case on a fresh fake device in ``tmp``."""

    def __init__(self, tmp: Path, warmup_s: float, window_s: float) -> None:
        self.tmp = tmp
        self.warmup_s = warmup_s
        self.window_s = window_s
        self.load = self._build()
        self.fakes = fake_library("libcuda.so.1").parent
        self.nvml = fake_library("nvml/libnvidia-ml.so.1").parent
        self.case = 0

    def _build(self) -> Path:
        cc = shutil.which(os.environ.get("CC", "cc")) or "gcc"
        exe = self.tmp / "compute_load"
        subprocess.run(
            [
                cc,
                "-O2",
                f"-I{REPO / 'native' / 'include'}",
                str(REPO / "tests/limiter/progs/compute_load.c"),
                str(fake_library("libcuda.so.1")),
                "-o",
                str(exe),
            ],
            check=True,
        )
        return exe

    def _env(self, state: Path, tenant: Tenant, index: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HAMI_", "CUDA_DEVICE_", "GPU_CORE"))}
        env.pop("LD_PRELOAD", None)
        env["LD_LIBRARY_PATH"] = f"{self.nvml}:{self.fakes}"
        env["HAMI_FAKE_GPU_STATE"] = str(state)
        if tenant.shim:
            env["LD_PRELOAD"] = str(shim_library("libhami_cuda.so"))
            region = self.tmp / f"case{self.case}-{index}.region"
            Region.create(region, [DeviceLimit(0, tenant.limit, core_policy=tenant.policy)]).close()
            env["HAMI_REGION_PATH"] = str(region)
        return env

    def start(self, state: Path, tenants: list[Tenant], first: int = 0) -> list[Running]:
        running = []
        for i, tenant in enumerate(tenants, start=first):
            proc = subprocess.Popen(
                [str(self.load), tenant.kind, "0"],
                env=self._env(state, tenant, i),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            running.append(Running(tenant, proc))
        return running

    def wait_started(self, state: Path, running: list[Running]) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if state.exists():
                busy = fake_gpu_snapshot(state)[0].process_busy_ns
                if all(busy.get(r.proc.pid, 0) > 0 for r in running):
                    return
            for r in running:
                if r.proc.poll() is not None:
                    raise RuntimeError(f"{r.tenant} ended: {r.proc.communicate()}")
            time.sleep(0.02)
        raise RuntimeError("tenants did not start launching within 60 s")

    @staticmethod
    def stop(running: list[Running]) -> None:
        for r in running:
            r.proc.send_signal(signal.SIGTERM)
        for r in running:
            r.proc.communicate(timeout=60)

    @staticmethod
    def reading(state: Path) -> tuple[dict[int, int], int, int]:
        device = fake_gpu_snapshot(state)[0]
        return dict(device.process_busy_ns), device.busy_ns, device.advanced_ns

    def window(self, state: Path, running: list[Running], seconds: float) -> tuple[list[float], float]:
        """Percent of the window each tenant's kernels ran, and the device's busy percent."""
        b0, d0, t0 = self.reading(state)
        time.sleep(seconds)
        b1, d1, t1 = self.reading(state)
        span = max(1, t1 - t0)
        shares = [100.0 * (b1.get(r.proc.pid, 0) - b0.get(r.proc.pid, 0)) / span for r in running]
        return shares, 100.0 * (d1 - d0) / span

    def measure(self, tenants: list[Tenant]) -> tuple[list[float], float]:
        self.case += 1
        state = self.tmp / f"case{self.case}.state"
        running = self.start(state, tenants)
        try:
            self.wait_started(state, running)
            time.sleep(self.warmup_s)
            return self.window(state, running, self.window_s)
        finally:
            self.stop(running)

    def share_arrival(self, first_share: int, second_share: int, within: float = 5.0) -> dict[str, float | None]:
        """A big-kernel tenant with a share of first_share % runs alone (its percent of the device), then a
        busy second tenant of second_share % arrives: the seconds until both are within ``within`` points of
        their shares in 300 ms windows (None: not within 5 s), and their percents over one window after."""
        self.case += 1
        state = self.tmp / f"case{self.case}.state"
        first = self.start(state, [Tenant("big", first_share, "share")])
        second: list[Running] = []
        try:
            self.wait_started(state, first)
            time.sleep(self.warmup_s)
            (alone,), _ = self.window(state, first, self.window_s)
            second = self.start(state, [Tenant("big", second_share, "share")], first=1)
            arrived = time.monotonic()
            self.wait_started(state, first + second)
            settled: float | None = None
            while time.monotonic() - arrived < 5.0:
                (a, b), _ = self.window(state, first + second, 0.3)
                held = abs(a - first_share) <= within and abs(b - second_share) <= within
                settled = (settled or time.monotonic() - arrived) if held else None
                if settled is not None and time.monotonic() - arrived - settled > 1.0:
                    break
            (a, b), _ = self.window(state, first + second, self.window_s)
            return {"alone_pct": alone, "settle_s": settled, "first_pct": a, "second_pct": b}
        finally:
            self.stop(first + second)

    def launch_ns(self, shim: bool, seconds: float) -> float:
        self.case += 1
        state = self.tmp / f"case{self.case}.state"
        tenant = Tenant("us:1", 0, "cap", shim)
        proc = subprocess.run(
            [str(self.load), tenant.kind, str(seconds)],
            env=self._env(state, tenant, 0),
            capture_output=True,
            text=True,
            check=True,
        )
        launches = int(proc.stdout.split()[1])
        return seconds * 1e9 / max(1, launches)
