"""Helpers shared by the limiter tests (processes, environments, output parsing)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hami_devices import limiter
from hami_devices.errors import LimiterError

PROGS = Path(__file__).resolve().parent / "progs"
REPO = Path(__file__).resolve().parents[2]
INCLUDE = REPO / "native" / "include"


FAKE_CONTEXT_MIB = 518
"""What the fake libcuda takes for a process's first context on a device (HAMI_FAKE_CONTEXT_MIB's default):
measured on an H200, driver 580.159.04, CUDA 13.0, PyTorch 2.11, 3,518 MiB in NVML for a 3,000 MiB tensor."""

NO_CONTEXT = {"HAMI_FAKE_CONTEXT_MIB": "0"}
"""For tests that hold the fake driver's count of bytes to a share's limit: a context is outside every share (the
limiter never sees it, and tests/limiter/test_context_memory.py checks it), so these count allocations alone."""


def need(path_fn: object, name: str) -> Path:
    """A built library, or a clear test failure naming the build step."""
    try:
        return path_fn(name)  # type: ignore[operator,no-any-return]
    except LimiterError as exc:
        pytest.fail(f"{exc} (build with `pip install -e .` or `python native/build_native.py`)")


@dataclass
class Env:
    """The environment of one test's workload processes."""

    tmp: Path
    fakes: Path
    state: Path
    region: Path
    vars: dict[str, str] = field(default_factory=dict)

    def build(self, shim: str | None = "libhami_cuda.so", *, hooks: bool = False, **extra: str) -> dict[str, str]:
        """``hooks``: preload the test build of the shim (``hook_shim``) instead of the shipped one."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HAMI_", "CUDA_DEVICE_"))}
        env.pop("LD_PRELOAD", None)
        env["LD_LIBRARY_PATH"] = str(self.fakes)
        env["HAMI_FAKE_GPU_STATE"] = str(self.state)
        # The fakes read CUDA_VISIBLE_DEVICES & co. as the real runtimes do, and an allocation of a simulated
        # inventory names UUIDs this fake host does not have: show every fake device, as the host's own list.
        # (Tests of the real variables set HAMI_FAKE_VISIBLE_DEVICES="" in ``vars`` or ``extra``.)
        env["HAMI_FAKE_VISIBLE_DEVICES"] = "all"
        env.update(self.vars)
        if shim:
            env["LD_PRELOAD"] = str(hook_shim(shim) if hooks else need(limiter.shim_library, shim))
        env.update(extra)
        return env


def hook_shim(name: str) -> Path:
    """The test build of a shim (native/testhooks): the shipped sources plus the fake-state utilization
    source, which the compute tests measure against.  Never what an allocation preloads."""
    return need(limiter.fake_library, f"hooks/{name}")


def run(cmd: list[str | Path], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=timeout)


def fields(output: str) -> dict[str, str]:
    """'name rc=2' lines -> {'name': '2'}; 'key value' lines -> {'key': 'value'}."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        head, _, rest = line.partition(" ")
        found[head] = rest.removeprefix("rc=")
    return found


def python_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.pop("LD_PRELOAD", None)
    return env


PYTHON = sys.executable
