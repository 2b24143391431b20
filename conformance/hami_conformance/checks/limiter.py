"""The limiter, where declared: enforced inside a real workload process.

The suite cannot know how to drive every vendor runtime, so the adapter says
how through ``conformance_profile().workload`` (a :class:`WorkloadProgram`); the
suite ships one for the built-in runtimes.  Without one a declared memory-limit
or compute-limit cannot be proven, and its checks fail; they never pass on faith.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence

from hami_conformance.bench import Bench, CheckFailed, ConfiguredOff, NotApplicable, capacity, expect, share
from hami_conformance.builtin import TMP
from hami_conformance.checks import check
from hami_conformance.profile import WorkloadProgram
from hami_devices.models import DeviceHandle

NO_HARNESS = "limiter runtime harness not provided by adapter (conformance_profile().workload is not set)"
EXIT_OK = 0
EXIT_OOM = 2
COMPUTE_SECONDS = 2.0


def _workload(bench: Bench, *, compute: bool = False) -> WorkloadProgram:
    level = bench.adapter.config.device_plugin.isolation_level
    if level == "none":
        raise ConfiguredOff("the configuration sets isolation-level 'none': the limiter is off")
    if compute and level != "hard":
        raise ConfiguredOff("the configuration does not set isolation-level 'hard': compute is not limited")
    program = bench.target.profile.workload
    if program is None:
        raise NotApplicable(NO_HARNESS)
    if compute and not program.compute:
        raise NotApplicable("the adapter's workload program does not implement the 'compute' operation")
    return program


def _run(program: WorkloadProgram, handle: DeviceHandle, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="hami-conformance-workload-") as tmp:
        return _run_in(program, handle, args, tmp)


def _run_in(
    program: WorkloadProgram, handle: DeviceHandle, args: Sequence[str], tmp: str
) -> subprocess.CompletedProcess[str]:
    extra = {key: value.replace(TMP, tmp) for key, value in program.env.items()}
    env = {**os.environ, **handle.env, **extra}
    if extra.get("LD_PRELOAD") and handle.env.get("LD_PRELOAD"):
        env["LD_PRELOAD"] = f"{handle.env['LD_PRELOAD']}:{extra['LD_PRELOAD']}"
    argv = [*program.argv, *args]
    try:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=program.timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"workload {argv} ran past {program.timeout_s} s") from exc
    except OSError as exc:
        raise CheckFailed(f"cannot start workload {argv}: {exc}") from exc


def _describe(result: subprocess.CompletedProcess[str]) -> str:
    tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
    return f"exit {result.returncode}" + (f" ({' | '.join(tail)})" if tail else "")


@check("limiter.memory-enforced")
def memory_enforced(bench: Bench) -> None:
    program = _workload(bench)
    device = bench.device()
    asked_mib = max(2, min(1024, capacity(device).memory_mib // 4))
    handle = bench.allocate_on(device, share(asked_mib, 0))
    # The limit is what was granted, which a partitioning adapter may round up
    # (an Ascend vNPU template, a Cambricon sMLU profile).
    grant_mib = sum(g.memory_mib for g in handle.grants if g.uuid == device.uuid) or asked_mib
    within = _run(program, handle, ["alloc", str(grant_mib // 2)])
    expect(
        within.returncode == EXIT_OK,
        f"allocating {grant_mib // 2} MiB of a {grant_mib} MiB grant failed: {_describe(within)}",
    )
    over = _run(program, handle, ["alloc", str(grant_mib + grant_mib // 2)])
    expect(
        over.returncode == EXIT_OOM,
        f"allocating {grant_mib + grant_mib // 2} MiB of a {grant_mib} MiB grant: {_describe(over)}, "
        f"expected the runtime's out-of-memory error (exit {EXIT_OOM})",
    )


@check("limiter.compute-share")
def compute_share(bench: Bench) -> None:
    program = _workload(bench, compute=True)
    device = bench.device()
    cores = 30
    handle = bench.allocate_on(device, share(64, cores))
    result = _run(program, handle, ["compute", str(COMPUTE_SECONDS)])
    expect(result.returncode == EXIT_OK, f"the compute workload failed: {_describe(result)}")
    try:
        line = [ln for ln in result.stdout.splitlines() if ln.strip().startswith("{")][-1]
        utilization = float(json.loads(line)["utilization_pct"])
    except (IndexError, KeyError, ValueError, TypeError) as exc:
        raise CheckFailed(
            f"the compute workload printed no utilization_pct JSON line: {result.stdout[-300:]!r}"
        ) from exc
    tolerance = max(10.0, cores * 0.25)
    expect(
        abs(utilization - cores) <= tolerance,
        f"a {cores}% grant ran at {utilization:.1f}% of the device (allowed {cores} +/- {tolerance:.0f})",
    )
