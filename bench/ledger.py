"""Commit latency on one ledger with 1, 2, 4 and 8 writer processes.

Each writer is a process of its own (a scheduler) with the simulated devices of one inventory (8 nodes x
8 T4, split 64) on the same ledger.  After a warm-up it takes ``--commits`` turns, alternating:

* ``commit``: decide first, then commit.  The writer's own engine, brought up to date with the ledger by
  allocation id (untimed), places the request; ``hd.allocate(devices, placement)`` commits it, every rule
  re-checked in the ledger transaction, node rows included (timed).
* ``allocate``: ``hd.allocate(devices, request)``, placed and committed in one transaction (timed).

It keeps at most 4 of its allocations live, releasing the oldest (timed).  All writers start together.

Reported per backend and writer count: p50/p99 of commits, of direct allocations and of releases, commits
per second over all writers, refusals (a placement that went stale), and the load average before, after and
per run.  Targets: one writer's commit p50 <= 2 ms (SQLite); with 4 writers a commit p99 <= 10 x the
one-writer commit p99 (each backend); and on PostgreSQL, throughput grows with writers (the best commits per
second of 2, 4 and 8 writers over one writer's, above 1).

    python bench/ledger.py [--commits 300] [--writers 1,2,4,8] [--backends sqlite,postgresql]
                           [--ledger postgresql://...]

SQLite: a file in a temporary folder, new for each writer count.  PostgreSQL: without ``--ledger``, a
throwaway server from the distribution's binaries (tests/ledger/pg_server.py, PostgreSQL's durable
settings) on a loopback port, a new database for each writer count; a given URL (which alone selects
PostgreSQL) is emptied of allocations before each writer count.  Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import hami_devices as hd  # noqa: E402
from hami_devices.assembly import build_engine  # noqa: E402
from hami_devices.config import parse_config  # noqa: E402
from hami_devices.inventory import parse_inventory  # noqa: E402
from hami_devices.ledger.opening import describe, ledger_target, open_ledger  # noqa: E402
from hami_devices.models import DeviceHandle, ResourceRequest  # noqa: E402
from hami_devices.scheduling.engine import Placement  # noqa: E402

INVENTORY = {
    "nodes": [
        {"name": f"n{i}", "devices": [{"vendor": "nvidia", "model": "T4", "count": 8, "split_count": 64}]}
        for i in range(8)
    ]
}
CONFIG = parse_config({"device-plugin": {"isolation-level": "none"}})
LIVE = 4
WARM_UP = 20
ONE_WRITER_P50_BOUND_MS = 2.0
FOUR_WRITERS_P99_RATIO_BOUND = 10.0


def percentile(seconds: list[float], q: float) -> float:
    return round(float(np.percentile(np.array(seconds) * 1e3, q)), 3) if seconds else float("nan")


def writer(target: str, commits: int, seed: int) -> None:
    """One writer process: warm up, say ready, wait for go, commit and release, print its timings."""
    ledger = open_ledger(target)
    devices = hd.discover(parse_inventory(INVENTORY), config=CONFIG, ledger=ledger)
    engine = build_engine(parse_inventory(INVENTORY), CONFIG, ledger=ledger)
    rng = np.random.default_rng(seed)
    live: list[DeviceHandle] = []

    def step(timed: dict[str, list[float]] | None, decided: bool) -> None:
        request = ResourceRequest.single(memory_mib=int(rng.choice([500, 1_000, 2_000])),
                                         cores=int(rng.choice([0, 5, 10])), host_cpu_milli=100)
        asked: ResourceRequest | Placement = request
        if decided:  # decide first, untimed: the writer's own engine, brought up to date by id
            with ledger.reading() as view:
                engine.cluster.follow(view.handle_ids(), view.get)
            asked = engine.place(request)
        start = time.perf_counter()
        try:
            live.append(hd.allocate(devices, asked))
        except hd.InsufficientResources:
            if timed is not None:
                timed["refused"].append(0.0)
        took = time.perf_counter() - start
        if timed is not None:
            timed["commit" if decided else "allocate"].append(took)
        if len(live) > LIVE:
            start = time.perf_counter()
            hd.release(live.pop(0))
            if timed is not None:
                timed["release"].append(time.perf_counter() - start)

    for i in range(WARM_UP):
        step(None, decided=i % 2 == 0)
    print("ready", flush=True)
    sys.stdin.readline()  # "go"
    timed: dict[str, list[float]] = {"commit": [], "allocate": [], "release": [], "refused": []}
    began = time.perf_counter()
    for i in range(commits):
        step(timed, decided=i % 2 == 0)
    wall = time.perf_counter() - began
    for handle in live:
        hd.release(handle)
    print(json.dumps({**timed, "wall_s": wall}), flush=True)
    ledger.close()


def empty(target: str) -> None:
    """Release whatever an earlier run left in a database ledger (a SQLite file is new for each run)."""
    ledger = open_ledger(target)
    try:
        for handle in ledger.handles():
            hd.release(handle.id, ledger=ledger)
    finally:
        ledger.close()


def run(target: str, writers: int, commits: int) -> dict[str, Any]:
    if "://" in target:
        empty(target)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--writer", target, "--commits", str(commits), "--seed", str(seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        for seed in range(writers)
    ]
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line != "ready":
            raise SystemExit(f"a writer did not start: {line!r}")
    began = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.perf_counter() - began
    commit = [t for r in results for t in r["commit"]]
    allocate = [t for r in results for t in r["allocate"]]
    release = [t for r in results for t in r["release"]]
    return {
        "commit_p50_ms": percentile(commit, 50),
        "commit_p99_ms": percentile(commit, 99),
        "allocate_p50_ms": percentile(allocate, 50),
        "allocate_p99_ms": percentile(allocate, 99),
        "release_p50_ms": percentile(release, 50),
        "release_p99_ms": percentile(release, 99),
        "commits": len(commit) + len(allocate),
        "refused": sum(len(r["refused"]) for r in results),
        "commits_per_s": round((len(commit) + len(allocate)) / wall, 1),
    }


def target(name: str, value: float, bound: float) -> dict[str, Any]:
    return {"name": name, "value": value, "bound": bound, "met": bool(value <= bound)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=300, help="timed commits per writer")
    parser.add_argument("--writers", default="1,2,4,8", help="writer counts to run, comma-separated")
    parser.add_argument("--backends", default="sqlite,postgresql", help="ledgers to measure, comma-separated")
    parser.add_argument("--ledger", default=None, help="a postgresql:// URL to measure (instead of --backends)")
    parser.add_argument("--writer", default=None, help=argparse.SUPPRESS)  # one writer process (internal)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer is not None:
        writer(args.writer, args.commits, args.seed)
        return
    counts = [int(n) for n in args.writers.split(",")]
    backends = ["postgresql"] if args.ledger else [b.strip() for b in args.backends.split(",") if b.strip()]
    out: dict[str, Any] = {"commits_per_writer": args.commits, "loadavg_before": [round(x, 2) for x in os.getloadavg()]}
    measured: dict[str, Any] = {}
    for backend in backends:
        with ledgers(backend, args.ledger) as (described, next_target):
            runs: dict[str, dict[str, Any]] = {}
            for n in counts:
                where = next_target(n)
                ledger_target(where)  # a bad scheme is refused before any writer starts
                runs[str(n)] = run(where, n, args.commits)
                runs[str(n)]["loadavg"] = [round(x, 2) for x in os.getloadavg()]
            measured[backend] = {"ledger": described, "writers": runs}
    out["backends"] = measured
    out["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    out["targets"] = targets_of(measured)
    print(json.dumps(out))


@contextmanager
def ledgers(backend: str, url: str | None) -> Iterator[tuple[str, Callable[[int], str]]]:
    """A description of where ``backend``'s ledgers live, and the ledger for each writer count."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="hami-bench-ledger-") as tmp:
            yield "a new SQLite file per writer count", lambda n: str(Path(tmp) / f"ledger-{n}.db")
    elif backend == "postgresql" and url:
        yield describe(url), lambda n: url
    elif backend == "postgresql":
        from tests.ledger.pg_server import start_server

        server = start_server(durable=True)
        try:
            yield (
                f"a throwaway PostgreSQL server (durable settings) on 127.0.0.1:{server.port}, a new database per "
                "writer count",
                lambda n: server.create_database(f"bench_{n}_{os.getpid()}"),
            )
        finally:
            server.stop()
    else:
        raise SystemExit(f"unknown backend {backend!r}: sqlite or postgresql")


def targets_of(measured: dict[str, Any]) -> dict[str, Any]:
    targets: dict[str, Any] = {}
    for backend, found in measured.items():
        runs = found["writers"]
        if "1" in runs and backend == "sqlite":
            name = "sqlite_one_writer_commit_p50_ms"
            targets[name] = target(name, runs["1"]["commit_p50_ms"], ONE_WRITER_P50_BOUND_MS)
        if "1" in runs and "4" in runs:
            name = f"{backend}_four_writers_p99_over_one_writer_p99"
            ratio = round(runs["4"]["commit_p99_ms"] / runs["1"]["commit_p99_ms"], 2)
            targets[name] = target(name, ratio, FOUR_WRITERS_P99_RATIO_BOUND)
        if "1" in runs and len(runs) > 1 and backend == "postgresql":
            name = "postgresql_throughput_grows_with_writers"
            best = max(r["commits_per_s"] for n, r in runs.items() if n != "1")
            gain = round(best / runs["1"]["commits_per_s"], 3)
            targets[name] = {"name": name, "value": gain, "bound": 1.0, "met": bool(gain > 1.0)}
    return targets


if __name__ == "__main__":
    main()
