"""A refusal's headline reads as English whatever the part names: "no device free", never "no a device free"."""

from __future__ import annotations

import pytest

import hami_devices as hd
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import MemoryLedger


@pytest.mark.parametrize(
    ("part", "headline"),
    [
        ({}, "no device free"),
        ({"memory_mib": 1024}, "no device with 1 GiB free"),
        ({"cores": 100}, "no whole device free"),
        ({"models": ["T4"]}, "no T4 free"),
    ],
)
def test_a_part_naming_no_device_reads_without_an_article(part: dict[str, object], headline: str) -> None:
    inventory = parse_inventory(
        {"nodes": [{"name": "n", "devices": [{"vendor": "nvidia", "model": "T4", "count": 2}]}]}
    )
    devices = hd.discover(inventory, ledger=MemoryLedger())
    for device in devices:
        device.allocate({"parts": [{"cores": 100}]})
    with pytest.raises(hd.InsufficientResources) as refused:
        hd.allocate(devices, {"parts": [part]})
    assert str(refused.value).startswith(f"no placement for request: {headline}; ")
