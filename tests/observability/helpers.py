"""Builders shared by the observability tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hami_devices import Device, discover
from hami_devices.config import parse_config
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import Event, EventKind, Ledger

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "hami_devices.cli.main"]


def t4_node(count: int = 2, *, name: str = "n", split: int = 10) -> dict[str, Any]:
    return {"name": name, "devices": [{"vendor": "nvidia", "model": "T4", "count": count, "split_count": split}]}


def simulated(ledger: Ledger, *nodes: dict[str, Any], isolation: str = "hard") -> list[Device]:
    config = parse_config({"device-plugin": {"isolation-level": isolation}})
    return discover(parse_inventory({"nodes": list(nodes) or [t4_node()]}), ledger=ledger, config=config)


def replay(events: Iterable[Event]) -> set[str]:
    """The allocations the event log says are live: granted and not yet released or evicted."""
    live: set[str] = set()
    for event in events:
        if event.kind == EventKind.GRANTED:
            assert event.allocation_id not in live, f"{event.allocation_id} granted twice"
            live.add(event.allocation_id or "")
        elif event.kind in (EventKind.RELEASED, EventKind.EVICTED):
            assert event.allocation_id in live, f"{event.kind} of {event.allocation_id}, which was not live"
            live.discard(event.allocation_id or "")
    return live


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


LOADED_DEADLINE_S = 1.5
"""A collector deadline the healthy collectors meet even on a machine kept busy (the suite runs at load 20 on 2
cores): what the tests check is that a *hung* collector costs a scrape no more than the deadline."""
STALL_BOUND_S = 10 * LOADED_DEADLINE_S
"""How long a scrape may take beside a collector that never returns: finite, where a stall would be forever."""
