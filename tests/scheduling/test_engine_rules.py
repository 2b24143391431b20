"""The engine rounds and caps each device exactly as its vendor adapter does (the disagreements once seen)."""

from __future__ import annotations

from pathlib import Path

import pytest

import hami_devices as hd
from hami_devices.assembly import build_engine
from hami_devices.ledger import MemoryLedger
from hami_devices.models import ResourceRequest
from hami_devices.plugin import Grant

from ..conftest import EXAMPLES


def _both(inventory: Path, request: ResourceRequest, config: Path | None = None) -> tuple[Grant, Grant]:
    engine = build_engine(inventory, config)
    placed = engine.place(request).grants[0]
    devices = hd.discover(inventory, config=hd.load_config(config) if config else None, ledger=MemoryLedger())
    granted = hd.allocate(devices, request).grants[0]
    return placed, granted


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        ({"models": ["310P"], "memory_mib": 4000, "cores": 25}, ("vir02", 6144, 25)),
        ({"models": ["910B3"], "memory_mib": 4096, "cores": 30}, ("vir10_3c_32g", 32768, 50)),
        ({"models": ["MLU370-X8"], "memory_mib": 3000, "cores": 25, "partition": "auto"}, ("smlu.q25.m3072", 3072, 25)),
    ],
)
def test_vendor_rounding_is_the_engines(part: dict[str, object], expected: tuple[str, int, int]) -> None:
    placed, granted = _both(EXAMPLES / "cluster.yaml", ResourceRequest.single(**part))
    assert placed == granted
    assert (placed.partition, placed.memory_mib, placed.cores) == expected


def test_memory_fraction_and_overcommit_reach_the_engine() -> None:
    config = EXAMPLES / "config-multi-tenant.yaml"  # gpu-memory-fraction 0.95: a T4 gives 14592 MiB
    engine = build_engine(EXAMPLES / "cluster.yaml", config)
    with pytest.raises(hd.InsufficientResources) as info:
        engine.place(ResourceRequest.single(models=["T4"], memory_mib=15_000))
    assert info.value.permanent is True
    assert hd.ReasonCode.CARD_INSUFFICIENT_MEMORY in info.value.codes
    placed, granted = _both(EXAMPLES / "cluster.yaml", ResourceRequest.single(models=["T4"], memory_mib=14_592), config)
    assert placed == granted
