"""Prioritize after a bind: the node's device occupancy counts, in the node policy's direction
(``hami.io/node-scheduler-policy``; HAMi's gpu-scheduler-policy only orders a node's own cards)."""

from __future__ import annotations

from tests.kubernetes.extender.conftest import Client, binding, gpu, pod


def _scores(client: Client, policy: str, name: str) -> dict[str, int]:
    p = pod(name, gpu(1, 4000), annotations={"hami.io/node-scheduler-policy": policy, "nvidia.com/use-gputype": "T4"})
    status, answer = client.post("prioritize", {"Pod": p, "NodeNames": ["t4-0", "t4-1"]})
    assert status == 200
    return {hp["Host"]: hp["Score"] for hp in answer}


def test_spread_prefers_the_empty_node_and_binpack_the_used_one(client: Client) -> None:
    assert len(set(_scores(client, "spread", "before").values())) == 1  # two empty T4 nodes: a tie
    first = pod("first", gpu(1, 4000), annotations={"nvidia.com/use-gputype": "T4"})
    assert client.post("filter", {"Pod": first, "NodeNames": ["t4-0"]})[1]["NodeNames"] == ["t4-0"]
    assert client.post("bind", binding(first, "t4-0"))[1] == {"Error": ""}
    # Both nodes still have an empty card, so device scores alone tie (the bug: 7 and 7 under spread).
    spread = _scores(client, "spread", "after-spread")
    assert spread["t4-1"] > spread["t4-0"], spread
    binpack = _scores(client, "binpack", "after-binpack")
    assert binpack["t4-0"] > binpack["t4-1"], binpack
