"""A seeded synthetic cluster and event stream whose placements are recorded as a golden file.

``record(policy)`` replays the stream through ``Engine`` and returns, per
decision, the chosen node, device uuids, per-grant memory/cores/partition,
the exact score and breakdown (``repr`` of the floats), the top-5 ranking of
some requests and the rejection reasons of failures.  The stream mixes every
task type, fractional/whole/multi-device/multi-part requests (same node and
split), vendor/model/uuid/NUMA/precision/partition constraints and labels,
with cluster events in between (forget, health changes, unschedulable nodes,
node removal and re-adding so device rows have holes).

``python tests/scheduling/placement_stream.py`` rewrites the golden file;
only do that for an intended change of placement behaviour.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from hami_devices.errors import InsufficientResources
from hami_devices.models import DeviceInfo, Health, PartitionProfile, RequestPart, ResourceRequest, TaskType
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine
from hami_devices.traits import lookup

GOLDEN = Path(__file__).with_name("data") / "placements_golden.json"
POLICIES = ("binpack", "spread", "topology-aware", "latency-aware", "fragmentation-aware")
MODELS = [
    ("nvidia", "T4"),
    ("nvidia", "L4"),
    ("nvidia", "A100-80GB"),
    ("nvidia", "H100"),
    ("ascend", "910B3"),
    ("cambricon", "MLU370-X8"),
]
MIG = [
    PartitionProfile(name="1g.10gb", memory_mib=10_240, cores=14, max_instances=7),
    PartitionProfile(name="3g.40gb", memory_mib=40_960, cores=42, max_instances=2),
]


def _node_devices(n: int, gen: int, rng: np.random.Generator) -> tuple[str, list[DeviceInfo]]:
    vendor, model = MODELS[int(rng.integers(len(MODELS)))]
    t = lookup(vendor, model)
    per_node = int(rng.choice([4, 8, 8]))
    name = f"n{n:04d}"
    uuids = [f"{vendor}-{n:04d}-{gen}-{i}" for i in range(per_node)]
    out = []
    for i, uuid in enumerate(uuids):
        topo = {o: (100 if j // 2 == i // 2 else 40 if j // 4 == i // 4 else 20) for j, o in enumerate(uuids) if j != i}
        out.append(
            DeviceInfo(
                uuid=uuid,
                index=i,
                vendor=vendor,
                model=model,
                node=name,
                memory_mib=t.memory_mib,
                numa_node=i // 4,
                traits=t,
                topology=topo,
                partitions=MIG if model == "A100-80GB" else [],
                split_count=int(rng.choice([4, 10])),
            )
        )
    return name, out


def build_cluster(nodes: int, rng: np.random.Generator) -> ClusterState:
    cluster = ClusterState(memory_overcommit=1.0)
    for n in range(nodes):
        name, devs = _node_devices(n, 0, rng)
        cluster.add_node(name, int(rng.choice([32_000, 128_000])), 262_144, devs, {"zone": f"z{n % 4}"})
    return cluster


def _part(rng: np.random.Generator, cluster: ClusterState) -> RequestPart:
    roll = rng.random()
    precision = [None, "fp16", "bf16", "int8", "fp8"][int(rng.integers(5))]
    extra: dict[str, Any] = {}
    c = rng.random()
    if c < 0.08:
        extra["vendors"] = ["nvidia"]
    elif c < 0.12:
        extra["exclude_vendors"] = ["cambricon"]
    elif c < 0.16:
        extra["models"] = [["H100", "A100-80GB", "T4"][int(rng.integers(3))]]
    elif c < 0.18:
        extra["exclude_models"] = ["T4"]
    elif c < 0.20:
        extra["numa_node"] = 1
    elif c < 0.22:
        uuids = list(cluster.uuid_index)
        extra["exclude_uuids"] = [uuids[int(rng.integers(len(uuids)))] for _ in range(3)]
    elif c < 0.23:
        uuids = list(cluster.uuid_index)
        extra["uuids"] = [uuids[int(rng.integers(len(uuids)))] for _ in range(6)]
    elif c < 0.26:
        extra["partition"] = "auto" if rng.random() < 0.5 else "1g.10gb"
        extra["models"] = ["A100-80GB"]
    if roll < 0.65:
        return RequestPart(
            memory_mib=int(rng.integers(1, 20)) * 1024, cores=int(rng.integers(0, 6)) * 10, precision=precision, **extra
        )
    if roll < 0.75:
        return RequestPart(memory_percent=float(rng.integers(5, 60)), cores=20, precision=precision, **extra)
    if roll < 0.85:
        return RequestPart(cores=100, precision=precision, **extra)
    return RequestPart(count=int(rng.choice([2, 2, 3, 4, 8])), cores=100, precision=precision, **extra)


def random_request(rng: np.random.Generator, i: int, cluster: ClusterState) -> ResourceRequest:
    kind = list(TaskType)[int(rng.integers(4))]
    parts = [_part(rng, cluster)]
    same_node = True
    if rng.random() < 0.08:
        parts.append(_part(rng, cluster))
        same_node = rng.random() < 0.5
    multi = any(p.count > 1 for p in parts)
    topology = ["none", "preferred", "required"][int(rng.integers(3))] if multi else "none"
    labels = {"zone": f"z{int(rng.integers(4))}"} if rng.random() < 0.2 else {}
    return ResourceRequest(
        name=f"t{i}",
        task_type=kind,
        parts=parts,
        same_node=same_node,
        latency_slo_ms=float(rng.integers(1, 200)) if kind == TaskType.INFERENCE and rng.random() < 0.8 else None,
        host_cpu_milli=int(rng.integers(0, 9)) * 1000,
        host_memory_mib=int(rng.choice([0, 8192, 65_536])),
        topology=topology,
        labels=labels,
    )


def _placement_record(p: Any) -> list[Any]:
    """[node, device uuids, score, digest of the grant details and breakdown] (floats as exact reprs)."""
    detail = json.dumps(
        [
            [[g.part, g.memory_mib, g.cores, g.exclusive, g.partition] for g in p.grants],
            {k: repr(v) for k, v in p.breakdown.items()},
        ]
    )
    digest = hashlib.sha256(detail.encode()).hexdigest()[:16]
    return [p.node, [g.uuid for g in p.grants], repr(p.score), digest]


def record(policy: str, nodes: int = 60, decisions: int = 300, seed: int = 11) -> list[Any]:
    rng = np.random.default_rng(seed)
    cluster = build_cluster(nodes, rng)
    engine = Engine(cluster, policy)
    live: deque[str] = deque()
    budget = int(0.7 * len(cluster.uuid_index))
    out: list[Any] = []
    gen = 1
    for i in range(decisions):
        event = rng.random()
        if event < 0.03:  # a device turns unhealthy or recovers
            uuids = sorted(cluster.uuid_index)
            uuid = uuids[int(rng.integers(len(uuids)))]
            cluster.set_health(uuid, Health.UNHEALTHY if rng.random() < 0.6 else Health.HEALTHY)
        elif event < 0.05:
            names = sorted(cluster.nodes)
            cluster.set_schedulable(names[int(rng.integers(len(names)))], bool(rng.random() < 0.5))
        elif event < 0.065:  # a node leaves and comes back with new devices (rows reused, holes)
            names = sorted(cluster.nodes)
            name = names[int(rng.integers(len(names)))]
            for b in cluster.remove_node(name):
                if b.id in live:
                    live.remove(b.id)
            _, devs = _node_devices(int(name[1:]), gen, rng)
            gen += 1
            if rng.random() < 0.7:
                cluster.add_node(name, 64_000, 262_144, devs, {"zone": "z0"})
        request = random_request(rng, i, cluster)
        entry: dict[str, Any] = {"i": i}
        if i % 7 == 0:
            entry["rank"] = [_placement_record(p) for p in engine.rank(request, 5)]
        try:
            placement = engine.place(request)
        except InsufficientResources as exc:
            reasons = json.dumps({k: [str(c) for c in v] for k, v in sorted(exc.reasons.items())})
            entry["fail"] = [len(exc.reasons), hashlib.sha256(reasons.encode()).hexdigest()[:16]] if i % 4 == 0 else 1
            out.append(entry)
            continue
        entry["place"] = _placement_record(placement)
        out.append(entry)
        live.append(engine.book(placement).id)
        while len(live) > budget or (live and rng.random() < 0.1):
            cluster.forget(live.popleft())
    return out


def record_all() -> dict[str, Any]:
    return {policy: record(policy) for policy in POLICIES}


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(record_all(), separators=(",", ":")) + "\n")
    sys.stdout.write(f"wrote {GOLDEN}\n")
