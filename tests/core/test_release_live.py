"""Releasing an allocation whose workload still runs is an explicit act: refused with the live pids named,
or forced, which revokes the limiter region so the workload can allocate no more -- real workload processes
under the allocation's environment (fake libcuda, the shipped CUDA shim), the CLI run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_devices import discover
from hami_devices.device import Device
from hami_devices.errors import AllocationInUse
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import EventKind, SqliteLedger
from hami_devices.lifecycle import collect_garbage
from hami_devices.models import DeviceHandle
from tests.limiter.conftest import Drivers, drivers, wenv
from tests.limiter.helpers import Env

__all__ = ["drivers", "wenv"]

CLI = [sys.executable, "-m", "hami_devices.cli.main"]
SESSION = Path(__file__).with_name("cuda_session.py")
INVENTORY = {"nodes": [{"name": "n", "devices": [{"vendor": "nvidia", "model": "T4", "count": 1}]}]}


class Session:
    """A running workload process that allocates when asked."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, str(SESSION)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.readline() == "READY"

    def readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def alloc(self, mib: int) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{mib}\n")
        self.proc.stdin.flush()
        return int(self.readline().removeprefix("rc="))

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def device(ledger_path: Path) -> Iterator[Device]:
    ledger = SqliteLedger(ledger_path)
    (dev,) = discover(parse_inventory(INVENTORY), ledger=ledger)
    yield dev
    ledger.close()


def workload_env(wenv: Env, handle: DeviceHandle) -> dict[str, str]:
    return {**wenv.build(shim=None), **handle.env}


@pytest.fixture
def running(drivers: Drivers, wenv: Env, device: Device) -> Iterator[tuple[DeviceHandle, Session]]:
    handle = device.allocate({"parts": [{"memory_mib": 64, "cores": 30}]})
    session = Session(workload_env(wenv, handle))
    assert session.alloc(16) == 0
    yield handle, session
    session.stop()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=dict(os.environ), timeout=120)


def test_release_refuses_while_a_process_uses_the_allocation_and_names_it(
    running: tuple[DeviceHandle, Session], device: Device, ledger_path: Path
) -> None:
    handle, session = running
    done = cli("release", handle.id, "--ledger", str(ledger_path))
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()  # one clean line, no traceback
    assert "AllocationInUse" in line and str(session.proc.pid) in line and "--force" in line
    with pytest.raises(AllocationInUse) as refused:
        device.release(handle)
    assert refused.value.pids == [str(session.proc.pid)]
    report = collect_garbage(device.ledger, {"nvidia": device.adapter}, grace_s=0)
    assert report.actions == [] and (handle.id, f"1 live process(es): {session.proc.pid}") in report.kept
    assert device.ledger.get(handle.id).id == handle.id  # nothing was released
    assert session.alloc(16) == 0  # and the workload keeps its limits


@pytest.mark.parametrize("how", ["cli", "api"])
def test_a_forced_release_revokes_the_region_and_records_it(
    how: str, running: tuple[DeviceHandle, Session], device: Device, ledger_path: Path, wenv: Env
) -> None:
    handle, session = running
    if how == "cli":
        done = cli("release", handle.id, "--force", "--ledger", str(ledger_path))
        assert done.returncode == 0, done.stderr
        assert f"revoked: process(es) {session.proc.pid}" in done.stdout
    else:
        device.release(handle, force=True)
    assert session.alloc(1) == 2  # CUDA_ERROR_OUT_OF_MEMORY from its limiter: it can allocate no more
    kinds = [e.kind for e in device.ledger.events(allocation_id=handle.id)]
    assert kinds == [EventKind.GRANTED, EventKind.REVOKED, EventKind.RELEASED]
    (revoked,) = device.ledger.events(allocation_id=handle.id, kinds=[EventKind.REVOKED])
    assert revoked.data["processes"] == [str(session.proc.pid)]
    # The region file stays for the workload: a process it starts now is refused as well ...
    (region,) = handle.regions.values()
    assert Path(region).exists()
    late = subprocess.run([sys.executable, "-m", "hami_conformance.workloads.cuda", "alloc", "1"],
                          env=workload_env(wenv, handle), capture_output=True, text=True, timeout=60)
    assert late.returncode == 2, late.stdout + late.stderr
    # ... what it holds stays booked as its own allocation, which gc releases (and the region with it) once the
    # workload is gone.
    assert device.ledger.get(f"revoked-{handle.id}").regions == handle.regions
    session.stop()
    then = time.time() - 3600
    os.utime(region, (then, then))
    report = collect_garbage(device.ledger, {"nvidia": device.adapter}, grace_s=0)
    assert [(a.kind, a.target, a.done) for a in report.actions] == [("release", f"revoked-{handle.id}", True)]
    assert not Path(region).exists()


def test_a_release_with_no_live_process_needs_no_force(
    drivers: Drivers, wenv: Env, device: Device, ledger_path: Path
) -> None:
    handle = device.allocate({"parts": [{"memory_mib": 64, "cores": 30}]})
    session = Session(workload_env(wenv, handle))
    session.stop()
    done = cli("release", handle.id, "--ledger", str(ledger_path))
    assert done.returncode == 0, done.stderr
    assert "revoked" not in done.stdout
    assert all(not Path(p).exists() for p in handle.regions.values())
