"""SIGKILL the managing process mid-operation: afterwards the event log and the ledger still agree."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from hami_devices.ledger import EventKind, SqliteLedger
from tests.observability.helpers import REPO, cli_env, replay


def test_killed_manager_leaves_events_and_ledger_agreeing(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    rng = random.Random(7)
    for round_ in range(3):  # each restart continues on the ledger the last kill left behind
        worker = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("crash_worker.py")), str(path), str(round_)],
            stdout=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO,
        )
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.3, 0.8))  # most of the loop runs inside ledger transactions
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(timeout=10) == -signal.SIGKILL

        ledger = SqliteLedger(path)
        events = ledger.events()
        live = {h.id: h for h in ledger.handles()}
        assert replay(events) == set(live), "an event was lost or invented"
        granted = {e.allocation_id: e for e in events if e.kind == EventKind.GRANTED}
        for handle_id, handle in live.items():
            assert granted[handle_id].data["metadata"] == handle.metadata
            assert [g["uuid"] for g in granted[handle_id].data["grants"]] == handle.uuids
        assert [e.seq for e in events] == sorted({e.seq for e in events})
        ledger.close()
    kinds = {e.kind for e in SqliteLedger(path).events()}
    assert {EventKind.GRANTED, EventKind.RELEASED, EventKind.EVICTED} <= kinds  # the kills hit a busy manager
