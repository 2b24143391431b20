"""sMLU: rounding to 256 MiB units, instances made and destroyed through CNDev, environment, health."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hami_cambricon import partitions
from hami_cambricon.adapter import CambriconAdapter
from hami_cambricon.binding import load

from hami_devices import InsufficientResources, MemoryLedger, ReasonCode, allocate, discover, release
from hami_devices.config import parse_config
from hami_devices.device import Device
from hami_devices.inventory import parse_inventory
from hami_devices.registry import load_vendors

CONFIG = parse_config({"device-plugin": {"isolation-level": "none"}})


def discover_mlus() -> tuple[CambriconAdapter, list[Device]]:
    adapter = CambriconAdapter(CONFIG)
    return adapter, adapter.discover(MemoryLedger())


@pytest.mark.parametrize(("asked", "granted"), [(1, 256), (256, 256), (257, 512), (3000, 3072), (3072, 3072)])
def test_memory_rounds_up_to_256_mib_units(asked: int, granted: int) -> None:
    assert partitions.round_up(asked) == granted


def test_3000_mib_is_granted_3072_mib_as_an_smlu_instance(cndev_node: Callable[[str], Path]) -> None:
    cndev_node("mlu590_smlu.cndev")
    _, devices = discover_mlus()
    handle = allocate(devices, {"parts": [{"memory_mib": 3000, "cores": 20}]})
    (grant,) = handle.grants
    assert (grant.memory_mib, grant.cores, grant.partition) == (3072, 20, "smlu.q20.m3072")
    instance_uuid = (grant.partition_uuid or "").split("#")[0]
    made = [i for i in load().smlu_instances(0) if i.uuid == instance_uuid]
    assert len(made) == 1 and (made[0].memory_mib, made[0].quota) == (3072, 20)
    assert handle.env["MLU_VISIBLE_DEVICES"] == "0"
    assert handle.env["CAMBRICON_VISIBLE_DEVICES"] == instance_uuid
    assert [(p.quota, p.memory_mib) for p in load().smlu_profiles(0)] == [(20, 3072)]
    release(handle)
    assert load().smlu_instances(0) == []
    assert load().smlu_profiles(0) == []  # the profile made for the grant goes with it
    assert len(load().smlu_instances(7)) == 1  # the administrator's instance stays


def test_an_uncapped_share_is_named_without_a_quota(cndev_node: Callable[[str], Path]) -> None:
    cndev_node("mlu590_smlu.cndev")
    _, devices = discover_mlus()
    (grant,) = allocate(devices, {"parts": [{"memory_mib": 3000}]}).grants
    assert (grant.memory_mib, grant.cores, grant.partition) == (3072, 0, "smlu.m3072")
    (instance,) = load().smlu_instances(0)
    assert (instance.quota, instance.memory_mib) == (100, 3072)


def test_instances_made_by_others_hold_their_memory(cndev_node: Callable[[str], Path]) -> None:
    cndev_node("mlu590_smlu.cndev")
    _, devices = discover_mlus()
    held = devices[7]  # 20480 MiB of MLU 7 belong to another instance
    with pytest.raises(InsufficientResources) as caught:
        allocate([held], {"parts": [{"memory_mib": 70000}]})
    assert caught.value.reasons[held.uuid] == [ReasonCode.CARD_INSUFFICIENT_MEMORY]
    assert allocate([held], {"parts": [{"memory_mib": 60000}]}).grants[0].memory_mib == 60160
    with pytest.raises(InsufficientResources) as caught:
        allocate([held], {"parts": [{"cores": 100}]})
    assert caught.value.reasons[held.uuid] == [ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE]


def test_named_profile(cndev_node: Callable[[str], Path]) -> None:
    cndev_node("mlu590_smlu.cndev")
    _, devices = discover_mlus()
    handle = allocate(devices, {"parts": [{"partition": "smlu.q50.m40960", "count": 2}]})
    assert [(g.memory_mib, g.cores) for g in handle.grants] == [(40960, 50)] * 2
    assert [g.uuid for g in handle.grants] == [devices[0].uuid, devices[1].uuid]


def test_a_named_profile_must_hold_what_the_part_asks(cndev_node: Callable[[str], Path]) -> None:
    """smlu.q50.m40960 holds 40,960 MiB and half the cores: a part asking more of either is refused, not shrunk."""
    cndev_node("mlu590_smlu.cndev")
    _, devices = discover_mlus()
    first = devices[0]
    for too_much in ({"memory_mib": 40961}, {"cores": 51}):
        with pytest.raises(InsufficientResources) as caught:
            allocate([first], {"parts": [{"partition": "smlu.q50.m40960", **too_much}]})
        assert caught.value.reasons[first.uuid] == [ReasonCode.CARD_PARTITION_UNAVAILABLE], too_much
    exact = allocate([first], {"parts": [{"partition": "smlu.q50.m40960", "memory_mib": 40960, "cores": 50}]})
    assert [(g.memory_mib, g.cores) for g in exact.grants] == [(40960, 50)]


def test_without_smlu_a_share_is_a_rounded_plain_share(cndev_node: Callable[[str], Path]) -> None:
    cndev_node("mlu370x8.cndev")
    _, devices = discover_mlus()
    handle = allocate(devices, {"parts": [{"memory_mib": 3000}]})
    (grant,) = handle.grants
    assert (grant.memory_mib, grant.partition, grant.partition_uuid) == (3072, None, None)
    assert handle.env["CAMBRICON_VISIBLE_DEVICES"] == devices[0].uuid


def test_the_unhealthy_mlu_is_never_granted(cndev_node: Callable[[str], Path]) -> None:
    cndev_node("mlu370x8.cndev")
    _, devices = discover_mlus()
    bad = devices[5].uuid
    with pytest.raises(InsufficientResources) as caught:
        allocate(devices, {"parts": [{"cores": 100, "count": 8}]})
    assert ReasonCode.CARD_UNHEALTHY in caught.value.reasons[bad]
    handle = allocate(devices, {"parts": [{"cores": 100, "count": 7}]})
    assert bad not in handle.uuids


def test_simulated_back_end_has_smlu_profiles() -> None:
    inventory = parse_inventory(
        {"nodes": [{"name": "n", "devices": [{"vendor": "cambricon", "model": "MLU370-X4", "count": 1}]}]}
    )
    devices = discover(inventory, registry=load_vendors(["cambricon"], CONFIG), config=CONFIG)
    assert [p.name for p in devices[0].info.partitions] == ["smlu.q12.m3072", "smlu.q25.m6144", "smlu.q50.m12288"]
    handle = allocate(devices, {"parts": [{"memory_mib": 3000}]})
    assert (handle.grants[0].memory_mib, handle.grants[0].partition) == (3072, "smlu.m3072")
    assert handle.env["MLU_VISIBLE_DEVICES"] == "0"
