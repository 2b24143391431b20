"""The shared accounting rules, all-or-nothing multi-device allocation and exact release."""

from __future__ import annotations

import pytest

from hami_devices import (
    InsufficientResources,
    InvalidRequest,
    ReasonCode,
    ResourceRequest,
    UnknownAllocation,
    allocate,
    release,
)
from hami_devices.config import HamiConfig, parse_config
from hami_devices.ledger import MemoryLedger

from .helpers import node, simulated

T4 = {"vendor": "nvidia", "model": "T4"}


def one_t4(**config: object) -> list:  # type: ignore[type-arg]
    cfg = parse_config(config) if config else HamiConfig()
    return simulated(node("n1", {**T4, "count": 1, "split_count": 3}), config=cfg)


def test_memory_cannot_exceed_total() -> None:
    (dev,) = one_t4()
    dev.allocate({"parts": [{"memory_mib": 10_000}]})
    with pytest.raises(InsufficientResources) as info:
        dev.allocate({"parts": [{"memory_mib": 6_000}]})
    assert info.value.reasons[dev.uuid] == [ReasonCode.CARD_INSUFFICIENT_MEMORY]
    dev.allocate({"parts": [{"memory_mib": 5_360}]})  # exactly the rest of 15360 MiB


def test_memory_overcommit_raises_the_ceiling() -> None:
    (dev,) = one_t4(**{"device-plugin": {"memory-overcommit": 2.0}})
    dev.allocate({"parts": [{"memory_mib": 15_000}]})
    dev.allocate({"parts": [{"memory_mib": 15_000}]})
    with pytest.raises(InsufficientResources):
        dev.allocate({"parts": [{"memory_mib": 1_000}]})


def test_cores_and_split_count() -> None:
    (dev,) = one_t4()
    dev.allocate({"parts": [{"memory_mib": 100, "cores": 60}]})
    with pytest.raises(InsufficientResources) as info:
        dev.allocate({"parts": [{"memory_mib": 100, "cores": 50}]})
    assert ReasonCode.CARD_INSUFFICIENT_CORE in info.value.codes
    dev.allocate({"parts": [{"memory_mib": 100, "cores": 10}]})
    dev.allocate({"parts": [{"memory_mib": 100}]})
    with pytest.raises(InsufficientResources) as info:
        dev.allocate({"parts": [{"memory_mib": 100}]})
    assert info.value.reasons[dev.uuid] == [ReasonCode.CARD_SPLIT_EXHAUSTED]


def test_exclusive_holder_is_alone() -> None:
    (dev,) = one_t4()
    handle = dev.allocate({"parts": [{"memory_mib": 100, "cores": 100}]})
    with pytest.raises(InsufficientResources) as info:
        dev.allocate({"parts": [{"memory_mib": 100}]})
    assert ReasonCode.CARD_EXCLUSIVELY_HELD in info.value.codes
    dev.release(handle)
    dev.allocate({"parts": [{"memory_mib": 100}]})
    with pytest.raises(InsufficientResources) as info:
        dev.allocate({"parts": [{"memory_mib": 100, "cores": 100}]})
    assert ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE in info.value.codes


def test_multi_device_request_is_all_or_nothing() -> None:
    ledger = MemoryLedger()
    devices = simulated(node("n1", {**T4, "count": 2}, {"vendor": "nvidia", "model": "A30", "count": 1}), ledger=ledger)
    request = ResourceRequest(
        parts=[
            {"count": 2, "memory_mib": 8_000, "models": ["T4"]},
            {"count": 2, "memory_mib": 8_000, "models": ["A30"]},  # only one A30: must fail
        ]
    )
    with pytest.raises(InsufficientResources) as info:
        allocate(devices, request)
    assert ReasonCode.NODE_INSUFFICIENT_DEVICES in info.value.codes
    assert ledger.handles() == []
    assert all(d.usage().sharers == 0 for d in devices)


