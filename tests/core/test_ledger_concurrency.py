"""Many writers, one truth (issue 37, item 7): processes x threads placing, committing and releasing against one
ledger (SQLite, then PostgreSQL: ``ledger_target``), SIGKILLed at random moments, checked by an oracle that reads
the ledger's rows itself with plain SQL.

The oracle is written from the definitions, not from the product's accounting: a device's memory, cores and
sharers are the sums over the grants the ledger's rows hold on it; a node's host CPU and memory are the sums
of the host demands of the allocations it hosts (a one-part request, so its host is its device's node, or
the node a host-only allocation names).  Capacities are the inventory's (``ledger_stress_worker``) and the
T4's 15,360 MiB (the traits catalog's figure for a 16 GB T4).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hami_devices as hd
from hami_devices.assembly import build_engine
from hami_devices.inventory import parse_inventory
from hami_devices.ledger.opening import LedgerTarget, open_ledger

from .ledger_stress_worker import CONFIG, INVENTORY, NODE_CPU, NODE_MEMORY, SPLIT

WORKER = Path(__file__).with_name("ledger_stress_worker.py")
REPO = Path(__file__).resolve().parents[2]
T4_MIB = 15_360
PROCESSES = 3
THREADS = 3
PHASE_S = 3.0
STARTUP_S = 20.0


@dataclass
class Worker:
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    @classmethod
    def start(cls, ledger: LedgerTarget, seed: int) -> Worker:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen([sys.executable, str(WORKER), str(ledger), str(seed), str(THREADS)],
                                stdout=subprocess.PIPE, text=True, env=env)
        worker = cls(proc)
        worker.reader = threading.Thread(target=worker._drain, daemon=True)
        worker.reader.start()
        return worker

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def wait_for(self, grants: int, deadline: float) -> None:
        """Until this process has reported ``grants`` commits (or ``deadline``, a ``time.monotonic``)."""
        while sum(line.startswith("granted") for line in self.lines) < grants and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        assert self.reader is not None
        self.reader.join(timeout=30)


@dataclass
class Rows:
    """The ledger's rows, decoded as plain JSON."""

    allocations: dict[str, dict[str, Any]]
    grant_rows: list[tuple[str, dict[str, Any]]]


def read_rows(target: LedgerTarget) -> Rows:
    """Both tables, read with plain SQL from the SQLite file or the PostgreSQL database."""
    queries = ("SELECT id, body FROM allocations", "SELECT handle_id, body FROM grants")
    if isinstance(target, str):  # a database URL
        import psycopg  # the [postgresql] extra; only asked for when that backend runs

        with psycopg.connect(target) as conn:
            allocation_rows, grant_rows = (conn.execute(q).fetchall() for q in queries)
    else:
        with sqlite3.connect(target) as conn:
            allocation_rows, grant_rows = (conn.execute(q).fetchall() for q in queries)
    return Rows(
        {i: json.loads(body) for i, body in allocation_rows}, [(h, json.loads(body)) for h, body in grant_rows]
    )


def totals(rows: Rows) -> tuple[dict[str, Counter[str]], dict[str, Counter[str]]]:
    """Per device uuid and per node: what the rows hold, summed from the definitions."""
    devices: dict[str, Counter[str]] = defaultdict(Counter)
    for _, grant in rows.grant_rows:
        held = devices[grant["uuid"]]
        held["memory"] += grant["memory_mib"]
        held["cores"] += grant["cores"]
        held["sharers"] += 1
        held["exclusive"] += bool(grant.get("exclusive"))
    nodes: dict[str, Counter[str]] = defaultdict(Counter)
    for body in rows.allocations.values():
        host = body.get("node") or body["grants"][0]["node"]
        nodes[host]["cpu"] += body["request"].get("host_cpu_milli", 0)
        nodes[host]["memory"] += body["request"].get("host_memory_mib", 0)
    return devices, nodes


def test_many_writers_never_overbook_lose_or_double_a_grant(ledger_target: LedgerTarget) -> None:
    """Fails before issue 37: decide-first commits from stale views booked nodes past their CPU and memory."""
    path = ledger_target
    open_ledger(path).close()  # the tables, before the writers race to create them
    workers = [Worker.start(path, seed) for seed in range(1, PROCESSES + 1)]
    for worker in workers:  # each has started and is committing (imports take a while on a busy machine)
        worker.wait_for(3, time.monotonic() + STARTUP_S)
    time.sleep(PHASE_S)
    workers[0].kill()  # mid-flight: a commit may be torn off anywhere
    workers.append(Worker.start(path, PROCESSES + 1))  # and a scheduler restarts on the same ledger
    workers[-1].wait_for(3, time.monotonic() + STARTUP_S)
    time.sleep(PHASE_S)
    for worker in workers[1:]:
        worker.kill()

    lines = [line for w in workers for line in w.lines]
    assert not [line for line in lines if line.startswith("error")], lines
    granted = {line.split()[1] for line in lines if line.startswith("granted")}
    released = {line.split()[1] for line in lines if line.startswith("released")}
    releasing = {line.split()[1] for line in lines if line.startswith("releasing")}  # killed meanwhile: either
    assert len(granted) >= 20 and released, f"too little happened: {len(granted)} grants, {len(released)} releases"

    rows = read_rows(path)
    live = set(rows.allocations)
    assert granted - releasing <= live, "a commit that was reported is missing: a lost grant"
    assert not released & live, "a release that was reported did not stick"
    # every grant row belongs to a live allocation and repeats exactly its grants: no double or orphan grant
    by_handle: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for handle_id, grant in rows.grant_rows:
        by_handle[handle_id].append(grant)
    assert set(by_handle) <= live
    for handle_id, body in rows.allocations.items():
        assert sorted(json.dumps(g, sort_keys=True) for g in by_handle.get(handle_id, [])) == sorted(
            json.dumps(g, sort_keys=True) for g in body["grants"]
        )
        assert len({g["uuid"] for g in body["grants"]}) == len(body["grants"])

    devices, nodes = totals(rows)
    for uuid, held in devices.items():
        assert held["memory"] <= T4_MIB and held["cores"] <= 100 and held["sharers"] <= SPLIT, (uuid, held)
    for node, held in nodes.items():
        assert held["cpu"] <= NODE_CPU and held["memory"] <= NODE_MEMORY, (node, held)
    assert sum(held["cpu"] for held in nodes.values()) > 0  # the host rows were exercised

    restarted = open_ledger(path)  # a restart from the ledger always succeeds, and agrees with the oracle
    try:
        engine = build_engine(parse_inventory(INVENTORY), CONFIG, ledger=restarted)
        assert engine.cluster.conflicts == {}
        assert set(engine.cluster.bookings) == live
        for uuid, held in devices.items():
            assert engine.cluster.usage_of(uuid).memory_mib == held["memory"]
        for node, held in nodes.items():
            assert engine.cluster.nodes[node].cpu_used == held["cpu"]
        fresh = hd.discover(parse_inventory(INVENTORY), config=CONFIG, ledger=restarted)
        try:
            hd.allocate(fresh, {"parts": [], "host_cpu_milli": 1})
        except hd.InsufficientResources as exc:  # a full cluster says why; nothing else may come out
            assert exc.codes
    finally:
        restarted.close()
