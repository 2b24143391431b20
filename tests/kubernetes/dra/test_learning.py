"""The DRA allocator teaches its engine's workload mix once per claim, whichever alternatives it tries."""

from __future__ import annotations

from typing import Any

import pytest

from hami_devices.config import HamiConfig
from hami_devices.errors import InsufficientResources
from hami_devices.kubernetes.dra.allocator import DraAllocator
from hami_devices.registry import VendorRegistry
from tests.kubernetes.dra.conftest import claim, exactly

A30 = ('device.attributes["hami-devices.io"].model == "A30"',)


def test_each_claim_is_observed_once(published: list[dict[str, Any]], config: HamiConfig,
                                     registry: VendorRegistry) -> None:
    allocator = DraAllocator(published, config, registry=registry, policy="fragmentation-aware")
    mix = allocator.engine.learned_mix()
    assert mix is not None
    seen = mix.to_dict()["seen"]
    allocator.allocate(claim("half", [exactly("g", selectors=A30, memory="12Gi", cores="50")]))
    with pytest.raises(InsufficientResources):
        allocator.allocate(claim("huge", [exactly("g", selectors=A30, memory="900Gi", cores="50")]))
    assert mix.to_dict()["seen"] == seen + 2
