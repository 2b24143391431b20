"""``hami-devices allocations [gc]``: live allocations with their processes and usage, and cleaning up after
workloads that died -- real workload processes under the allocation's environment, the CLI run as a user
runs it (one process per call), one durable ledger."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hami_devices import discover, limiter
from hami_devices.device import Device
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import SqliteLedger
from hami_devices.lifecycle import collect_garbage, list_allocations
from hami_devices.limiter import DeviceLimit, Region
from hami_devices.models import DeviceHandle
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import Env

MIB = 1 << 20
CLI = [sys.executable, "-m", "hami_devices.cli.main"]
INVENTORY = {"nodes": [{"name": "n", "devices": [{"vendor": "nvidia", "model": "T4", "count": 1}]}]}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([*CLI, *args], capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    return out


def cli_json(*args: str) -> Any:
    return json.loads(cli(*args, "--json").stdout)


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def device(ledger_path: Path) -> Iterator[Device]:
    ledger = SqliteLedger(ledger_path)
    (dev,) = discover(parse_inventory(INVENTORY), ledger=ledger)
    yield dev
    ledger.close()


def holder(drivers: Drivers, wenv: Env, handle: DeviceHandle, mib: int) -> subprocess.Popen[str]:
    env = {**wenv.build(shim=None), **handle.env}
    proc = subprocess.Popen([str(drivers.cuda), "hold", str(mib * MIB)], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "READY rc=0"
    return proc


def test_allocations_lists_age_processes_and_usage(
    drivers: Drivers, wenv: Env, device: Device, ledger_path: Path
) -> None:
    busy = device.allocate({"name": "trainer", "parts": [{"memory_mib": 64, "cores": 30}]})
    quiet = device.allocate({"parts": [{"memory_mib": 32, "cores": 20}]})
    proc = holder(drivers, wenv, busy, 24)
    try:
        rows = {a["id"]: a for a in cli_json("allocations", "--ledger", str(ledger_path))["allocations"]}
        assert set(rows) == {busy.id, quiet.id}
        row = rows[busy.id]
        assert row["name"] == "trainer" and row["state"] == "running" and 0 <= row["age_s"] < 60
        assert [(p["pid"], p["alive"], p["memory_used_mib"]) for p in row["processes"]] == [
            (proc.pid, True, {device.uuid: 24.0})
        ]
        assert [(u["uuid"], u["memory_used_mib"], u["memory_limit_mib"], u["core_limit"]) for u in row["usage"]] == [
            (device.uuid, 24.0, 64.0, 30)
        ]
        assert rows[quiet.id]["state"] == "idle" and rows[quiet.id]["processes"] == []
        table = cli("allocations", "--ledger", str(ledger_path)).stdout
        assert busy.id in table and "trainer" in table and "running" in table and "24/64" in table
    finally:
        proc.kill()
        proc.wait()
    # Gone: the process is reported dead and holds nothing.
    (row,) = [a for a in cli_json("allocations", "--ledger", str(ledger_path))["allocations"] if a["id"] == busy.id]
    assert row["state"] == "idle" and row["usage"][0]["memory_used_mib"] == 0


def _stray_region(folder: Path, name: str, age_s: float) -> Path:
    path = folder / name
    Region.create(path, [DeviceLimit(MIB, 0)]).close()
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_gc_releases_allocations_whose_workloads_died_and_removes_orphans(
    drivers: Drivers, wenv: Env, device: Device, ledger_path: Path
) -> None:
    running = device.allocate({"parts": [{"memory_mib": 32, "cores": 10}]})
    ended = device.allocate({"parts": [{"memory_mib": 32, "cores": 10}]})
    unused = device.allocate({"parts": [{"memory_mib": 32, "cores": 10}]})
    live = holder(drivers, wenv, running, 8)
    dead = holder(drivers, wenv, ended, 8)
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    folder = limiter.region_dir()
    orphan = _stray_region(folder, "gone-nvidia.region", 3600)
    leftover = folder / "x.region.tmp.1.0"
    leftover.write_bytes(b"partial")
    os.utime(leftover, (time.time() - 3600, time.time() - 3600))
    fresh = _stray_region(folder, "just-made-nvidia.region", 0)  # an allocation being committed right now
    in_use = _stray_region(folder, "other-ledger-nvidia.region", 0)
    elsewhere = running.model_copy(
        update={"environments": {k: {**v, "HAMI_REGION_PATH": str(in_use)} for k, v in running.environments.items()}}
    )
    other = holder(drivers, wenv, elsewhere, 1)  # a workload of an allocation this ledger does not know
    os.utime(in_use, (time.time() - 3600, time.time() - 3600))
    ledger = ["--ledger", str(ledger_path)]
    try:
        # Within the grace period nothing is released, whatever its processes.
        report = cli_json("allocations", *ledger, "gc", "--grace", "3600")
        assert [a["kind"] for a in report["actions"]] == ["remove-region", "remove-region"]
        kept = {k["target"]: k["reason"] for k in report["kept"]}
        assert "live process" in kept[running.id]
        assert "younger than the grace period" in kept[ended.id] and "younger" in kept[unused.id]
        assert "live process(es) use it" in kept[str(in_use)]
        assert not orphan.exists() and not leftover.exists() and fresh.exists() and in_use.exists()
        # A dry run says what it would do and does nothing.  (The region "being committed right now" is
        # made again: a loaded host can take past ORPHAN_MIN_AGE_S over the CLI runs above.)
        os.utime(fresh)
        report = cli_json("allocations", *ledger, "gc", "--grace", "0", "--dry-run")
        assert {(a["kind"], a["target"], a["done"]) for a in report["actions"]} == {
            ("release", ended.id, False),
            ("release", unused.id, False),
        }
        assert len(cli_json("allocations", *ledger)["allocations"]) == 3
        # For real: the two without a live workload go, regions and all; the running one stays.
        text = cli("allocations", *ledger, "gc", "--grace", "0").stdout
        assert f"release {ended.id}: no live workload process" in text
        assert f"release {unused.id}: no live workload process" in text and "-- done" in text
        assert [a["id"] for a in cli_json("allocations", *ledger)["allocations"]] == [running.id]
        assert not Path(ended.region_for("n", "nvidia") or "").exists()
        assert not Path(unused.region_for("n", "nvidia") or "").exists()
        assert Path(running.region_for("n", "nvidia") or "").exists()
    finally:
        for proc in (live, other):
            proc.kill()
            proc.wait()


def test_gc_logs_each_action(drivers: Drivers, wenv: Env, device: Device, caplog: pytest.LogCaptureFixture) -> None:
    handle = device.allocate({"parts": [{"memory_mib": 16, "cores": 10}]})
    now = time.time() + 7200  # two hours on: past the default grace period
    assert [s.state for s in list_allocations(device.ledger, now=now)] == ["idle"]
    with caplog.at_level(logging.INFO, logger="hami_devices.lifecycle"):
        report = collect_garbage(device.ledger, {"nvidia": device.adapter}, grace_s=600, now=now)
    assert [(a.kind, a.target, a.done) for a in report.actions] == [("release", handle.id, True)]
    assert any(r.name == "hami_devices.lifecycle" and handle.id in r.getMessage() for r in caplog.records)
    assert device.monitor().allocations == []


def test_gc_refuses_a_negative_grace(ledger_path: Path) -> None:
    cmd = [*CLI, "allocations", "--ledger", str(ledger_path), "gc", "--grace", "-1"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 2 and "--grace" in out.stderr
