"""Invalid inventories, configurations and workloads give typed errors naming what was wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_devices import InvalidConfig, InvalidInventory, InvalidRequest, load_config
from hami_devices.config import parse_config
from hami_devices.inventory import parse_inventory
from hami_devices.scheduler import load_inventory
from hami_devices.workload import load_workload, parse_workload


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("yaml_text", "field"),
    [
        ("scheduler: {policy: 3}", "scheduler.policy"),
        ("device-plugin: {mig-mode: sometimes}", "device-plugin.mig-mode"),
        ("device-plugin: {memory-overcommit: 0.5}", "device-plugin.memory-overcommit"),
        ("device-plugin: {split-count: 0}", "device-plugin.split-count"),
        (
            "scheduler: {resource-allocation: {gpu-memory-fraction: 2}}",
            "scheduler.resource-allocation.gpu-memory-fraction",
        ),
        ("device-plugin: {colour: red}", "device-plugin.colour"),
        ("- just\n- a list", "<root>"),
        ("scheduler: [unclosed", "<yaml>"),
    ],
)
def test_config_errors_name_key_and_file(tmp_path: Path, yaml_text: str, field: str) -> None:
    path = write(tmp_path, "c.yaml", yaml_text)
    with pytest.raises(InvalidConfig) as info:
        load_config(path)
    assert info.value.field == field
    assert str(path) in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_config_keys_use_the_documented_names() -> None:
    config = parse_config({"scheduler": {"policy": "spread"}, "device-plugin": {"mig-mode": "strict"}})
    assert config.scheduler.policy == "spread"
    assert config.device_plugin.mig_mode == "strict"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"nodes": []}, "nodes"),
        ({"nodes": [{"name": "a", "devices": [{"vendor": "nvidia", "model": "Z9"}]}]}, "nodes.0.devices.0.model"),
        ({"nodes": [{"name": "a", "devices": [{"vendor": "nvidia", "model": "T4", "count": 0}]}]},
         "nodes.0.devices.0.count"),
        ({"nodes": [{"name": "a", "devices": [{"vendor": "nvidia", "model": "T4", "unhealthy": [4]}]}]},
         "nodes.0.devices.0.unhealthy"),
        ({"nodes": [{"name": "a"}, {"name": "a"}]}, "nodes.1.name"),
        ({"nodes": [{"name": "a", "gpus": 3}]}, "nodes.0.gpus"),
    ],
)
def test_inventory_errors_name_the_field(data: object, field: str) -> None:
    with pytest.raises(InvalidInventory) as info:
        parse_inventory(data, source="inv.yaml")
    assert info.value.field == field
    assert "inv.yaml" in str(info.value)


def test_inventory_file_that_is_not_yaml(tmp_path: Path) -> None:
    with pytest.raises(InvalidInventory) as info:
        load_inventory(write(tmp_path, "i.yaml", "nodes: [\n"))
    assert info.value.field == "<yaml>"


def test_workload_errors_name_the_task_field(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_workload({"tasks": [{"parts": [{}]}, {"parts": [{"cores": 400}]}]})
    assert info.value.field == "tasks.1.parts.0.cores"
    with pytest.raises(InvalidRequest) as info:
        load_workload(write(tmp_path, "w.yaml", "tasks: 3"))
    assert info.value.field == "tasks"


def test_examples_are_valid(example_inventory: Path, example_workload: Path) -> None:
    inventory = load_inventory(example_inventory)
    vendors_models = {(d.vendor, d.model) for d in inventory.devices()}
    for pair in [("nvidia", "T4"), ("nvidia", "A30"), ("nvidia", "H100"), ("ascend", "910B3"),
                 ("ascend", "310P"), ("cambricon", "MLU370-X8")]:
        assert pair in vendors_models
    tasks = load_workload(example_workload)
    assert {t.task_type.value for t in tasks} == {"training", "inference", "batch", "interactive"}
    assert any(len(t.parts) > 1 for t in tasks)
    for scenario in ["high-performance", "multi-tenant", "edge"]:
        load_config(example_inventory.parent / f"config-{scenario}.yaml")
