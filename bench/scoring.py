"""Scoring-engine speed: decisions/s and p50/p99 latency of one placement decision.

Synthetic heterogeneous clusters of 100, 1,000 and 5,000 nodes with 8 devices
each (NVIDIA T4/L4/A100/H100, Ascend 910B3, Cambricon MLU370-X8; NVLink-style
pairs inside a node), and a seeded random stream of requests of every task
type (mostly fractional single-device shares, some whole and 2/4-device
parts).  Each decision is timed alone (``Engine.place``); the placement is
then booked, and the oldest bookings are forgotten to hold the cluster near
60% full, so the engine always sees a live, partly used cluster.

    python bench/scoring.py [--nodes 100,1000,5000] [--decisions 2000] [--policy binpack] [--no-tune-allocator]

By default the process first raises glibc's mmap/trim thresholds
(``hami_devices.scheduling.allocator.tune_allocator``), as a long-running
scheduler would: at 5,000 nodes the decision's temporary arrays are otherwise
returned to the kernel and faulted back in on every decision.
``--no-tune-allocator`` measures without it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hami_devices.errors import InsufficientResources
from hami_devices.models import DeviceInfo, RequestPart, ResourceRequest, TaskType
from hami_devices.scheduling.allocator import tune_allocator
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine
from hami_devices.traits import lookup

MODELS = [
    ("nvidia", "T4"),
    ("nvidia", "L4"),
    ("nvidia", "A100-80GB"),
    ("nvidia", "H100"),
    ("ascend", "910B3"),
    ("cambricon", "MLU370-X8"),
]


def build_cluster(nodes: int, per_node: int, rng: np.random.Generator) -> ClusterState:
    traits = {m: lookup(*m) for m in MODELS}
    cluster = ClusterState()
    for n in range(nodes):
        vendor, model = MODELS[int(rng.integers(len(MODELS)))]
        t = traits[(vendor, model)]
        uuids = [f"{vendor}-{n:05d}-{i}" for i in range(per_node)]
        devices = []
        for i, uuid in enumerate(uuids):
            topo = {
                o: (100 if j // 2 == i // 2 else 40 if j // 4 == i // 4 else 20) for j, o in enumerate(uuids) if j != i
            }
            devices.append(
                DeviceInfo(
                    uuid=uuid,
                    index=i,
                    vendor=vendor,
                    model=model,
                    node=f"n{n:05d}",
                    memory_mib=t.memory_mib,
                    numa_node=i // 4,
                    traits=t,
                    topology=topo,
                )
            )
        cluster.add_node(f"n{n:05d}", 128_000, 1_048_576, devices, {"zone": f"z{n % 4}"})
    return cluster


def random_request(rng: np.random.Generator, i: int) -> ResourceRequest:
    kind = list(TaskType)[int(rng.integers(4))]
    roll = rng.random()
    precision = [None, "fp16", "bf16", "int8"][int(rng.integers(4))]
    if roll < 0.80:
        part = RequestPart(
            memory_mib=int(rng.integers(1, 20)) * 1024, cores=int(rng.integers(1, 6)) * 10, precision=precision
        )
    elif roll < 0.90:
        part = RequestPart(cores=100, precision=precision)
    else:
        part = RequestPart(count=2 if roll < 0.97 else 4, cores=100, precision=precision)
    slo = float(rng.integers(10, 200)) if kind == TaskType.INFERENCE else None
    return ResourceRequest(
        name=f"t{i}",
        task_type=kind,
        parts=[part],
        latency_slo_ms=slo,
        host_cpu_milli=int(rng.integers(1, 9)) * 1000,
        host_memory_mib=8192,
        topology="preferred" if part.count > 1 else "none",
    )


def run(nodes: int, per_node: int, decisions: int, policy: str, seed: int) -> dict[str, float | int]:
    rng = np.random.default_rng(seed)
    cluster = build_cluster(nodes, per_node, rng)
    engine = Engine(cluster, policy)
    requests = [random_request(rng, i) for i in range(decisions + 50)]
    live: deque[str] = deque()
    budget = int(0.6 * nodes * per_node)
    times = []
    for i, request in enumerate(requests):
        t0 = time.perf_counter()
        try:
            placement = engine.place(request)
        except InsufficientResources:
            placement = None
        dt = time.perf_counter() - t0
        if i >= 50:  # warm-up: plugin loading, first allocations
            times.append(dt)
        if placement is not None:
            live.append(engine.book(placement).id)
        while len(live) > budget:
            cluster.forget(live.popleft())
    arr = np.array(times) * 1000
    return {
        "nodes": nodes,
        "devices": nodes * per_node,
        "decisions": len(times),
        "decisions_per_s": round(len(times) / (arr.sum() / 1000), 1),
        "p50_ms": round(float(np.percentile(arr, 50)), 3),
        "p99_ms": round(float(np.percentile(arr, 99)), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,1000,5000")
    parser.add_argument("--devices-per-node", type=int, default=8)
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--policy", default="binpack")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--tune-allocator",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="raise glibc's mmap/trim thresholds first (see hami_devices.scheduling.allocator)",
    )
    args = parser.parse_args()
    tuned = tune_allocator() if args.tune_allocator else False
    results = [
        run(int(n), args.devices_per_node, args.decisions, args.policy, args.seed) for n in args.nodes.split(",")
    ]
    print(json.dumps({"policy": args.policy, "allocator_tuned": tuned, "results": results}))


if __name__ == "__main__":
    main()