def test_multi_part_grants_each_tier() -> None:
    devices = simulated(node("n1", {**T4, "count": 2}, {"vendor": "nvidia", "model": "A30", "count": 1}))
    handle = allocate(devices, {"parts": [{"count": 2, "models": ["T4"], "memory_mib": 1}, {"models": ["A30"]}]})
    assert [g.model for g in handle.grants] == ["T4", "T4", "A30"]
    assert [g.part for g in handle.grants] == [0, 0, 1]
    assert len(set(handle.uuids)) == 3
    assert handle.env["CUDA_VISIBLE_DEVICES"] == ",".join(handle.uuids)


def test_same_node_keeps_a_request_on_one_node() -> None:
    devices = simulated(node("a", {**T4, "count": 1}), node("b", {**T4, "count": 1}))
    two_parts = [{"memory_mib": 10}, {"memory_mib": 10}]
    with pytest.raises(InsufficientResources):
        allocate(devices, {"parts": two_parts})
    with pytest.raises(InsufficientResources):  # a part's devices work together: always one node
        allocate(devices, {"same_node": False, "parts": [{"count": 2, "memory_mib": 10}]})
    handle = allocate(devices, {"same_node": False, "parts": two_parts})
    assert {g.node for g in handle.grants} == {"a", "b"}
    assert handle.env_for("a")["CUDA_VISIBLE_DEVICES"] == devices[0].uuid
    assert handle.env_for("b")["CUDA_VISIBLE_DEVICES"] == devices[1].uuid


def test_unhealthy_device_is_never_granted() -> None:
    devices = simulated(node("n", {**T4, "count": 2, "unhealthy": [0]}))
    handle = allocate(devices, {"parts": [{"memory_mib": 10}]})
    assert handle.grants[0].index == 1
    with pytest.raises(InsufficientResources) as info:
        allocate(devices, {"parts": [{"count": 2, "memory_mib": 10}]})
    assert info.value.reasons[devices[0].uuid] == [ReasonCode.CARD_UNHEALTHY]


def test_selectors_and_precision_filter() -> None:
    devices = simulated(node("n", {**T4, "count": 1}, {"vendor": "nvidia", "model": "H100", "count": 1}))
    t4, h100 = devices
    assert allocate(devices, {"parts": [{"precision": "fp8", "memory_mib": 1}]}).uuids == [h100.uuid]
    assert allocate(devices, {"parts": [{"exclude_models": ["H100"], "memory_mib": 1}]}).uuids == [t4.uuid]
    assert allocate(devices, {"parts": [{"uuids": [h100.uuid], "memory_mib": 1}]}).uuids == [h100.uuid]
    with pytest.raises(InsufficientResources) as info:
        allocate(devices, {"parts": [{"exclude_vendors": ["nvidia"], "memory_mib": 1}]})
    assert info.value.reasons[t4.uuid] == [ReasonCode.CARD_VENDOR_MISMATCH]
    assert info.value.permanent is True
    with pytest.raises(InsufficientResources) as info:
        allocate(devices, {"parts": [{"vendors": ["ascend"], "memory_mib": 1}]})
    assert info.value.reasons == {"parts.0.vendors": [ReasonCode.UNKNOWN_VENDOR]}
    assert info.value.permanent is True
    with pytest.raises(InsufficientResources) as info:
        allocate(devices, {"parts": [{"models": ["MI300X"], "memory_mib": 1}]})
    assert info.value.codes == {ReasonCode.UNKNOWN_MODEL}


def test_release_is_exact_and_refuses_twice() -> None:
    (dev,) = one_t4()
    before = dev.usage()
    handle = dev.allocate({"parts": [{"memory_mib": 4_000, "cores": 20}]})
    assert dev.usage().memory_mib == 4_000
    dev.release(handle)
    assert dev.usage() == before
    with pytest.raises(UnknownAllocation):
        dev.release(handle)
    with pytest.raises(UnknownAllocation):
        dev.release("no-such-handle")


