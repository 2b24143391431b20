"""examples/batch-scheduler end to end: a stream of jobs through one engine, a SIGKILL mid-stream, a restart
from the ledger, the node hand-off.  The oracle is the ledger: every job granted exactly once, nothing left
allocated, no region left on the nodes, and each refused job one no node of the example cluster could hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hami_devices import limiter

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "batch-scheduler"
CARDS_PER_NODE = {"t4-0": 2, "t4-1": 2, "a100": 4, "l4": 3}  # examples/batch-scheduler/cluster.yaml


def test_the_reference_scheduler_survives_a_kill_and_finishes_the_stream(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "scheduler.py"), "--ledger", str(ledger), "--jobs", "30", "--kill-after", "8"],
        capture_output=True, text=True, timeout=300, check=True,
    )
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["restarted"] is True
    assert summary["ledger_allocations"] == 0 and summary["engine_bookings"] == 0
    assert summary["granted_once"] is True
    assert summary["waiting"] == []
    assert summary["finished"] + len(summary["refused"]) == summary["jobs"] == 30
    # a refusal is only for what no node holds: the 9-card job (the largest node has 4 cards)
    sys.path.insert(0, str(EXAMPLE))
    try:
        from scheduler import job_stream  # the example's own stream, to know what each refused job asked
    finally:
        sys.path.remove(str(EXAMPLE))
    asked = {j.name: j.request["parts"][0].get("count", 1) for j in job_stream(30, 7)}
    assert summary["refused"] and all(asked[name] > max(CARDS_PER_NODE.values()) for name in summary["refused"])
    assert list(limiter.region_dir_path().glob("*.region")) == []
