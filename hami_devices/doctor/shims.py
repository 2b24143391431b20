"""Limiter checks: each shim an adapter names is built, preloads cleanly without libpython, and
actually limits: a short workload under the preload is refused an allocation past a tiny limit.

The workload is the conformance suite's harness for the adapter's runtime (``hami_conformance``,
installed with hami-devices; a plugin's own harness from its ``conformance_profile``).  It runs
three times: without the shim past the limit (the runtime must grant it, or there is nothing to
prove here), under the shim within the limit (granted) and past it (the runtime's out-of-memory
error).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hami_devices import limiter
from hami_devices.adapter import VendorAdapter
from hami_devices.doctor.report import Check, failed, passed, warned
from hami_devices.errors import HamiError, LimiterError
from hami_devices.plugins import conformance_suite

LIMIT_MIB = 64
"""The probe region's memory limit: small enough that any device holds twice as much."""

EXIT_GRANTED, EXIT_OUT_OF_MEMORY = 0, 2  # the harness protocol (hami_conformance.WorkloadProgram)

_LIMIT_VARIABLES = (
    "LD_PRELOAD",
    "HAMI_REGION_PATH",
    "CUDA_DEVICE_MEMORY_SHARED_CACHE",
    "GPU_CORE_UTILIZATION_POLICY",  # HAMi-core's compute policy (default: share, force: cap, disable: none)
)
_LIMIT_PREFIXES = (
    "HAMI_DEVICE_MEMORY_LIMIT",
    "HAMI_DEVICE_CORE_LIMIT",
    "HAMI_DEVICE_CORE_POLICY",
    "CUDA_DEVICE_MEMORY_LIMIT",
    "CUDA_DEVICE_SM_LIMIT",
)


@dataclass(frozen=True)
class Harness:
    argv: tuple[str, ...]
    env: dict[str, str]
    timeout_s: float


def clean_environment() -> dict[str, str]:
    """This process's environment without any limiter setting it may have inherited."""
    return {k: v for k, v in os.environ.items() if k not in _LIMIT_VARIABLES and not k.startswith(_LIMIT_PREFIXES)}


def shim_checks(adapters: dict[str, VendorAdapter], *, probe: bool = True) -> list[Check]:
    checks: list[Check] = []
    by_shim: dict[str, list[VendorAdapter]] = {}
    for _, adapter in sorted(adapters.items()):
        if adapter.limiter_shim:
            by_shim.setdefault(adapter.limiter_shim, []).append(adapter)
    for shim, users in by_shim.items():
        label = Path(shim.partition(":")[2] or shim).name
        try:
            path = limiter.shim_library(shim)
        except LimiterError as exc:
            checks.append(
                failed(
                    f"limiter.{label}.built",
                    f"{str(exc).rstrip('.')} (used by {', '.join(a.name for a in users)})",
                    "reinstall the package that ships it where a C compiler is available "
                    "(pip install --force-reinstall hami-devices, or the plugin)",
                )
            )
            continue
        loaded = preload_check(label, path)
        checks.append(loaded)
        if probe and loaded.status is not loaded.status.FAIL:
            checks.append(effect_check(label, path, users[0]))
    return checks


def preload_check(label: str, path: Path) -> Check:
    """Preload the shim into a small non-Python program and read what the dynamic linker mapped."""
    id = f"limiter.{label}.load"
    reader = shutil.which("cat")
    if reader is None:
        return warned(id, f"{path} is built but cannot be tried here: no `cat` program", "install coreutils")
    env = {**clean_environment(), "LD_PRELOAD": str(path)}
    run = subprocess.run([reader, "/proc/self/maps"], env=env, capture_output=True, text=True, timeout=30, check=False)
    if "cannot be preloaded" in run.stderr or str(path) not in run.stdout:
        reason = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "the dynamic linker did not map it"
        return failed(
            id, f"{path} cannot be preloaded: {reason}", "reinstall hami-devices; check the file's architecture"
        )
    mapped = sorted({line.split()[-1] for line in run.stdout.splitlines() if len(line.split()) >= 6})
    python = [m for m in mapped if Path(m).name.startswith("libpython")]
    if python:
        return failed(
            id,
            f"{path.name} pulls in {Path(python[0]).name}: every workload it is preloaded into would load Python",
            "rebuild the shim without linking libpython (it must depend on libc, libdl and libpthread only)",
            mapped=mapped,
        )
    libraries = [Path(m).name for m in mapped if ".so" in Path(m).name and m != str(path)]
    return passed(id, f"{path} preloads cleanly (brings in {', '.join(libraries) or 'nothing more'})", path=str(path))


