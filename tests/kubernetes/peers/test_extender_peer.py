"""``hami-devices extender`` through kube-scheduler's own extender client (``pkg/scheduler/extender.go``).

The extender runs as the CLI runs it; the client is configured from ``examples/extender/
kube-scheduler-config.yaml`` (decoded, defaulted and validated by kube-scheduler's config
code), pointed at it, in both ``nodeCacheCapable`` modes.  Pods are built in Go with
``resource.MustParse``, so quantities reach the extender in the client's canonical form
(``4000`` is sent as ``"4k"``).  Binds go to the file-recording binder, which the test reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hami_devices.testing import FileRecordingBinder
from tests.conftest import EXAMPLES
from tests.kubernetes.peers.conftest import Peer

CONFIG = EXAMPLES / "extender" / "kube-scheduler-config.yaml"
INVENTORY = EXAMPLES / "cluster.yaml"
NODES = ["h100-a", "a30-a", "t4-0", "t4-1", "ascend-910b3-a", "ascend-310p-edge", "mlu370-a", "mixed-edge"]
# spread between nodes is the node policy (HAMi: the gpu-scheduler-policy spreads over a node's cards)
SPREAD_T4 = {"nvidia.com/use-gputype": "T4", "hami.io/node-scheduler-policy": "spread"}
T4_MIB = 15360


def pod(name: str, limits: dict[str, str], *, priority: int | None = None, node: str | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "annotations": annotations or {},
                           "containers": [{"limits": limits, "requests": {"cpu": "500m", "memory": "1Gi"}}]}
    if priority is not None:
        out["priority"] = priority
    if node is not None:
        out["node"] = node
    return out


def gpu(memory: str, cores: str | None = None) -> dict[str, str]:
    out = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": memory}
    if cores is not None:
        out["nvidia.com/gpucores"] = cores
    return out


LOW = [pod(f"low-{i}", gpu("15000"), priority=1, annotations={"hami-devices.io/preemptible": "true",
                                                             "nvidia.com/use-gputype": "T4"}) for i in range(4)]
HIGH = pod("high", gpu("8000"), priority=100, annotations={"nvidia.com/use-gputype": "T4"})


@pytest.fixture
def extender(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The extender as an operator starts it (the CLI, its own process), binding to a recording file."""
    record = tmp_path / "binds.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hami_devices.cli.main", "extender", "--inventory", str(INVENTORY),
         "--ledger", str(tmp_path / "ledger.db"), "--listen", "127.0.0.1:0", "--json",
         "--binder", f"record:{record}", "--maintenance", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        raise AssertionError(proc.stderr.read() if proc.stderr else "no start-up line")
    try:
        yield json.loads(line)["url"], record
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def scenario(url: str, cache_capable: bool) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []

    def add(verb: str, p: dict[str, Any], **more: Any) -> int:
        steps.append({"verb": verb, "pod": p, **more})
        return len(steps) - 1

    small = pod("inference-0", gpu("4000", "30"), annotations=SPREAD_T4)
    index = {
        "filter small": add("filter", small, nodes=["t4-0", "t4-1", "h100-a"]),
        "bind small": add("bind", small, node="t4-0"),
        "prioritize after bind": add("prioritize", pod("inference-1", gpu("4000"), annotations=SPREAD_T4),
                                     nodes=["t4-0", "t4-1"]),
        "filter 16000": add("filter", pod("big", gpu("16000")), nodes=["t4-0", "t4-1", "h100-a"]),
        "filter fraction": add("filter", pod("fraction", gpu("1500m")), nodes=["t4-0"]),
        "bind unknown": add("bind", pod("never-filtered", gpu("1000")), node="t4-1"),
    }
    for i, low in enumerate(LOW):
        add("filter", low, nodes=["t4-1"])
        index[f"bind low-{i}"] = add("bind", low, node="t4-1")
    index["filter high"] = add("filter", HIGH, nodes=["t4-1"])
    index["preempt high"] = add("preempt", HIGH, nodes=[], victims={"t4-1": []})
    index["npu"] = add("filter", pod("npu", {"huawei.com/Ascend910B3": "1"}), nodes=["ascend-910b3-a"])
    index["cpu only"] = add("filter", pod("cpu-only", {}), nodes=["t4-0"])
    return {
        "config": str(CONFIG), "urlPrefix": url + "/scheduler", "nodeCacheCapable": cache_capable,
        "nodes": [{"name": n} for n in NODES],
        "running": [{**low, "node": "t4-1"} for low in LOW],
        "steps": steps, "index": index,
    }


@pytest.mark.parametrize("cache_capable", [True, False], ids=["nodeCacheCapable", "nodeObjects"])
def test_through_kube_schedulers_client(peer: Peer, extender: tuple[str, Path], cache_capable: bool) -> None:
    url, record = extender
    request = scenario(url, cache_capable)
    index = request.pop("index")
    answer = peer.run("extender", request)
    assert answer["extender"]["nodeCacheCapable"] is cache_capable
    assert answer["extender"]["weight"] == 5
    steps = answer["steps"]

    def step(name: str) -> dict[str, Any]:
        found: dict[str, Any] = steps[index[name]]
        return found

    # A 4000 MiB request, sent by the client as "4k", is granted 4000 MiB.
    small = step("filter small")
    assert small["sent"]["nvidia.com/gpumem"] == "4k"
    assert small["error"] is None and sorted(small["nodes"]) == ["t4-0", "t4-1"]
    assert set(small.get("failed", {})) | set(small.get("unresolvable", {})) == {"h100-a"}  # use-gputype T4
    assert step("bind small")["error"] is None
    bound = next(r for r in FileRecordingBinder(record).records() if r["name"] == "inference-0")
    assert bound["node"] == "t4-0"
    grants = json.loads(bound["annotations"]["hami-devices.io/grants"])
    assert [g["memory_mib"] for g in grants] == [4000]
    environment = json.loads(bound["annotations"]["hami-devices.io/environments"])
    assert any(env.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "4000m" for env in environment.values()), environment

    # Spread after that bind: the empty T4 node scores above the used one.
    scores = step("prioritize after bind")["scores"]
    assert scores["t4-1"] > scores["t4-0"], scores

    # "16k" is 16000 MiB: more than a T4 holds, so only the H100 node passes.
    big = step("filter 16000")
    assert big["sent"]["nvidia.com/gpumem"] == "16k"
    assert big["nodes"] == ["h100-a"]
    assert set(big.get("unresolvable", {})) == {"t4-0", "t4-1"}  # never fits a 15360 MiB card, not even empty

    # Errors reach kube-scheduler with their text (Error on HTTP 200).
    fraction = step("filter fraction")
    assert fraction["error"] is not None and "nvidia.com/gpumem" in fraction["error"]
    assert "whole number" in fraction["error"]
    unknown = step("bind unknown")
    assert unknown["error"] is not None and "was not filtered by this extender" in unknown["error"]

    # Preemption: the victims we name are pods kube-scheduler can find on that node.
    for i in range(4):
        assert step(f"bind low-{i}")["error"] is None
    high = step("filter high")
    assert high.get("nodes", []) == [] and "t4-1" in high.get("failed", {})  # full now, but preemption can help
    preempt = step("preempt high")
    assert preempt["error"] is None
    assert len(preempt["victims"]["t4-1"]) == 1 and preempt["victims"]["t4-1"][0].startswith("uid-low-")

    # managedResources: kube-scheduler calls the extender for a device pod, not for a CPU-only one.
    assert step("npu")["interested"] and step("npu")["nodes"] == ["ascend-910b3-a"]
    assert not step("cpu only")["interested"]
