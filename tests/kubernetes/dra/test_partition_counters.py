"""Partitions beside shares, instance-limited profiles and 1.34's one-card slices (issue 43).

- A share of one card holds that card's counter set (it is shared, not partitioned), so a partition claim must
  land on another idle card of the node rather than be refused, under either policy.
- MIG's ``+me`` profiles may have one instance per GPU (NVIDIA's MIG user guide: media extensions take the GPU's
  only OFA/JPEG engines), though they are published at every 1g placement: a counter of the card says so.
- Under 1.34 rules a slice holds one physical card (the 1.34 allocator checks a share against its slice's first
  device, kubernetes#133705).
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_devices.config import HamiConfig
from hami_devices.errors import InsufficientResources
from hami_devices.kubernetes.dra.allocator import DraAllocator
from hami_devices.kubernetes.dra.publish import publish_inventory
from hami_devices.registry import VendorRegistry

from .conftest import INVENTORY, claim, exactly

PARTITION_CLASS = {"ascend-b": "vnpu.hami-devices.io", "edge-mlu": "smlu.hami-devices.io",
                   "tiers-a": "mig.hami-devices.io", "a100-mig": "mig.hami-devices.io"}
SHARE_CLASS = {"ascend-b": "npu.hami-devices.io", "edge-mlu": "mlu.hami-devices.io",
               "tiers-a": "gpu.hami-devices.io", "a100-mig": "gpu.hami-devices.io"}
PARTITION_MODEL = {"ascend-b": "910B3", "edge-mlu": "MLU370-X8", "tiers-a": "H100", "a100-mig": "A100-40GB"}
ME_PROFILES = {"A30": "1g.6gb+me", "H100": "1g.10gb+me", "A100-40GB": "1g.5gb+me"}
"""NVIDIA's media-extension profiles of the example inventory's models: one instance per GPU each."""


def _devices(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["spec"]["pool"]["name"], d["name"]): d for o in objects if o["kind"] == "ResourceSlice"
            for d in o["spec"].get("devices") or []}


def _card(objects: list[dict[str, Any]], result: dict[str, Any]) -> str:
    """The physical card a result's device is on (a partition's parentDevice)."""
    attrs = _devices(objects)[(result["pool"], result["device"])]["attributes"]
    parent: str = attrs.get("hami-devices.io/parentDevice", {}).get("string", result["device"])
    return parent


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_a_partition_goes_to_another_card_after_a_share(
        published: list[dict[str, Any]], config: HamiConfig, registry: VendorRegistry, policy: str) -> None:
    allocator = DraAllocator(published, config, registry=registry, policy=policy)
    model = 'device.attributes["hami-devices.io"].model == "{}"'
    for pool, partition_class in PARTITION_CLASS.items():
        selector = model.format(PARTITION_MODEL[pool])
        share = allocator.allocate(claim(f"share-{pool}", [exactly(
            "r", SHARE_CLASS[pool], selectors=(selector,), memory="1Gi", cores="10")]))
        (shared,) = share["devices"]["results"]
        assert shared["pool"] == pool and "shareID" in shared
        part = allocator.allocate(claim(f"part-{pool}", [exactly("r", partition_class, selectors=(selector,))]))
        (got,) = part["devices"]["results"]
        assert "shareID" not in got and got["pool"] == pool
        assert _card(published, got) != shared["device"]  # a shared card is not partitioned


def test_media_extension_profiles_consume_a_one_instance_counter(published: list[dict[str, Any]]) -> None:
    sets = {(o["spec"]["pool"]["name"], s["name"]): s["counters"] for o in published if o["kind"] == "ResourceSlice"
            for s in o["spec"].get("sharedCounters") or []}
    seen = 0
    for (pool, _), device in _devices(published).items():
        attrs = device["attributes"]
        profile = attrs.get("hami-devices.io/partition", {}).get("string")
        model = attrs["hami-devices.io/model"]["string"]
        if profile is None or model not in ME_PROFILES:
            continue
        (consumed,) = device["consumesCounters"]
        limits = {k for k in consumed["counters"] if k.endswith("-instances")}
        if profile == ME_PROFILES[model]:
            seen += 1
            (limit,) = limits
            assert consumed["counters"][limit] == {"value": "1"}
            assert sets[(pool, consumed["counterSet"])][limit] == {"value": "1"}
        elif not profile.endswith("+me"):
            assert not limits  # every other profile has an instance at each of its placements
    assert seen >= 7 * 2 + 4 * 2  # H100 and A100 at 7 placements, A30 at 4, two or more cards each


def test_a_second_media_extension_instance_needs_another_gpu(
        published: list[dict[str, Any]], config: HamiConfig, registry: VendorRegistry) -> None:
    allocator = DraAllocator(published, config, registry=registry, policy="binpack")
    profile = 'device.attributes["hami-devices.io"].partition == "1g.10gb+me"'
    cards = []
    for i in range(2):  # tiers-a has two H100s
        got = allocator.allocate(claim(f"me-{i}", [exactly("r", "mig.hami-devices.io", selectors=(profile,))]))
        cards.append(_card(published, got["devices"]["results"][0]))
    assert len(set(cards)) == 2
    with pytest.raises(InsufficientResources):
        allocator.allocate(claim("me-2", [exactly("r", "mig.hami-devices.io", selectors=(profile,))]))
    plain = 'device.attributes["hami-devices.io"].partition == "1g.10gb"'
    allocator.allocate(claim("plain", [exactly("r", "mig.hami-devices.io", selectors=(plain,))]))  # room is left


def test_kubernetes_1_34_slices_hold_one_card_each(config: HamiConfig, registry: VendorRegistry) -> None:
    objects = publish_inventory(INVENTORY, config, registry=registry, kubernetes="1.34")
    slices = [o for o in objects if o["kind"] == "ResourceSlice"]
    for s in slices:
        cards = [d for d in s["spec"]["devices"] if d.get("allowMultipleAllocations")]
        assert len(cards) == 1 and s["spec"]["devices"][0] is cards[0]  # the card first: 1.34 checks that one
    assert len(slices) == 2 + 2 + 2 + 3 + 4 + 4  # every card of the example inventory
