"""Commit latency and throughput of the PostgreSQL ledger with 1, 2, 4 and 8 writer processes.

Each writer is a process with its own ``PostgresLedger`` (its own connection: a scheduler on
its own host).  Its commits are what an allocation and a release write: an allocation reads
the grants of two devices, adds a handle with a grant on each and records its event; every
other commit releases one of the writer's earlier handles (remove and event).  A commit is
timed from ``transaction()`` to the end of its COMMIT.  All writers start together and run
``--commits`` commits each; throughput is all commits over the wall time from the first
start to the last end.

Without ``--ledger`` it starts a throwaway server from the distribution's binaries
(tests/ledger/pg_server.py), with PostgreSQL's durable settings (fsync, synchronous commit)
unless ``--fast``; each writer count gets a fresh database.

    python bench/ledger_postgresql.py [--ledger postgresql://...] [--writers 1,2,4,8] [--commits 400] [--fast]

Prints one JSON object: per writer count p50/p99 commit ms and commits/s, the load average
before and after, and ``targets``: throughput grows with writers (best of 2, 4 and 8 writers
over one writer, above 1), and the issue's 4-writer p99 within 10x the one-writer p99.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hami_devices.ledger import Event  # noqa: E402
from hami_devices.ledger.postgresql import PostgresLedger  # noqa: E402
from hami_devices.models import DeviceHandle, Grant  # noqa: E402

DEVICES = [f"GPU-{n:02d}" for n in range(16)]


def _grant(uuid_: str, index: int) -> Grant:
    return Grant(uuid=uuid_, node="n", vendor="nvidia", model="H100", index=index, part=0, memory_mib=1024, cores=10)


def _writer(url: str, writer: int, commits: int, start_at: float, out: Any) -> None:
    ledger = PostgresLedger(url)
    rng = np.random.default_rng(writer)
    mine: list[str] = []
    took: list[float] = []
    while time.time() < start_at:
        time.sleep(0.001)
    began = time.time()
    for n in range(commits):
        release = n % 2 == 1 and mine
        picks = [int(i) for i in rng.choice(len(DEVICES), size=2, replace=False)]
        t0 = time.perf_counter()
        with ledger.transaction() as view:
            if release:
                gone = view.remove(mine.pop(0))
                view.record_event(Event(kind="allocation.released", allocation_id=gone.id))
            else:
                for i in picks:
                    view.grants_on(DEVICES[i])
                handle = DeviceHandle(
                    request={"parts": [{"memory_mib": 1024, "count": 2}]},
                    grants=[_grant(DEVICES[i], i) for i in picks],
                )
                view.add(handle)
                view.record_event(Event(kind="allocation.granted", allocation_id=handle.id))
                mine.append(handle.id)
        took.append(time.perf_counter() - t0)
    out.put({"writer": writer, "began": began, "ended": time.time(), "took": took})
    ledger.close()


def run(url: str, writers: int, commits: int) -> dict[str, Any]:
    PostgresLedger(url).close()  # the tables exist before the clock starts
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 1.0 + 0.2 * writers  # every writer connected and waiting
    procs = [ctx.Process(target=_writer, args=(url, w, commits, start_at, out)) for w in range(writers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    took = np.array([t for r in results for t in r["took"]]) * 1000.0
    wall = max(r["ended"] for r in results) - min(r["began"] for r in results)
    return {
        "writers": writers,
        "commits": int(took.size),
        "commit_p50_ms": round(float(np.percentile(took, 50)), 3),
        "commit_p99_ms": round(float(np.percentile(took, 99)), 3),
        "commits_per_s": round(took.size / wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ledger", metavar="URL", help="an existing database (default: a throwaway server)")
    parser.add_argument("--writers", default="1,2,4,8", help="writer process counts (default 1,2,4,8)")
    parser.add_argument("--commits", type=int, default=400, help="commits per writer (default 400)")
    parser.add_argument("--fast", action="store_true", help="throwaway server without fsync (as the tests run it)")
    args = parser.parse_args()
    counts = [int(c) for c in args.writers.split(",")]

    server = None
    if args.ledger is None:
        from tests.ledger.pg_server import start_server

        server = start_server(durable=not args.fast)
    load_before = os.getloadavg()
    rows = []
    try:
        for writers in counts:
            if server is not None:
                url = server.create_database(f"bench_{writers}_{uuid.uuid4().hex[:8]}")
            else:
                url = args.ledger
            rows.append(run(url, writers, args.commits))
    finally:
        if server is not None:
            server.stop()
    by = {r["writers"]: r for r in rows}
    out: dict[str, Any] = {
        "ledger": "postgresql",
        "server": "throwaway, " + ("fsync off" if args.fast else "durable settings") if server else "given URL",
        "commits_per_writer": args.commits,
        "cpus": os.cpu_count(),
        "runs": rows,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    targets: dict[str, Any] = {}
    if 1 in by and any(n > 1 for n in by):
        best = max(by[n]["commits_per_s"] for n in by if n > 1)
        gain = round(best / by[1]["commits_per_s"], 3)
        targets["throughput_grows_with_writers"] = {"value": gain, "bound": 1.0, "met": gain > 1.0}
    if 1 in by and 4 in by:
        ratio = round(by[4]["commit_p99_ms"] / by[1]["commit_p99_ms"], 2)
        targets["p99_4_writers_over_1_writer"] = {"value": ratio, "bound": 10.0, "met": ratio <= 10.0}
    out["targets"] = targets
    print(json.dumps(out))


if __name__ == "__main__":
    main()
