"""The kube-scheduler extender over HTTP at 1,000 nodes: filter/prioritize latency, bind throughput, over-commits.

The server is ``hami-devices extender`` in its own process (SQLite ledger, the
file-recording binder in place of an API server); this process is kube-scheduler:

1. **Latency.** ``--pods`` pods (60% shares of T4/L4/A30, 15% 2-4 whole H100s, 15%
   Ascend 910B3, 10% MLU370), one at a time as kube-scheduler sends them with
   ``nodeCacheCapable``: filter with the 1,000 node names, prioritize the survivors, bind
   the best; the cluster fills as it goes.  p50/p99 of filter, prioritize and both.
2. **Binds.** ``--binds`` more pods are filtered, then bound by 16 concurrent clients
   (each to a node its filter kept, chosen at random): binds answered per second.
3. **Contention.** 16 clients bind 200 pods to the same 4 nodes at once.
4. **Over-commits.** Every ledger allocation is booked into a fresh, empty copy of the
   cluster by the accounting rules; each one that does not fit is an over-commit.

    python bench/extender.py [--nodes 1000] [--pods 400] [--binds 800] [--seed 7]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hami_devices as hd
from hami_devices.errors import HamiError
from hami_devices.kubernetes.extender import leases

NODE_KINDS = [
    [{"vendor": "nvidia", "model": "T4", "count": 4}, {"vendor": "nvidia", "model": "A30", "count": 2}],
    [{"vendor": "nvidia", "model": "L4", "count": 8}],
    [{"vendor": "nvidia", "model": "H100", "count": 8, "link": "nvlink"}],
    [{"vendor": "ascend", "model": "910B3", "count": 8, "link": "hccs"}],
    [{"vendor": "cambricon", "model": "MLU370-X8", "count": 4}, {"vendor": "nvidia", "model": "T4", "count": 4}],
]


def make_pod(rng: random.Random, i: int) -> dict[str, Any]:
    kind, annotations = rng.random(), {}
    if kind < 0.6:
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(rng.choice([2000, 4000, 8000])),
                  "nvidia.com/gpucores": str(rng.choice([10, 25, 50]))}
        annotations = {"nvidia.com/use-gputype": rng.choice(["T4", "L4", "A30"])}
    elif kind < 0.75:
        limits = {"nvidia.com/gpu": str(rng.choice([2, 4])), "nvidia.com/gpucores": "100"}
        annotations = {"nvidia.com/use-gputype": "H100"}
    elif kind < 0.9:
        limits = {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "16384"}
    else:
        limits = {"cambricon.com/mlu": "1", "cambricon.com/mlu.smlu.vmemory": "24"}
    return {"metadata": {"name": f"p{i}", "namespace": "bench", "uid": f"uid-{i}", "annotations": annotations},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits,
                                                                 "requests": {"cpu": "1", "memory": "2Gi"}}}]}}


class Client:
    def __init__(self, host: str, port: int) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=60)

    def post(self, verb: str, body: Any) -> Any:
        self.conn.request("POST", f"/scheduler/{verb}", json.dumps(body), {"Content-Type": "application/json"})
        response = self.conn.getresponse()
        return json.loads(response.read())


def binding(pod: dict[str, Any], node: str) -> dict[str, str]:
    m = pod["metadata"]
    return {"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"], "Node": node}


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)) * 1000, 2) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--binds", type=int, default=800)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="hami-extender-bench-"))
    inventory = work / "cluster.yaml"
    inventory.write_text(yaml.safe_dump({"nodes": [
        {"name": f"n{i:04d}", "cpu_milli": 128000, "memory_mib": 1048576, "devices": NODE_KINDS[i % len(NODE_KINDS)]}
        for i in range(args.nodes)]}))
    env = {**os.environ, "HAMI_REGION_DIR": str(work / "regions")}
    started = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "hami_devices.cli.main", "extender", "--inventory", str(inventory), "--ledger",
         str(work / "ledger.db"), "--listen", "127.0.0.1:0", "--json", "--binder", f"record:{work / 'binds.jsonl'}",
         "--workers", str(args.clients), "--timeout", "30", "--lease", "60", "--maintenance", "0"],
        stdout=subprocess.PIPE, text=True, env=env)
    assert server.stdout is not None
    info = json.loads(server.stdout.readline())
    start_s = time.perf_counter() - started
    host, port = info["url"].removeprefix("http://").rsplit(":", 1)
    names = [f"n{i:04d}" for i in range(args.nodes)]
    try:
        # 1. latency, one pod at a time
        client = Client(host, int(port))
        filt, prio, both, kept = [], [], [], []
        for i in range(args.pods):
            pod = make_pod(rng, i)
            t0 = time.perf_counter()
            result = client.post("filter", {"Pod": pod, "NodeNames": names})
            t1 = time.perf_counter()
            feasible = result["NodeNames"] or []
            kept.append(len(feasible))
            if not feasible:
                filt.append(t1 - t0)
                continue
            scores = client.post("prioritize", {"Pod": pod, "NodeNames": feasible})
            t2 = time.perf_counter()
            filt.append(t1 - t0)
            prio.append(t2 - t1)
            both.append(t2 - t0)
            best = max(scores, key=lambda s: (s["Score"], [-ord(c) for c in s["Host"]]))["Host"]
            client.post("bind", binding(pod, best))
        # 2. binds with concurrent clients
        pods = [make_pod(rng, args.pods + i) for i in range(args.binds)]
        targets = []
        for pod in pods:
            feasible = client.post("filter", {"Pod": pod, "NodeNames": names})["NodeNames"] or names[:1]
            targets.append(rng.choice(feasible))
        local = threading.local()

        def bind(k: int) -> bool:
            if not hasattr(local, "client"):
                local.client = Client(host, int(port))
            return not local.client.post("bind", binding(pods[k], targets[k]))["Error"]

        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            outcomes = list(pool.map(bind, range(len(pods))))
        bind_s = time.perf_counter() - t0
        # 3. contention: everyone at once on the same four T4 nodes
        hot_nodes = [n for i, n in enumerate(names) if i % len(NODE_KINDS) in (0, 4)][-4:]  # 4 T4s: 12 shares each
        hot = []
        for i in range(200):
            pod = make_pod(rng, args.pods + args.binds + i)
            pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}
            pod["metadata"]["annotations"] = {"nvidia.com/use-gputype": "T4"}
            client.post("filter", {"Pod": pod, "NodeNames": hot_nodes})
            hot.append(pod)
        with ThreadPoolExecutor(args.clients) as pool:
            hot_ok = sum(pool.map(lambda k: not Client(host, int(port)).post(
                "bind", binding(hot[k], hot_nodes[k % 4]))["Error"], range(len(hot))))
    finally:
        server.terminate()
        server.wait(timeout=30)
    # 4. over-commits, judged by the accounting rules on a fresh cluster
    ledger = hd.SqliteLedger(work / "ledger.db")
    fresh = hd.build_engine(inventory).cluster
    handles = ledger.handles()
    overcommits = 0
    for handle in handles:
        try:
            fresh.book(handle)
        except HamiError:
            overcommits += 1
    print(json.dumps({
        "nodes": args.nodes,
        "devices": info["devices"],
        "server_start_s": round(start_s, 2),
        "latency_pods": args.pods,
        "filter_ms": {"p50": pct(filt, 50), "p99": pct(filt, 99), "max": pct(filt, 100)},
        "prioritize_ms": {"p50": pct(prio, 50), "p99": pct(prio, 99)},
        "filter_plus_prioritize_ms": {"p50": pct(both, 50), "p99": pct(both, 99)},
        "feasible_nodes_per_filter_mean": round(float(np.mean(kept)), 1),
        "target_p99_filter_ms": 20,
        "binds": {"clients": args.clients, "answered": len(outcomes), "committed": sum(outcomes),
                  "refused": len(outcomes) - sum(outcomes), "per_s": round(len(outcomes) / bind_s, 1)},
        "contention": {"binds": len(hot), "nodes": 4, "committed": hot_ok},
        "allocations": len(handles),
        "pending_after": sum(leases.pending(h) for h in handles),
        "overcommits": overcommits,
        # The machine is shared: figures only compare with others taken at a similar load.
        "machine": {"cpus": os.cpu_count(), "load_avg_1m_5m_15m": [round(x, 2) for x in os.getloadavg()]},
    }))


if __name__ == "__main__":
    main()
