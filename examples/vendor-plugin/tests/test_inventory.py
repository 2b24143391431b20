"""A third-party vendor's models can be named in an inventory: the adapter brings their traits."""

from __future__ import annotations

from hami_devices import discover, load_vendors
from hami_devices.inventory import parse_inventory

INVENTORY = {
    "nodes": [
        {
            "name": "ex-node",
            "devices": [
                {"vendor": "example", "model": "EX-2", "count": 2, "link": "nvlink"},
                {"vendor": "nvidia", "model": "T4", "count": 1},
            ],
        }
    ]
}


def test_inventory_names_example_models() -> None:
    registry = load_vendors()
    adapter = registry.get("example")
    inventory = parse_inventory(INVENTORY, traits_for=lambda vendor, model: registry.get(vendor).traits_for(model))
    devices = discover(inventory, registry=registry)
    example = [d for d in devices if d.info.vendor == "example"]
    assert [d.info.model for d in example] == ["EX-2", "EX-2"]
    assert example[0].info.traits == adapter.traits_for("EX-2")
    assert {p.name for p in example[0].info.partitions} == {"ex.2t", "ex.4t", "ex.8t"}
    handle = example[0].allocate({"parts": [{"vendors": ["example"], "memory_mib": 1024, "cores": 20}]})
    assert handle.grants[0].vendor == "example"
