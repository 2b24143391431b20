"""A bounded load on loopback: filter + prioritize + bind of pods over 1,000 nodes, 8 clients at once.

Bounded in count (160 pods) and time (stops sending after 25 s); checks behaviour, not speed
(``bench/extender.py`` measures that): every answer well-formed, every filter keeps every
feasible node, binds commit exactly what the ledger holds, nothing over-committed.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

import hami_devices as hd
from hami_devices.kubernetes.extender import Extender, ServerSettings, leases, serve
from hami_devices.testing import RecordingBinder
from tests.kubernetes.extender.conftest import Client, assert_no_overcommit, binding, gpu, pod

NODE_KINDS = [
    [{"vendor": "nvidia", "model": "T4", "count": 4}, {"vendor": "nvidia", "model": "A30", "count": 2}],
    [{"vendor": "nvidia", "model": "L4", "count": 8}],
    [{"vendor": "nvidia", "model": "H100", "count": 8, "link": "nvlink"}],
    [{"vendor": "ascend", "model": "910B3", "count": 8, "link": "hccs"}],
    [{"vendor": "cambricon", "model": "MLU370-X8", "count": 4}, {"vendor": "nvidia", "model": "T4", "count": 4}],
]
PODS, CLIENTS, BUDGET_S = 160, 8, 25.0


def big_inventory(path: Path, nodes: int = 1000) -> Path:
    data = {"nodes": [{"name": f"n{i:04d}", "cpu_milli": 64000, "memory_mib": 262144,
                       "devices": NODE_KINDS[i % len(NODE_KINDS)]} for i in range(nodes)]}
    path.write_text(yaml.safe_dump(data))
    return path


def random_pod(rng: random.Random, i: int) -> dict[str, Any]:
    kind = rng.random()
    if kind < 0.6:
        limits = gpu(1, rng.choice([2000, 4000, 8000]), rng.choice([10, 25, 50]))
        annotations = {"nvidia.com/use-gputype": rng.choice(["T4", "L4", "A30"])}
    elif kind < 0.75:
        limits, annotations = gpu(rng.choice([2, 4]), None, 100), {"nvidia.com/use-gputype": "H100"}
    elif kind < 0.9:
        limits, annotations = {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "16384"}, {}
    else:
        limits, annotations = {"cambricon.com/mlu": "1", "cambricon.com/mlu.smlu.vmemory": "24"}, {}
    return pod(f"load-{i}", limits, annotations=annotations, cpu="1")


def test_filter_prioritize_bind_at_1000_nodes(tmp_path: Path) -> None:
    inventory = big_inventory(tmp_path / "big.yaml")
    ledger = hd.SqliteLedger(tmp_path / "ledger.db")
    ext = Extender(inventory, ledger, RecordingBinder())
    names = [f"n{i:04d}" for i in range(1000)]
    srv = serve(ext, ServerSettings(port=0, maintenance_s=0, workers=8, timeout_s=30))
    rng = random.Random(5)
    pods = [random_pod(rng, i) for i in range(PODS)]
    stop_at = time.monotonic() + BUDGET_S
    local = threading.local()

    def schedule(p: dict[str, Any]) -> tuple[str, str | None] | None:
        if time.monotonic() > stop_at:
            return None
        if not hasattr(local, "client"):
            local.client = Client(srv.url)
        status, result = local.client.post("filter", {"Pod": p, "NodeNames": names})
        assert status == 200 and result["Error"] == ""
        feasible = result["NodeNames"]
        # every node is accounted for exactly once
        assert len(feasible) + len(result["FailedNodes"]) + len(result["FailedAndUnresolvableNodes"]) == 1000
        if not feasible:
            return p["metadata"]["uid"], None
        status, scores = local.client.post("prioritize", {"Pod": p, "NodeNames": feasible})
        assert status == 200 and [s["Host"] for s in scores] == feasible
        assert all(0 <= s["Score"] <= 10 for s in scores)  # 0: filled by another bind since the filter
        top = max(scores, key=lambda s: (s["Score"], [-ord(ch) for ch in s["Host"]]))
        if top["Score"] == 0:
            return p["metadata"]["uid"], None
        best = top["Host"]
        status, answer = local.client.post("bind", binding(p, best))
        assert status == 200
        return p["metadata"]["uid"], best if not answer["Error"] else None

    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            outcomes = [o for o in pool.map(schedule, pods) if o is not None]
    finally:
        srv.close()
    assert len(outcomes) >= 40  # even a loaded machine gets through a fair share within the budget
    bound = {leases.handle_id(uid): node for uid, node in outcomes if node is not None}
    held = {h.id: leases.node_of(h) for h in ledger.handles()}
    assert held == bound
    assert assert_no_overcommit(inventory, ledger) == len(bound)
