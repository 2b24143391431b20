"""The durable ledger: no over-allocation across processes, nothing lost when the manager dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hami_devices import discover
from hami_devices.config import parse_config
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import SqliteLedger

from .ledger_worker import INVENTORY

WORKER = Path(__file__).with_name("ledger_worker.py")
T4_MIB = 15_360


def _worker(ledger: Path, attempts: int, memory: int, pause: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(WORKER.parent)}
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(ledger), str(attempts), str(memory), str(pause)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_two_processes_never_over_allocate(tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger.db"
    memory = 1_000  # 2 T4s x 15 grants each fit; 2 x 20 attempts compete for 30 slots
    workers = [_worker(ledger_path, 20, memory, 0.0) for _ in range(2)]
    outputs = [w.communicate(timeout=120)[0] for w in workers]
    assert all(w.returncode == 0 for w in workers)
    granted = sum(out.count("granted") for out in outputs)
    assert granted == 2 * (T4_MIB // memory)
    ledger = SqliteLedger(ledger_path)
    config = parse_config({"device-plugin": {"isolation-level": "none"}})
    devices = discover(parse_inventory(INVENTORY), ledger=ledger, config=config)
    for device in devices:
        assert device.usage().memory_mib <= device.info.memory_mib
    assert len(ledger.handles()) == granted
    ledger.close()


def test_killed_manager_loses_no_allocation(tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger.db"
    worker = _worker(ledger_path, 1_000, 10, 0.005)
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "ready"
    granted: list[str] = []
    deadline = time.monotonic() + 30
    while len(granted) < 25 and time.monotonic() < deadline:
        line = worker.stdout.readline().split()
        if line and line[0] == "granted":
            granted.append(line[1])
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    # Anything printed before the kill was committed first; the restarted ledger must still have it.
    restarted = SqliteLedger(ledger_path)
    live = {h.id for h in restarted.handles()}
    assert set(granted) <= live
    for handle in restarted.handles():
        assert handle.grants, "a handle without grants means a torn write"
    restarted.close()
