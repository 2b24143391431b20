"""MIG mode per node and per device (inventory, node-config), and MIG grants named as on hardware."""

from __future__ import annotations

import json
from typing import Any

import pytest

import hami_devices as hd
from hami_devices.config import parse_config
from hami_devices.errors import InsufficientResources, InvalidConfig, InvalidInventory
from hami_devices.inventory import parse_inventory
from hami_devices.ledger import MemoryLedger

MIG_PART = {"parts": [{"partition": "auto", "memory_mib": 9000}]}


def _node(name: str, **extra: Any) -> dict[str, Any]:
    group = {"vendor": "nvidia", "model": "A100-80GB", "count": 1, **extra.pop("group", {})}
    return {"name": name, "devices": [group], **extra}


def _devices(nodes: list[dict[str, Any]], config: dict[str, Any] | None = None) -> dict[str, hd.Device]:
    cfg = parse_config({"device-plugin": {"isolation-level": "none"}, **(config or {})})
    found = hd.discover(parse_inventory({"nodes": nodes}), config=cfg, ledger=MemoryLedger())
    return {d.info.node: d for d in found}


def _grants_mig(device: hd.Device) -> bool:
    try:
        handle = device.allocate(MIG_PART)
    except InsufficientResources:
        return False
    device.release(handle)
    return True


def test_the_inventory_sets_mig_mode_per_node_and_per_device_group() -> None:
    devices = _devices([
        _node("mig", mig_mode="flexible"),
        _node("plain"),
        _node("group-off", mig_mode="flexible", group={"mig_mode": "disabled"}),
    ])  # device-plugin.mig-mode stays disabled: the default for every device that sets nothing
    assert _grants_mig(devices["mig"])
    assert not _grants_mig(devices["plain"]) and not _grants_mig(devices["group-off"])
    assert [p.name for p in devices["mig"].info.partitions][:1] == ["1g.10gb"]
    assert devices["plain"].info.partitions == []  # nothing offered that cannot be granted
    # A plain share still goes where MIG is not used.
    assert devices["plain"].allocate({"parts": [{"memory_mib": 1000, "cores": 10}]}).grants[0].partition is None


def test_node_config_sets_mig_mode_over_the_inventory() -> None:
    config = {"device-plugin": {"mig-mode": "flexible", "isolation-level": "none"},
              "node-config": [{"name": "off-*", "mig-mode": "disabled"},
                              {"labels": {"pool": "mig"}, "mig-mode": "flexible"}]}
    devices = _devices(
        [_node("off-1"), _node("off-2", mig_mode="flexible", labels={"pool": "mig"}), _node("on-1")], config
    )
    assert not _grants_mig(devices["off-1"])
    assert _grants_mig(devices["off-2"])  # the later entry that selects it wins, and over the inventory
    assert _grants_mig(devices["on-1"])  # no entry: the configuration's default


def test_the_engine_places_mig_requests_on_nodes_whose_mode_allows_them() -> None:
    inventory = parse_inventory({"nodes": [_node(f"plain-{i}") for i in range(3)] + [_node("mig", mig_mode="strict",
        group={"attributes": {"mig.instances": json.dumps([{"profile": "1g.10gb", "start": 3, "size": 1}])}})]})
    engine = hd.build_engine(inventory, {"device-plugin": {"isolation-level": "none"}})
    placement = engine.place(MIG_PART)
    assert [g.node for g in placement.grants] == ["mig"]
    assert placement.grants[0].partition == "1g.10gb"


def test_bad_mig_modes_are_named() -> None:
    with pytest.raises(InvalidInventory) as err:
        parse_inventory({"nodes": [_node("a", mig_mode="sometimes")]})
    assert "nodes.0.mig_mode" in str(err.value)
    with pytest.raises(InvalidInventory) as err:
        parse_inventory({"nodes": [_node("a", group={"attributes": {"device-plugin.mig-mode": "on"}})]})
    assert "nodes.0.devices.0.attributes" in str(err.value) and "'on'" in str(err.value)
    with pytest.raises(InvalidConfig) as cfg_err:
        parse_config({"node-config": [{"name": "a", "mig-mode": "yes"}]})
    assert "mig-mode" in str(cfg_err.value)


def test_a_simulated_flexible_grant_names_its_mig_device() -> None:
    device = _devices([_node("mig", mig_mode="flexible")])["mig"]
    first, second = device.allocate(MIG_PART), device.allocate(MIG_PART)
    ids = [h.grants[0].partition_uuid for h in (first, second)]
    assert all(i is not None and i.startswith("MIG-") and len(i) == 40 for i in ids) and ids[0] != ids[1]
    for handle in (first, second):
        grant = handle.grants[0]
        assert handle.environments["mig/nvidia"]["CUDA_VISIBLE_DEVICES"] == grant.partition_uuid != grant.uuid
    device.release(first)
    again = device.allocate(MIG_PART)  # the same state names the same instance: the freed id comes back
    assert again.grants[0].partition_uuid == ids[0]
    # Another ledger over the same inventory names it alike: the id is a function of the GPU's state.
    other = _devices([_node("mig", mig_mode="flexible")])["mig"]
    assert other.allocate(MIG_PART).grants[0].partition_uuid == ids[0]


def test_a_strict_grant_names_the_inventory_instance_by_its_placement() -> None:
    instances = [{"profile": "1g.10gb", "start": 0, "size": 1}, {"profile": "1g.10gb", "start": 1, "size": 1},
                 {"profile": "2g.20gb", "start": 4, "size": 2, "uuid": "MIG-given"}]
    node = _node("s", mig_mode="strict", group={"attributes": {"mig.instances": json.dumps(instances)}})
    device = _devices([node])["s"]
    a, b = device.allocate(MIG_PART), device.allocate(MIG_PART)
    with pytest.raises(InsufficientResources):
        device.allocate({"parts": [{"partition": "1g.10gb"}]})  # strict: only the two 1g.10gb instances that exist
    named = {a.grants[0].partition_uuid, b.grants[0].partition_uuid}
    assert len(named) == 2 and all(n is not None and n.startswith("MIG-") for n in named)
    assert _devices([node])["s"].allocate(MIG_PART).grants[0].partition_uuid in named  # by placement, not by chance
    big = device.allocate({"parts": [{"partition": "2g.20gb"}]})
    assert big.grants[0].partition_uuid == "MIG-given"
    assert big.environments["s/nvidia"]["CUDA_VISIBLE_DEVICES"] == "MIG-given"
