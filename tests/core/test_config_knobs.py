"""The configuration's new knobs, each by its effect: level policies, defaults, per-node settings, hard taints;
and the checks that catch a bad plan (every error at once, nearest names, guarantees the cluster cannot hold)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import hami_devices as hd
from hami_devices.config import parse_config
from hami_devices.errors import InsufficientResources, InvalidConfig, InvalidInventory, ReasonCode
from hami_devices.inventory import parse_inventory
from hami_devices.models import ResourceRequest

CLI = [sys.executable, "-m", "hami_devices.cli.main"]

INVENTORY = {"nodes": [
    {"name": "gpu-0", "labels": {"pool": "train"}, "devices": [{"vendor": "nvidia", "model": "T4", "count": 2}]},
    {"name": "gpu-1", "labels": {"pool": "serve"}, "devices": [{"vendor": "nvidia", "model": "T4", "count": 2}]},
    {"name": "zcpu", "devices": []},
]}


def files(tmp_path: Path, config: dict[str, Any], inventory: dict[str, Any] | None = None) -> tuple[Path, Path]:
    inv, cfg = tmp_path / "inventory.yaml", tmp_path / "config.yaml"
    inv.write_text(yaml.safe_dump(inventory or INVENTORY))
    cfg.write_text(yaml.safe_dump(config))
    return inv, cfg


# ---------------------------------------------------------------------- policies per level
def test_node_and_device_policy_from_the_configuration(tmp_path: Path) -> None:
    inv, cfg = files(tmp_path, {"scheduler": {"policy": "binpack", "node-policy": "spread"}})
    engine = hd.build_engine(inv, cfg)
    assert (engine.node_policy.name, engine.policy.name) == ("spread", "binpack")
    first = engine.schedule(ResourceRequest.single(memory_mib=2048, cores=10))
    second = engine.schedule(ResourceRequest.single(memory_mib=2048, cores=10))
    # spread between nodes: the second share goes to the other (emptier) node; binpack within it
    assert first.grants[0].node != second.grants[0].node and first.policy == "spread/binpack"
    both = hd.build_engine(inv, cfg, policy="binpack")  # a command line's --policy sets both levels
    assert both.node_policy.name == "binpack"


# ---------------------------------------------------------------------- defaults
@pytest.mark.parametrize(("memory", "expected"), [(0, 15360), (4096, 4096), ("25%", 3840)])
def test_default_memory_cores_and_count(tmp_path: Path, memory: Any, expected: int) -> None:
    inv, cfg = files(tmp_path, {"scheduler": {"default-memory": memory, "default-cores": 20, "default-count": 2}})
    devices = hd.discover(inv, config=hd.load_config(cfg))
    handle = hd.allocate(devices, {"parts": [{}]})  # a part that says nothing takes every default
    assert [(g.memory_mib, g.cores) for g in handle.grants] == [(expected, 20)] * 2
    kept = hd.allocate(devices, {"parts": [{"count": 1, "memory_mib": 1024, "cores": 0}]})
    assert [(g.memory_mib, g.cores) for g in kept.grants] == [(1024, 0)]  # what a part says, it keeps
    assert handle.request.parts[0].count == 2  # the handle records the request as granted


def test_default_memory_is_validated() -> None:
    with pytest.raises(InvalidConfig, match=r"scheduler\.default-memory"):
        parse_config({"scheduler": {"default-memory": "150%"}})
    assert parse_config({"scheduler": {"default-memory": "50 %"}}).scheduler.default_memory == "50%"


# ---------------------------------------------------------------------- per-node configuration
NODE_CONFIG = {"node-config": [
    {"name": "gpu-0", "memory-scaling": 2.0, "core-scaling": 1.5, "split-count": 3,
     "filter-devices": {"indexes": [1]}},
    {"labels": {"pool": "serve"}, "split-count": 1, "filter-devices": {"models": ["Tesla T4"], "uuids": []}},
]}


def test_node_config_in_the_engine_and_on_devices(tmp_path: Path) -> None:
    inv, cfg = files(tmp_path, NODE_CONFIG)
    engine = hd.build_engine(inv, cfg)
    c = engine.cluster
    assert [c.info(r).index for r in c.rows_of("gpu-0")] == [0]  # index 1 filtered out
    assert c.rows_of("gpu-1") == []  # every T4 of the serve pool filtered (by an alias of the model)
    (row,) = c.rows_of("gpu-0")
    assert (int(c.mem_cap[row]), int(c.core_cap[row]), int(c.split[row])) == (30720, 150, 3)
    devices = hd.discover(inv, config=hd.load_config(cfg))
    assert [d.info.node for d in devices] == ["gpu-0"]
    big = hd.allocate(devices, {"parts": [{"memory_mib": 20000, "cores": 50}]})  # over the card: scaled
    assert big.grants[0].memory_mib == 20000
    hd.allocate(devices, {"parts": [{"memory_mib": 1024, "cores": 50}]})
    with pytest.raises(InsufficientResources) as cores:
        hd.allocate(devices, {"parts": [{"memory_mib": 1024, "cores": 60}]})
    assert ReasonCode.CARD_INSUFFICIENT_CORE in cores.value.codes  # 160 > 100 x core-scaling 1.5
    hd.allocate(devices, {"parts": [{"memory_mib": 1024, "cores": 50}]})
    with pytest.raises(InsufficientResources) as split:
        hd.allocate(devices, {"parts": [{"memory_mib": 1024}]})
    assert ReasonCode.CARD_SPLIT_EXHAUSTED in split.value.codes  # the node's split count of 3


def test_split_count_from_a_label_selector(tmp_path: Path) -> None:
    inv, cfg = files(tmp_path, {"node-config": [{"labels": {"pool": "serve"}, "split-count": 1}]})
    c = hd.build_engine(inv, cfg).cluster
    assert [int(c.split[r]) for r in c.rows_of("gpu-1")] == [1, 1]
    assert [int(c.split[r]) for r in c.rows_of("gpu-0")] == [10, 10]
    with pytest.raises(InvalidConfig, match="select nodes by name, labels or both"):
        parse_config({"node-config": [{"split-count": 2}]})


def test_keep_cpu_tasks_off_accelerators(tmp_path: Path) -> None:
    inv, cfg = files(tmp_path, {"scheduler": {"keep-cpu-tasks-off-accelerators": True}})
    engine = hd.build_engine(inv, cfg)
    assert engine.place(ResourceRequest(host_cpu_milli=1000)).node == "zcpu"
    assert engine.place(ResourceRequest.single(host_cpu_milli=1000)).node.startswith("gpu-")
    inv2, plain = files(tmp_path, {})  # hosts alike: the first name, an accelerator node
    assert hd.build_engine(inv2, plain).place(ResourceRequest(host_cpu_milli=1000)).node == "gpu-0"


def test_inventory_taints_are_hard(tmp_path: Path) -> None:
    inventory = {"nodes": [{"name": "only", "taints": [{"key": "maintenance", "effect": "NoExecute"}],
                            "devices": [{"vendor": "nvidia", "model": "T4"}]}]}
    inv, cfg = files(tmp_path, {}, inventory)
    engine = hd.build_engine(inv, cfg)
    with pytest.raises(InsufficientResources) as refused:
        engine.place(ResourceRequest.single())
    assert refused.value.codes == {ReasonCode.NODE_TAINT_NOT_TOLERATED} and refused.value.permanent
    tolerant = ResourceRequest.single(tolerations=[{"key": "maintenance", "operator": "Exists"}])
    assert engine.place(tolerant).node == "only"


# ---------------------------------------------------------------------- checks that catch a bad plan
def test_config_validation_reports_every_error() -> None:
    with pytest.raises(InvalidConfig) as bad:
        parse_config({"scheduler": {"policy": "", "default-cores": 200}, "device-plugin": {"split-count": 0},
                      "node-config": [{"name": "n", "memory-scaling": -1}]})
    fields = [f for f, _ in bad.value.errors]
    assert fields == ["scheduler.policy", "scheduler.default-cores", "device-plugin.split-count",
                      "node-config.0.memory-scaling"]
    assert "(4 errors)" in str(bad.value)


def test_unknown_models_get_the_nearest_catalog_names(tmp_path: Path) -> None:
    inventory = {"nodes": [{"name": "n", "devices": [{"vendor": "nvidia", "model": "A100-80GB"},
                                                      {"vendor": "nvidia", "model": "A100-40GB"}]}]}
    inv, cfg = files(tmp_path, {}, inventory)
    with pytest.raises(InsufficientResources) as refused:
        hd.build_engine(inv, cfg).place(ResourceRequest.single(models=["A100"]))
    assert "did you mean A100-40GB, A100-80GB" in str(refused.value)
    assert refused.value.codes == {ReasonCode.UNKNOWN_MODEL}
    with pytest.raises(InvalidInventory, match="did you mean A100-40GB, A100-80GB"):
        parse_inventory({"nodes": [{"name": "n", "devices": [{"vendor": "nvidia", "model": "A100"}]}]})


def test_queues_check_reports_guarantees_the_cluster_cannot_honour(tmp_path: Path) -> None:
    inv, _ = files(tmp_path, {})  # four T4s: 400 device-cores
    queues = tmp_path / "queues.yaml"
    queues.write_text(yaml.safe_dump({"queues": [
        {"name": "a", "guarantee": {"device-cores": 300, "devices": 2}},
        {"name": "b", "guarantee": {"device-cores": 300}, "children": [{"name": "b1"}]},
    ]}))
    out = subprocess.run([*CLI, "queues", "check", "--queues", str(queues), "--inventory", str(inv), "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert report["unhonoured"] == [
        {"resource": "device-cores", "guaranteed": 600, "capacity": 400, "shortfall": 200}]
    text = subprocess.run([*CLI, "queues", "check", "--queues", str(queues), "--inventory", str(inv)],
                          capture_output=True, text=True)
    assert text.returncode == 1 and "200 short" in text.stdout


def test_the_schemas_list_the_keys() -> None:
    config = json.loads(subprocess.run([*CLI, "config", "schema"], capture_output=True, text=True,
                                       check=True).stdout)
    scheduler = config["$defs"]["SchedulerConfig"]["properties"]
    assert {"node-policy", "device-policy", "default-memory", "default-cores", "default-count",
            "keep-cpu-tasks-off-accelerators"} <= set(scheduler)
    assert {"memory-scaling", "split-count", "core-scaling", "filter-devices", "name", "labels"} <= set(
        config["$defs"]["NodeConfig"]["properties"])
    queues = json.loads(subprocess.run([*CLI, "queues", "schema"], capture_output=True, text=True,
                                       check=True).stdout)
    assert {"reclaim-within-cohort", "within-queue", "borrow-within-cohort", "fair-share"} <= set(
        queues["$defs"]["PreemptionSpec"]["properties"])
    assert {"reclaimable", "state", "stop-policy"} <= set(queues["$defs"]["QueueSpec"]["properties"])
    assert "priority-classes" in queues["properties"]
    assert {"policy", "max-priority-threshold"} <= set(queues["$defs"]["BorrowWithinCohort"]["properties"])
