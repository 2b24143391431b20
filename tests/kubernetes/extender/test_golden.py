"""Golden exchanges in the exact wire format of k8s.io/kube-scheduler/extender/v1, one scenario per file.

Each step posts a request to a real loopback server and compares the status and the whole
response body with the golden file: every key (Go field names), every null, every reason.
``HAMI_REGEN_GOLDEN=1`` rewrites the files (review the diff before committing).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from hami_devices.errors import InvalidRequest
from hami_devices.kubernetes.extender import wire
from tests.kubernetes.extender.conftest import GOLDEN, Client, binding, gpu, pod

SMALL = pod("small", gpu(1, 4000, 30), annotations={"nvidia.com/use-gputype": "T4"}, cpu="500m")
ALL_NODES = ["h100-a", "a30-a", "t4-0", "t4-1", "ascend-910b3-a", "ascend-310p-edge", "mlu370-a", "mixed-edge"]


def node_object(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"zone": "z"}},
            "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "4"}}}


def low(i: int, *, preemptible: bool = True, priority: int = 1) -> dict[str, Any]:
    return pod(f"low-{i}", gpu(1, 15000), priority=priority,
               annotations={"hami-devices.io/preemptible": "true" if preemptible else "false"})


HIGH = pod("high", gpu(1, 8000), priority=100)

FILTER_STEPS: list[tuple[str, Any]] = [
    ("filter", {"Pod": SMALL, "NodeNames": [*ALL_NODES, "ghost"]}),
    ("filter", {"Pod": SMALL, "Nodes": {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                                        "items": [node_object("t4-0"), node_object("a30-a")]}}),
    ("filter", {"Pod": pod("cpu-only", cpu="2"), "NodeNames": ["t4-0", "h100-a"]}),
    ("filter", {"Pod": pod("too-big", gpu(1, 20000)), "NodeNames": ["t4-0", "h100-a", "mlu370-a"]}),
    ("filter", {"Pod": pod("npu", {"huawei.com/Ascend910B3": "2", "huawei.com/Ascend910B3-memory": "16384"}),
                "NodeNames": ["ascend-910b3-a", "ascend-310p-edge"]}),
    ("filter", {"Pod": pod("mlu", {"cambricon.com/mlu": "1", "cambricon.com/mlu.smlu.vmemory": "16",
                                   "cambricon.com/mlu.smlu.vcore": "25"}), "NodeNames": ["mlu370-a", "mixed-edge"]}),
    ("filter", {"Pod": pod("bad", {"nvidia.com/gpu": "one"}), "NodeNames": ["t4-0"]}),
    ("filter", b'{"Pod": '),
    ("filter", {"NodeNames": ["t4-0"]}),
]

PRIORITIZE_STEPS: list[tuple[str, Any]] = [
    ("prioritize", {"Pod": SMALL, "NodeNames": ["t4-0", "t4-1", "mixed-edge"]}),
    ("prioritize", {"Pod": pod("spread", gpu(1, 4000), annotations={"hami.io/node-scheduler-policy": "spread"}),
                    "NodeNames": ["h100-a", "a30-a", "t4-0"]}),
    ("prioritize", {"Pod": pod("cpu-only", cpu="2"), "NodeNames": ["t4-0", "h100-a"]}),
    ("prioritize", b"[1, 2"),
]

BIND_PREEMPT_STEPS: list[tuple[str, Any]] = [
    *[step for i in range(4) for step in (
        ("filter", {"Pod": low(i, preemptible=i < 3, priority=1 if i < 3 else 0), "NodeNames": ["t4-0"]}),
        ("bind", binding(low(i), "t4-0")),
    )],
    ("bind", binding(low(0), "t4-0")),  # a retry of a committed bind: nothing new
    ("filter", {"Pod": HIGH, "NodeNames": ["t4-0", "t4-1"]}),
    ("preempt", {"Pod": HIGH, "NodeNameToMetaVictims": {
        "t4-0": {"Pods": [], "NumPDBViolations": 0}, "h100-a": {"Pods": [], "NumPDBViolations": 0}}}),
    ("preempt", {"Pod": HIGH, "NodeNameToVictims": {"t4-0": {"Pods": [low(1)], "NumPDBViolations": 1}}}),
    ("preempt", {"Pod": pod("cpu-only", cpu="2"), "NodeNameToMetaVictims": {
        "t4-0": {"Pods": [{"UID": "someone"}], "NumPDBViolations": 0}}}),
    ("bind", binding(HIGH, "t4-0")),
    ("bind", binding(HIGH, "ghost")),
    ("bind", binding(pod("never-filtered"), "t4-1")),
    ("bind", {"PodName": "x", "PodNamespace": "default", "Node": "t4-0"}),
    ("bind", binding(pod("cpu-only", cpu="2"), "t4-1")),
]

SCENARIOS = {"filter": FILTER_STEPS, "prioritize": PRIORITIZE_STEPS, "bind-preempt": BIND_PREEMPT_STEPS}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_golden(scenario: str, client: Client) -> None:
    got = []
    for verb, body in SCENARIOS[scenario]:
        status, answer = client.post(verb, body)
        got.append({"verb": verb, "request": body.decode() if isinstance(body, bytes) else body,
                    "status": status, "response": answer})
    path = GOLDEN / f"{scenario}.json"
    if os.environ.get("HAMI_REGEN_GOLDEN"):
        path.write_text(json.dumps(got, indent=1) + "\n")
    expected = json.loads(path.read_text())
    assert len(got) == len(expected)
    for step, (mine, gold) in enumerate(zip(got, expected, strict=True)):
        assert mine == gold, f"{scenario} step {step} ({mine['verb']}) differs from the golden file"


def test_golden_keys_are_the_go_field_names() -> None:
    """Every response in the golden files uses exactly the Go names of its result type."""
    shapes = {
        "filter": {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"},
        "bind": {"Error"},
        "preempt": {"NodeNameToMetaVictims"},
    }
    for path in GOLDEN.glob("*.json"):
        for step in json.loads(path.read_text()):
            response, verb = step["response"], step["verb"]
            if verb == "prioritize" and step["status"] == 200:
                assert all(set(hp) == {"Host", "Score"} and 0 <= hp["Score"] <= 10 for hp in response)
            elif verb in shapes and (step["status"] == 200 or verb == "filter"):
                assert set(response) == shapes[verb], (path.name, step)
                if verb == "preempt":
                    for victims in response["NodeNameToMetaVictims"].values():
                        assert set(victims) == {"Pods", "NumPDBViolations"}
                        assert all(set(p) == {"UID"} for p in victims["Pods"])
            else:
                assert set(response) == {"Error"} and response["Error"], (path.name, step)


def test_node_names_must_be_non_empty_strings() -> None:
    class Name(str):
        pass

    body = {"Pod": pod("p", gpu(1))}
    assert wire.parse_args({**body, "NodeNames": ["a", Name("b")]}).node_names == ["a", "b"]
    for bad in (["a", ""], ["a", 1], ["a", None], "a"):
        with pytest.raises(InvalidRequest, match="NodeNames"):
            wire.parse_args({**body, "NodeNames": bad})
