"""ResourceSlices and DeviceClasses: schema-valid, one shareable device per accelerator, policies = our rules."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_devices.accounting import DeviceUsage
from hami_devices.config import HamiConfig
from hami_devices.discovery import complete_inventory, load_inventory_for
from hami_devices.errors import InvalidRequest
from hami_devices.inventory import parse_inventory
from hami_devices.kubernetes.dra import names
from hami_devices.kubernetes.dra.capacity import cores_capacity, memory_capacity
from hami_devices.kubernetes.dra.packing import (
    MAX_CONSUMPTIONS,
    MAX_COUNTER_SETS,
    MAX_COUNTERS,
    MAX_DEVICES,
    MAX_DEVICES_CONSUMING,
)
from hami_devices.kubernetes.dra.publish import publish_inventory
from hami_devices.kubernetes.dra.slices import PoolPublisher, card_unit, node_units
from hami_devices.kubernetes.dra.validate import SCHEMA_VERSION, validate
from hami_devices.models import Grant, Health, RequestPart
from hami_devices.registry import VendorRegistry, load_vendors

from .conftest import INVENTORY


def _slices(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "ResourceSlice"]


def test_every_object_passes_the_1_34_schema(published: list[dict[str, Any]]) -> None:
    kinds = Counter(o["kind"] for o in published)
    assert kinds["DeviceClass"] >= 5 and kinds["ResourceSlice"] >= 4
    for obj in published:
        assert validate(obj) == "1.34"
    assert SCHEMA_VERSION.startswith("1.34")


def test_schema_rejects_what_1_34_does_not_know(published: list[dict[str, Any]]) -> None:
    bad = next(s for s in _slices(published) if s["spec"].get("devices"))
    bad = {**bad, "spec": {**bad["spec"], "devices": [{**bad["spec"]["devices"][0], "nodeAllocatableResources": []}]}}
    with pytest.raises(InvalidRequest, match="ResourceSlice"):
        validate(bad)


def test_one_shareable_device_per_healthy_accelerator(published: list[dict[str, Any]], config: HamiConfig,
                                                      registry: VendorRegistry) -> None:
    inventory = load_inventory_for(INVENTORY, registry, config)
    shareable = [d for s in _slices(published) for d in s["spec"].get("devices", [])
                 if d.get("allowMultipleAllocations")]
    assert len(shareable) == len(inventory.devices())
    uuids = {d["attributes"]["hami-devices.io/uuid"]["string"] for d in shareable}
    assert uuids == {d.uuid for d in inventory.devices()}
    for device in shareable:
        attrs = device["attributes"]
        for key in ("vendor", "model", "uuid", "index", "numaNode", "pciBusID", "fp16Tflops", "bf16Tflops",
                    "fp8Tflops", "memoryBandwidthGBps", "interconnect"):
            assert f"hami-devices.io/{key}" in attrs, key
        assert set(device["capacity"]) == {"memory", "cores"}
        if attrs["hami-devices.io/vendor"]["string"] == "nvidia":
            for key in ("uuid", "productName", "architecture", "cudaComputeCapability"):
                assert f"gpu.nvidia.com/{key}" in attrs
            assert "version" in attrs["gpu.nvidia.com/cudaComputeCapability"]


@settings(max_examples=60, deadline=None)
@given(memory=st.integers(1, 90_000), cores=st.integers(1, 100), which=st.integers(0, 1000))
def test_published_policy_rounds_as_the_rule_grants(memory: int, cores: int, which: int) -> None:
    """What Kubernetes would round a request to is what our accounting grants (or both refuse)."""
    config = HamiConfig.model_validate({"device-plugin": {"memory-overcommit": 1.5}})
    registry = _registry(config)
    infos = _inventory(config).devices()
    info = infos[which % len(infos)]
    rule = registry.adapters[info.vendor]
    mem_policy, core_policy = memory_capacity(rule, info), cores_capacity(rule, info)
    planned = rule.plan_grant(info, RequestPart(memory_mib=memory, cores=cores), 0, DeviceUsage())
    fits = isinstance(planned, Grant) and planned.memory_mib <= mem_policy.value
    rounded = mem_policy.round(memory)
    if not rule.plain_shares(info) and mem_policy.valid_values:
        # template devices: Kubernetes rounds each capacity on its own, so only the memory list is pinned
        assert not fits or planned.memory_mib in mem_policy.valid_values or planned.exclusive  # type: ignore[union-attr]
        return
    if rounded is None:
        assert not fits or planned.exclusive  # type: ignore[union-attr]
        return
    if fits and not planned.exclusive:  # type: ignore[union-attr]
        assert planned.memory_mib == rounded  # type: ignore[union-attr]
        assert planned.cores == core_policy.round(cores)  # type: ignore[union-attr]


_CACHE: dict[str, Any] = {}


def _registry(config: HamiConfig) -> VendorRegistry:
    key = config.model_dump_json()
    if key not in _CACHE:
        _CACHE[key] = load_vendors(config=config)
    return _CACHE[key]  # type: ignore[no-any-return]


def _inventory(config: HamiConfig) -> Any:
    registry = _registry(config)
    return complete_inventory(load_inventory_for(INVENTORY, registry, config), registry)


def test_memory_factor_reaches_the_capacity() -> None:
    config = HamiConfig.model_validate(
        {"scheduler": {"resource-allocation": {"gpu-memory-fraction": 0.5}}, "device-plugin": {"core-scaling": 2}}
    )
    registry = _registry(config)
    info = next(d for d in _inventory(config).devices() if d.model == "T4")
    unit = card_unit(info, registry.adapters["nvidia"])
    caps = unit.devices[0].capacity
    assert caps["memory"].value == info.memory_mib // 2 and caps["memory"].maximum == info.memory_mib // 2
    assert caps["cores"].value == 200 and caps["cores"].maximum == 100


def test_vendor_rounding_is_published() -> None:
    config = HamiConfig()
    registry = _registry(config)
    infos = _inventory(config).devices()
    mlu = next(d for d in infos if d.vendor == "cambricon")
    npu = next(d for d in infos if d.vendor == "ascend")
    mlu_mem = memory_capacity(registry.adapters["cambricon"], mlu)
    assert (mlu_mem.minimum, mlu_mem.step) == (256, 256) and mlu_mem.round(3000) == 3072
    npu_mem = memory_capacity(registry.adapters["ascend"], npu)
    assert npu_mem.valid_values and 16384 in npu_mem.valid_values and npu_mem.valid_values[-1] == npu.memory_mib
    assert cores_capacity(registry.adapters["ascend"], npu).valid_values[-1] == 100


def test_partitions_consume_per_card_counters(published: list[dict[str, Any]]) -> None:
    mig = [s for s in _slices(published) if s["spec"]["pool"]["name"] == "a100-mig"]
    sets = {c["name"]: c["counters"] for s in mig for c in s["spec"].get("sharedCounters", [])}
    assert len(sets) == 4 and all("memory-slice-7" in c for c in sets.values())
    parts = [d for s in mig for d in s["spec"].get("devices", []) if "hami-devices.io/partition" in d["attributes"]]
    profiles = {d["attributes"]["hami-devices.io/partition"]["string"] for d in parts}
    assert {"1g.5gb", "3g.20gb", "7g.40gb"} <= profiles
    seven = next(d for d in parts if d["attributes"]["hami-devices.io/partition"]["string"] == "7g.40gb")
    slices_used = [k for k in seven["consumesCounters"][0]["counters"] if k.startswith("memory-slice-")]
    assert len(slices_used) == 8
    for s in mig:  # 1.35 and newer: a slice holds devices or counter sets, never both
        assert ("devices" in s["spec"]) != ("sharedCounters" in s["spec"])
    cards = [d for s in mig for d in s["spec"].get("devices", []) if d.get("allowMultipleAllocations")]
    for card in cards:  # a shared card takes its whole set: shared or partitioned, never both
        (taken,) = card["consumesCounters"]
        assert taken["counters"] == sets[taken["counterSet"]]
    assert {d["consumesCounters"][0]["counterSet"] for d in parts} == set(sets)
    ascend = [d for s in _slices(published) if s["spec"]["pool"]["name"] == "ascend-b"
              for d in s["spec"].get("devices", [])]
    assert any(d["attributes"]["hami-devices.io/partition"]["string"].startswith("vir") for d in ascend
               if "hami-devices.io/partition" in d["attributes"])


def test_kubernetes_1_34_keeps_counters_with_their_devices(config: HamiConfig, registry: VendorRegistry) -> None:
    objects = publish_inventory(INVENTORY, config, registry=registry, kubernetes="1.34")
    for s in _slices(objects):  # 1.34 resolves a device's counter set within its own slice
        names_here = {c["name"] for c in s["spec"].get("sharedCounters", [])}
        assert all(d["consumesCounters"][0]["counterSet"] in names_here
                   for d in s["spec"]["devices"] if "consumesCounters" in d)
    assert any(s["spec"].get("sharedCounters") and s["spec"]["devices"] for s in _slices(objects))
    with pytest.raises(InvalidRequest, match="kubernetes"):
        publish_inventory(INVENTORY, config, registry=registry, kubernetes="1.33")


def test_mig_disabled_publishes_no_mig_partitions() -> None:
    objects = publish_inventory(INVENTORY, HamiConfig(), node="a100-mig")
    devices = [d for o in objects if o["kind"] == "ResourceSlice" for d in o["spec"]["devices"]]
    assert len(devices) == 4 and all(d.get("allowMultipleAllocations") for d in devices)


def test_big_nodes_are_split_within_the_limits() -> None:
    config = HamiConfig.model_validate({"device-plugin": {"mig-mode": "flexible"}})
    registry = _registry(config)
    inventory = complete_inventory(
        parse_inventory(
            {"nodes": [{"name": "big", "devices": [{"vendor": "nvidia", "model": "A100-80GB", "count": 16},
                                                   {"vendor": "cambricon", "model": "MLU590", "count": 16}]}]},
            traits_for=lambda v, m: registry.adapters[v].traits_for(m),
        ),
        registry,
    )
    for release in ("1.34", "1.35"):
        slices = PoolPublisher("big", kubernetes=release).publish(inventory.devices(), registry.adapters)
        assert len(slices) > 2
        for s in slices:
            validate(s)
            spec = s["spec"]
            devices = spec.get("devices", [])
            consumed = sum(len(c["counters"]) for d in devices for c in d.get("consumesCounters", []))
            if release == "1.34":
                assert len(devices) <= MAX_DEVICES
                assert sum(len(c["counters"]) for c in spec.get("sharedCounters", [])) <= MAX_COUNTERS
                assert consumed <= MAX_CONSUMPTIONS
            else:
                assert len(devices) <= MAX_DEVICES_CONSUMING and len(spec.get("sharedCounters", [])) <= MAX_COUNTER_SETS
                assert not (devices and spec.get("sharedCounters"))
            assert spec["pool"]["resourceSliceCount"] == len(slices)
        every = [d["name"] for s in slices for d in s["spec"].get("devices", [])]
        assert len(every) == len(set(every))
        assert all(names.label(n) == n for n in every)


def _devices(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in slices for d in s["spec"].get("devices", [])]


def test_generation_bumps_on_change_only(config: HamiConfig, registry: VendorRegistry) -> None:
    infos = _inventory(config).nodes[0].devices
    pool = PoolPublisher("tiers-a")
    first = pool.publish(infos, registry.adapters)
    again = pool.publish(infos, registry.adapters)
    assert first == again and first[0]["spec"]["pool"]["generation"] == 1
    sick = [infos[0].model_copy(update={"health": Health.UNHEALTHY}), *infos[1:]]
    changed = pool.publish(sick, registry.adapters)
    assert changed[0]["spec"]["pool"]["generation"] == 2
    assert len(_devices(changed)) == len(_devices(first)) - 1


def test_attribute_limit_is_enforced(config: HamiConfig, registry: VendorRegistry) -> None:
    info = _inventory(config).nodes[0].devices[0]
    crowded = info.model_copy(update={"attributes": {"mig.mode": "enabled", "smlu": "enabled"}})
    card_unit(crowded, registry.adapters["nvidia"])  # still within 32
    from hami_devices.kubernetes.dra import slices as slices_module

    unit = node_units([info], registry.adapters)[0]
    device = unit.devices[0]
    device.attributes["example.com"] = {f"a{i}": i for i in range(10)}
    with pytest.raises(InvalidRequest, match="at most 32"):
        slices_module._check_limits(device)


def test_device_classes_select_by_kind_and_vendor(published: list[dict[str, Any]]) -> None:
    classes = {o["metadata"]["name"]: o for o in published if o["kind"] == "DeviceClass"}
    assert {"hami-devices.io", "gpu.hami-devices.io", "npu.hami-devices.io", "mlu.hami-devices.io",
            "mig.hami-devices.io", "vnpu.hami-devices.io", "smlu.hami-devices.io"} <= set(classes)
