"""The extender process killed (SIGKILL) mid-bind, then restarted: no orphan allocation, no over-commit,
no pod bound without its devices.

The server is the real CLI in its own process, over a SQLite ledger; the Kubernetes side
is ``FileRecordingBinder`` (a test double writing each bind to a file, slowed down like
a loaded API server so the kill lands between ledger commits and API writes).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import hami_devices as hd
from hami_devices.kubernetes.extender import leases
from hami_devices.testing import FileRecordingBinder
from tests.kubernetes.extender.conftest import Client, assert_no_overcommit, binding, gpu, pod, small_inventory


def start(inventory: Path, ledger: Path, record: Path, *, lease: float, maintenance: float) -> tuple[Any, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "hami_devices.cli.main", "extender", "--inventory", str(inventory),
         "--ledger", str(ledger), "--listen", "127.0.0.1:0", "--json", "--binder", f"record:{record}",
         "--record-delay", "0.3", "--timeout", "1.5", "--lease", str(lease), "--maintenance", str(maintenance)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else "no start-up line"
    return proc, json.loads(line)["url"]


def test_sigkill_mid_bind_then_restart(tmp_path: Path) -> None:
    inventory = small_inventory(tmp_path / "cluster.yaml", nodes=2, per_node=2)
    ledger_path, record = tmp_path / "ledger.db", tmp_path / "binds.jsonl"
    pods = [pod(f"k{i}", gpu(1, 5000)) for i in range(24)]  # 12 fit
    proc, url = start(inventory, ledger_path, record, lease=2.0, maintenance=0)
    try:
        setup = Client(url)
        for p in pods:
            assert setup.post("filter", {"Pod": p, "NodeNames": ["node-0", "node-1"]})[0] == 200
        setup.close()

        def bind(i: int) -> None:
            client = Client(url)
            try:
                client.post("bind", binding(pods[i], f"node-{i % 2}"))
            except (OSError, ValueError, http.client.HTTPException):  # the server died under us (mid-reply too)
                pass
            finally:
                client.close()

        threads = [threading.Thread(target=bind, args=(i,), daemon=True) for i in range(len(pods))]
        for t in threads:
            t.start()
        # Commits take milliseconds and each API write 0.3 s: kill as soon as one commit waits for its write
        # (polled, not a fixed sleep, so a loaded machine does not make the kill land too early).
        watcher = hd.SqliteLedger(ledger_path)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(leases.pending(h) for h in watcher.handles()):
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        for t in threads:
            t.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ledger = hd.SqliteLedger(ledger_path)
    at_kill = ledger.handles()
    recorded = FileRecordingBinder(record).records()
    assert any(leases.pending(h) for h in at_kill), "the kill should land between a commit and its API write"
    assert assert_no_overcommit(inventory, ledger) == len(at_kill)

    proc, url = start(inventory, ledger_path, record, lease=2.0, maintenance=0.2)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(leases.pending(h) for h in ledger.handles()):
            time.sleep(0.1)
        after = {h.id: h for h in ledger.handles()}
        recorded = FileRecordingBinder(record).records()
        bound = {leases.handle_id(r["uid"]): r["node"] for r in recorded if "uid" in r}
        # Every allocation left is a pod the API server has bound there; every bound pod has its allocation.
        assert not any(leases.pending(h) for h in after.values())
        assert {hid: leases.node_of(h) for hid, h in after.items()} == bound
        assert assert_no_overcommit(inventory, ledger) == len(after) <= 12
        # The restarted extender serves on: the interrupted pods are scheduled again and fill what is free.
        client = Client(url)
        for i, p in enumerate(pods):
            if leases.handle_id(p["metadata"]["uid"]) in after:
                continue
            client.post("filter", {"Pod": p, "NodeNames": [f"node-{i % 2}"]})
            client.post("bind", binding(p, f"node-{i % 2}"))
        client.close()
        assert assert_no_overcommit(inventory, ledger) == 12
        assert all(not leases.pending(h) for h in ledger.handles())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    ledger.close()
