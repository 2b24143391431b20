"""Every vendor's partitions against kube-scheduler's allocator (issue 43's held-out findings).

On ``partition-inventory.yaml`` (two cards each of the 910B4, 310P, MLU370-X8, H100 and A30), claims in order:
a share of one card of a node, then partition claims of every profile of that node; on the MIG nodes also the
media-extension profile twice on one named GPU (one instance per GPU), then anywhere.  Each claim is judged as in
``test_allocator_peer`` (``check``): we allocate it exactly when the official allocator can, and our devices are
ones it accepts.  Beyond agreement, the first partition after a share is allocated (on the other card), and the
second ``+me`` instance on one GPU is refused -- by both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.kubernetes.peers import dra_world
from tests.kubernetes.peers.conftest import Peer
from tests.kubernetes.peers.test_allocator_peer import check

INVENTORY = Path(__file__).with_name("partition-inventory.yaml")
NODES = {  # node -> (model, vendor class, its partition profiles, its media-extension profile)
    "npu-b4": ("910B4", "npu.hami-devices.io", ["vir05_1c_8g", "vir10_3c_16g"], None),
    "npu-310p": ("310P", "npu.hami-devices.io", ["vir01", "vir02", "vir04"], None),
    "mlu": ("MLU370-X8", "mlu.hami-devices.io", ["smlu.q12.m6144", "smlu.q25.m12288", "smlu.q50.m24576"], None),
    "mig-h100": ("H100", "gpu.hami-devices.io", ["1g.10gb", "2g.20gb", "3g.40gb"], "1g.10gb+me"),
    "mig-a30": ("A30", "gpu.hami-devices.io", ["1g.6gb", "2g.12gb"], "1g.6gb+me"),
}
OWN = 'device.attributes["hami-devices.io"]'


def _request(device_class: str, *selectors: str, **capacity: str) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"deviceClassName": device_class,
                            "selectors": [{"cel": {"expression": s}} for s in selectors]}
    if capacity:
        body["capacity"] = {"requests": capacity}
    return [{"name": "r", "exactly": body}]


def share_then_partitions() -> list[dict[str, Any]]:
    out = []
    for node, (model, share_class, profiles, _) in NODES.items():
        on = f'{OWN}.model == "{model}"'
        out.append(dra_world.claim(f"{node}-share", _request(share_class, on, memory="1Gi", cores="10")))
        for profile in profiles:
            for k in range(2):
                out.append(dra_world.claim(f"{node}-{profile}-{k}".replace("_", "-"), _request(
                    "partition.hami-devices.io", on, f'{OWN}.partition == "{profile}"')))
    return out


def media_extensions() -> list[dict[str, Any]]:
    """Per MIG node: the ``+me`` profile twice on gpu-1, then twice anywhere."""
    out = []
    for node, (model, _, _, media) in NODES.items():
        if media is None:
            continue
        on = (f'{OWN}.model == "{model}"', f'{OWN}.partition == "{media}"')
        for k in range(2):
            out.append(dra_world.claim(f"{node}-me-gpu1-{k}", _request(
                "mig.hami-devices.io", *on, f'{OWN}.parentDevice == "gpu-1"')))
        for k in range(2):
            out.append(dra_world.claim(f"{node}-me-{k}", _request("mig.hami-devices.io", *on)))
    return out


def _allocated(claims: list[dict[str, Any]], policy: str) -> dict[str, bool]:
    objects = dra_world.published(dra_world.RELEASE_RULES["latest"], INVENTORY)
    return {c["metadata"]["name"]: bool((c.get("status") or {}).get("allocation"))
            for c in dra_world.allocate_in_order(objects, claims, policy)}


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_partitions_after_a_share_agree_with_kubernetes(peer: Peer, newest_peer: Peer, policy: str) -> None:
    check(peer, newest_peer, share_then_partitions(), inventory=INVENTORY, policy=policy)
    if peer.release == "latest":
        ours = _allocated(share_then_partitions(), policy)
        for node, (_, _, profiles, _) in NODES.items():
            assert ours[f"{node}-share"]
            assert ours[f"{node}-{profiles[0]}-0".replace("_", "-")], f"{node}: partition refused after a share"


def test_one_media_extension_instance_per_gpu_agrees_with_kubernetes(peer: Peer, newest_peer: Peer) -> None:
    check(peer, newest_peer, media_extensions(), inventory=INVENTORY, policy="binpack")
    ours = _allocated(media_extensions(), "binpack")
    for node in ("mig-h100", "mig-a30"):
        got = [ours[f"{node}-me-gpu1-0"], ours[f"{node}-me-gpu1-1"], ours[f"{node}-me-0"], ours[f"{node}-me-1"]]
        assert got == [True, False, True, False], node  # one a GPU, two GPUs