def harness_for(adapter: VendorAdapter) -> Harness | None:
    """The workload program that drives the adapter's runtime: its own, else the suite's for the built-in shims."""
    try:
        suite = conformance_suite()
    except HamiError:  # the suite's workloads are what drive a runtime here: without it, nothing to drive
        return None
    program = None
    hook = getattr(adapter, "conformance_profile", None)
    if callable(hook):
        profile = hook()
        if isinstance(profile, suite.Profile):
            program = profile.workload
    if program is None:
        program = suite.builtin_workload(adapter, hardware=True)
    if program is None:
        return None
    return Harness(tuple(program.argv), dict(program.env), program.timeout_s)


def effect_check(label: str, path: Path, adapter: VendorAdapter) -> Check:
    id = f"limiter.{label}.effective"
    harness = harness_for(adapter)
    if harness is None:
        return warned(
            id,
            f"no workload harness for {adapter.name}'s runtime, so the shim's effect cannot be shown",
            "give the adapter a conformance_profile() with a workload (see the plugin guide)",
        )
    with tempfile.TemporaryDirectory(prefix="hami-doctor-") as tmp:
        env = {**clean_environment(), **{k: v.replace("{tmp}", tmp) for k, v in harness.env.items()}}
        over, within = 2 * LIMIT_MIB, LIMIT_MIB // 2

        def alloc(mib: int, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*harness.argv, "alloc", str(mib)],
                env={**env, **extra},
                capture_output=True,
                text=True,
                timeout=harness.timeout_s,
                check=False,
            )

        control = alloc(over, {})
        if control.returncode != EXIT_GRANTED:
            return warned(
                id,
                f"{adapter.name}'s runtime is not usable here ({_last_line(control)}), so the shim's effect "
                "cannot be shown",
                "run doctor where the vendor runtime is installed; without a device, see the README's "
                "'Try the limiter without a GPU'",
                exit_status=control.returncode,
            )
        try:
            region = limiter.Region.create(Path(tmp) / "doctor.region", [limiter.DeviceLimit(LIMIT_MIB << 20, 0)])
        except LimiterError as exc:
            return failed(id, f"cannot make a limiter region: {exc}", "reinstall hami-devices (see sdk.native)")
        region.close()
        limited = {"LD_PRELOAD": str(path), "HAMI_REGION_PATH": str(region.path)}
        small, large = alloc(within, limited), alloc(over, limited)
    if small.returncode != EXIT_GRANTED:
        return failed(
            id,
            f"under the shim, {within} MiB within a {LIMIT_MIB} MiB limit was not granted ({_last_line(small)})",
            "the shim breaks this runtime: report it with the output of this probe",
            exit_status=small.returncode,
        )
    if large.returncode == EXIT_GRANTED:
        return failed(
            id,
            f"under the shim, {over} MiB past a {LIMIT_MIB} MiB limit was granted: the shim does not limit "
            f"{adapter.name}'s runtime",
            "check that the workload loads the runtime the shim intercepts (not a private copy) and that "
            "LD_PRELOAD reaches it",
        )
    if large.returncode != EXIT_OUT_OF_MEMORY:
        return failed(
            id,
            f"under the shim, {over} MiB past the limit failed, but not with the runtime's out-of-memory "
            f"error ({_last_line(large)})",
            "the shim must return the runtime's own out-of-memory code",
            exit_status=large.returncode,
        )
    return passed(
        id,
        f"{over} MiB past a {LIMIT_MIB} MiB limit refused with the runtime's out-of-memory error; {within} MiB "
        f"granted; without the shim {over} MiB is granted",
    )


def _last_line(run: subprocess.CompletedProcess[str]) -> str:
    text = (run.stderr.strip() or run.stdout.strip()).splitlines()
    return f"exit {run.returncode}: {text[-1]}" if text else f"exit {run.returncode}"