def test_devices_of_different_ledgers_are_refused() -> None:
    a = simulated(node("a", {**T4, "count": 1}))
    b = simulated(node("b", {**T4, "count": 1}))
    with pytest.raises(InvalidRequest):
        allocate([*a, *b], {"parts": [{"memory_mib": 1}]})


def test_release_via_ledger_handle_id() -> None:
    ledger = MemoryLedger()
    devices = simulated(node("n", {**T4, "count": 1}), ledger=ledger)
    handle = allocate(devices, {"parts": [{"memory_mib": 5}]})
    copy = type(handle).model_validate_json(handle.model_dump_json())  # as a launcher would receive it
    with pytest.raises(InvalidRequest) as info:
        release(copy)
    assert info.value.field == "ledger"
    removed = release(copy.id, ledger=ledger)
    assert removed.id == handle.id
    assert ledger.handles() == []
    again = allocate(devices, {"parts": [{"memory_mib": 5}]})
    assert release(again).id == again.id  # the handle hd.allocate returned knows its ledger
    with pytest.raises(UnknownAllocation):
        release(again)


def test_monitor_reports_accounting_and_not_available_readings() -> None:
    (dev,) = one_t4()
    handle = dev.allocate({"parts": [{"memory_mib": 2_000, "cores": 25}]})
    metrics = dev.monitor()
    assert metrics.allocated_memory_mib == 2_000
    assert metrics.allocated_cores == 25
    assert metrics.sharers == 1
    assert metrics.temperature_c == "n/a"
    assert [a.handle_id for a in metrics.allocations] == [handle.id]
    assert metrics.allocations[0].memory_limit_mib == 2_000


def test_topology_preferred_takes_the_best_linked_pair() -> None:
    # 4 T4 on PCIe over two NUMA nodes: 0,1 on NUMA 0 and 2,3 on NUMA 1 (same NUMA scores 40, across 10).
    devices = simulated(node("n", {**T4, "count": 4, "numa_nodes": 2, "link": "pcie"}))
    allocate(devices, {"parts": [{"uuids": [devices[1].uuid], "cores": 100}]})
    linked = allocate(devices, {"topology": "preferred", "parts": [{"count": 2, "memory_mib": 10}]})
    assert linked.uuids == [devices[2].uuid, devices[3].uuid]


def test_topology_required_refuses_a_pcie_only_set() -> None:
    pcie = simulated(node("n", {**T4, "count": 2, "link": "pcie"}))
    with pytest.raises(InsufficientResources) as info:
        allocate(pcie, {"topology": "required", "parts": [{"count": 2, "memory_mib": 10}]})
    assert ReasonCode.NODE_TOPOLOGY_UNSATISFIED in info.value.codes
    nvlink = simulated(node("n", {"vendor": "nvidia", "model": "H100", "count": 2, "link": "nvlink"}))
    assert len(allocate(nvlink, {"topology": "required", "parts": [{"count": 2, "memory_mib": 10}]}).grants) == 2


def test_a_list_changed_in_place_is_allocated_from_what_it_now_holds() -> None:
    """``allocate`` keeps what it derives from a device list between calls; a list the caller edits in
    place between two calls must be read again, not recognised by its identity."""
    t4s = simulated(node("n1", {**T4, "count": 2}))
    given = [t4s[0]]
    first = allocate(given, {"parts": [{"cores": 100}]})
    assert [g.uuid for g in first.grants] == [t4s[0].uuid]
    given[0] = t4s[1]  # same list object, another device
    second = allocate(given, {"parts": [{"cores": 100}]})
    assert [g.uuid for g in second.grants] == [t4s[1].uuid]
    given.append(t4s[0])  # and a longer list: the first device is held whole, so the second is refused
    with pytest.raises(InsufficientResources):
        allocate(given, {"parts": [{"cores": 100}]})
    release(first)
    assert [g.uuid for g in allocate(given, {"parts": [{"cores": 100}]}).grants] == [t4s[0].uuid]
