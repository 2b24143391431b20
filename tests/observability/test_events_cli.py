"""``hami-devices events --follow --observe``: a node agent without Prometheus, printing each event as it
commits; and limiter refusal bursts reported by whoever counts them."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

import hami_devices as hd
from hami_devices.ledger import EventKind, SqliteLedger
from hami_devices.observability import server
from hami_devices.observability.observer import record_limiter_refusals
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import Env
from tests.observability.helpers import CLI, cli_env, simulated, t4_node

INVENTORY = {"nodes": [t4_node(1)]}


def _next_event(follower: subprocess.Popen[str], deadline: float) -> dict[str, Any]:
    assert follower.stdout is not None
    line = follower.stdout.readline()
    assert line and time.monotonic() < deadline, "the follower printed nothing"
    event: dict[str, Any] = json.loads(line)
    return event


def test_follow_prints_events_as_they_commit_and_observes_the_node(
    tmp_path: Path, drivers: Drivers, wenv: Env
) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(INVENTORY))
    path = tmp_path / "ledger.db"
    ledger = SqliteLedger(path)
    follower = subprocess.Popen(
        [*CLI, "events", "--ledger", str(path), "--follow", "--observe", "--json", "--interval", "0.2",
         "--inventory", str(inventory)],
        env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    try:
        time.sleep(0.5)  # let it start following (it prints only what commits from now on)
        devices = simulated(ledger, t4_node(1))
        handle = hd.allocate(devices, {"parts": [{"memory_mib": 64}]}, metadata={"pod": "agent-0"})
        granted = _next_event(follower, deadline)
        assert (granted["kind"], granted["allocation_id"]) == ("allocation.granted", handle.id)
        holder = subprocess.Popen([str(drivers.cuda), "hold", str(8 << 20)],
                                  env={**wenv.build(shim=None), **handle.env}, stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline().startswith("READY")
        started = _next_event(follower, deadline)
        assert (started["kind"], started["data"]["pid"]) == ("process.started", holder.pid)
        holder.kill()
        holder.wait()
        exited = _next_event(follower, deadline)
        assert (exited["kind"], exited["data"]["pid"]) == ("process.exited", holder.pid)
        hd.release(handle)
        assert _next_event(follower, deadline)["kind"] == "allocation.released"
    finally:
        follower.kill()
        follower.wait()
        ledger.close()


def test_follow_prints_a_header_and_aligned_columns(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    ledger = SqliteLedger(path)
    follower = subprocess.Popen(
        [*CLI, "events", "--ledger", str(path), "--follow", "--interval", "0.2"],
        env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert follower.stdout is not None
    try:
        header, rule = follower.stdout.readline().rstrip("\n"), follower.stdout.readline().rstrip("\n")
        assert header.split() == ["SEQ", "TIME", "KIND", "ALLOCATION", "DEVICE/NODE", "DETAIL"]
        devices = simulated(ledger, t4_node(1), isolation="none")
        short = hd.allocate(devices, {"parts": [{"memory_mib": 64}]})
        hd.release(short, reason="done")
        lines = [follower.stdout.readline().rstrip("\n") for _ in range(2)]
    finally:
        follower.kill()
        follower.wait()
        ledger.close()
    starts = [header.index(name) for name in ("TIME", "KIND", "ALLOCATION", "DEVICE/NODE", "DETAIL")]
    assert [i for i, c in enumerate(rule) if c == "-" and (i == 0 or rule[i - 1] == " ")] == [0, *starts]
    for line, kind in zip(lines, ["allocation.granted", "allocation.released"], strict=True):
        assert [line[i:].split()[0] for i in starts[:4]] == [line[starts[0]:].split()[0], kind, short.id,
                                                            devices[0].uuid], line
        assert line[starts[0] - 2 : starts[0]] == "  " and line[starts[1] - 2 : starts[1]] == "  "


def test_limiter_refusal_bursts_are_events_and_counted() -> None:
    ledger = hd.MemoryLedger()
    devices = simulated(ledger, t4_node(1))
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 64}]})
    uuid = handle.grants[0].uuid
    record_limiter_refusals(ledger, handle.id, uuid, 120, window_s=10.0)
    record_limiter_refusals(ledger, handle.id, uuid, 30, window_s=10.0, kind="compute")
    (first, second) = ledger.events(kinds=[EventKind.LIMITER_REFUSALS])
    assert (first.data["count"], second.data["refusal"]) == (120, "compute")
    exporter = server.start(devices, ledger, listen=None, observe_interval_s=0)
    text = exporter.scrape().decode()
    exporter.stop()
    assert f'hami_limiter_refusals_total{{uuid="{uuid}",kind="memory"}} 120.0' in text
    assert f'hami_limiter_refusals_total{{uuid="{uuid}",kind="compute"}} 30.0' in text
