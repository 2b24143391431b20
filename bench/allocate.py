"""Latency where a scheduler feels it: placed and refused decisions, and ``hd.allocate`` at cluster scale.

On a synthetic cluster of ``--nodes`` nodes with 8 devices each (six models of three vendors, as
``bench/scoring.py``), filled to about 60 % of device memory by the policy itself:

* ``place``: ``Engine.place`` for a stream of requests (mostly fractional shares, some whole and
  multi-device), each timed alone; requests that do not fit are timed with their explanation
  (``InsufficientResources`` with reasons, nearest misses and permanence), as a scheduler sees them.
  Reported: p50/p99 of placed and of refused decisions, p99 of all, and
  ``refusal_over_decision_p50`` (refused p50 over placed p50).
* ``allocate``: ``hd.allocate(devices, request)`` on the simulated devices of the same inventory, in
  one in-memory ledger and in one SQLite ledger, given every device of the cluster and given only the
  devices of one node, side by side (alternating), each allocation released again.  Reported: p50 of
  each, ``allocate_all_over_node_p50`` (per ledger), and the SQLite commit alone (an empty write
  transaction) so that "p50 <= 3 ms plus the ledger commit" can be read off.

    python bench/allocate.py [--nodes 1000] [--policy binpack] [--decisions 400] [--allocations 200]

Prints one JSON object, with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import hami_devices as hd  # noqa: E402
from hami_devices.inventory import parse_inventory  # noqa: E402
from hami_devices.ledger import Event  # noqa: E402
from hami_devices.models import RequestPart, ResourceRequest, TaskType  # noqa: E402

MODELS = [
    ("nvidia", "T4"),
    ("nvidia", "L4"),
    ("nvidia", "A100-80GB"),
    ("nvidia", "H100"),
    ("ascend", "910B3"),
    ("cambricon", "MLU370-X8"),
]


def inventory(nodes: int, rng: np.random.Generator) -> hd.Inventory:
    specs = []
    for n in range(nodes):
        vendor, model = MODELS[int(rng.integers(len(MODELS)))]
        specs.append(
            {
                "name": f"n{n:05d}",
                "cpu_milli": 128_000,
                "memory_mib": 1_048_576,
                "devices": [{"vendor": vendor, "model": model, "count": 8}],
            }
        )
    return parse_inventory({"nodes": specs})


def request(rng: np.random.Generator, i: int) -> ResourceRequest:
    roll = rng.random()
    kind = list(TaskType)[int(rng.integers(4))]
    if roll < 0.7:
        part = RequestPart(memory_mib=int(rng.integers(1, 24)) * 1024, cores=int(rng.integers(1, 6)) * 10)
    elif roll < 0.85:
        part = RequestPart(cores=100)
    elif roll < 0.95:
        part = RequestPart(count=int(rng.choice([2, 4])), cores=100)
    else:  # does not exist at this scale: refused at once, permanently
        part = RequestPart(count=16, cores=100)
    return ResourceRequest(name=f"r{i}", task_type=kind, parts=[part])


def percentile(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)) * 1000, 3) if values else float("nan")


def bench_place(inv: hd.Inventory, policy: str, decisions: int, rng: np.random.Generator) -> dict[str, Any]:
    engine = hd.build_engine(inv, policy=policy)
    cluster = engine.cluster
    total = float(cluster.mem_total[: cluster.size].sum())
    i = 0
    while cluster.mem_used[: cluster.size].sum() < 0.6 * total:  # fill by the policy itself
        placed = engine.try_place(request(rng, i))
        if placed is not None:
            engine.book(placed)
        i += 1
    placed_s: list[float] = []
    refused_s: list[float] = []
    for k in range(decisions):
        r = request(rng, i + k)
        start = time.perf_counter()
        try:
            placement = engine.place(r)
        except hd.InsufficientResources as refusal:
            refused_s.append(time.perf_counter() - start)
            assert refusal.reasons
            continue
        placed_s.append(time.perf_counter() - start)
        booking = engine.book(placement)
        cluster.forget(booking.id)
    every = placed_s + refused_s
    return {
        "placed": len(placed_s),
        "refused": len(refused_s),
        "placed_p50_ms": percentile(placed_s, 50),
        "placed_p99_ms": percentile(placed_s, 99),
        "refused_p50_ms": percentile(refused_s, 50),
        "refused_p99_ms": percentile(refused_s, 99),
        "p99_ms": percentile(every, 99),
        "refusal_over_decision_p50": round(float(np.median(refused_s) / np.median(placed_s)), 2),
        "target_refusal_over_decision_p50": 3,
        "target_p99_ms": 10,
    }


def bench_allocate(inv: hd.Inventory, ledger: hd.Ledger, allocations: int, rng: np.random.Generator) -> dict[str, Any]:
    devices = hd.discover(inv, ledger=ledger)
    by_node: dict[str, list[hd.Device]] = {}
    for device in devices:
        by_node.setdefault(device.info.node, []).append(device)
    nodes = sorted(by_node)
    timings: dict[str, list[float]] = {"all": [], "node": []}
    shares = [{"parts": [{"memory_mib": int(rng.integers(1, 8)) * 1024, "cores": 20}]} for _ in range(allocations)]
    for k, share in enumerate(shares):
        node = by_node[nodes[int(rng.integers(len(nodes)))]]
        for label, given in (("all", devices), ("node", node)) if k % 2 else (("node", node), ("all", devices)):
            start = time.perf_counter()
            handle = hd.allocate(given, share)
            timings[label].append(time.perf_counter() - start)
            hd.release(handle)
    return {
        "all_devices_p50_ms": percentile(timings["all"], 50),
        "node_devices_p50_ms": percentile(timings["node"], 50),
        "all_devices_p99_ms": percentile(timings["all"], 99),
        "allocate_all_over_node_p50": round(float(np.median(timings["all"]) / np.median(timings["node"])), 2),
    }


def sqlite_commit_p50(path: Path, rounds: int = 200) -> float:
    """An empty write transaction on the ledger: what a commit costs on this disk, whatever is written."""
    ledger = hd.SqliteLedger(path)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        with ledger.transaction() as view:
            view.record_event(Event(kind="bench.commit"))
        times.append(time.perf_counter() - start)
    return percentile(times, 50)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--policy", default="binpack")
    parser.add_argument("--decisions", type=int, default=400)
    parser.add_argument("--allocations", type=int, default=200)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    load_before = os.getloadavg()
    rng = np.random.default_rng(args.seed)
    inv = inventory(args.nodes, rng)
    out: dict[str, Any] = {"nodes": args.nodes, "devices": args.nodes * 8, "policy": args.policy}
    out["place"] = bench_place(inv, args.policy, args.decisions, rng)
    with tempfile.TemporaryDirectory(prefix="hami-bench-allocate-") as tmp:
        os.environ.setdefault("HAMI_REGION_DIR", tmp)
        out["allocate_memory_ledger"] = bench_allocate(inv, hd.MemoryLedger(), args.allocations, rng)
        out["allocate_sqlite_ledger"] = bench_allocate(
            inv, hd.SqliteLedger(Path(tmp) / "ledger.db"), args.allocations, rng
        )
        out["sqlite_commit_p50_ms"] = sqlite_commit_p50(Path(tmp) / "commit.db")
    out["targets"] = {"allocate_all_over_node_p50": 1.5, "allocate_p50_ms_plus_commit": 3}
    out["loadavg_before"] = [round(x, 2) for x in load_before]
    out["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
