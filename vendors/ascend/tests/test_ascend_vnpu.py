"""vNPU templates: rounding, creation and destruction through DCMI, environment, health."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hami_ascend import partitions
from hami_ascend.adapter import AscendAdapter
from hami_ascend.binding import load

from hami_devices import InsufficientResources, MemoryLedger, ReasonCode, allocate, discover, release
from hami_devices.config import parse_config
from hami_devices.device import Device
from hami_devices.inventory import parse_inventory
from hami_devices.registry import load_vendors

CONFIG = parse_config({"device-plugin": {"isolation-level": "none"}})
GB5 = 5 * 1024


def discover_npus(ledger: MemoryLedger | None = None) -> tuple[AscendAdapter, list[Device]]:
    adapter = AscendAdapter(CONFIG)
    return adapter, adapter.discover(ledger or MemoryLedger())


def vnpus_on(card: int, device: int) -> list[tuple[int, str]]:
    return [(v.vdev_id, v.template) for v in load().vnpus(card, device)]


@pytest.mark.parametrize(
    ("model", "memory", "expected"),
    [
        ("310P3", 1000, "vir01"),
        ("310P3", 3072, "vir01"),
        ("310P3", GB5, "vir02"),
        ("310P3", 12288, "vir04"),
        ("310P3", 12289, None),
        ("910B3", GB5, "vir05_1c_16g"),
        ("910B3", 16385, "vir10_3c_32g"),
        ("910B3", 40000, None),
        ("910B2", 8000, "vir03_1c_8g"),
        ("910B4", 9000, "vir10_3c_16g"),
        ("910A", 2000, "vir02"),
        ("910A", 9000, "vir16"),
    ],
)
def test_smallest_template_that_fits(model: str, memory: int, expected: str | None) -> None:
    catalog = partitions.profiles(model)
    chosen = partitions.smallest_fitting(catalog, memory, 0, free_aicore=64, free_memory_mib=1 << 20)
    assert (chosen.name if chosen else None) == expected


def test_catalog_units() -> None:
    vir16 = next(p for p in partitions.profiles("910A") if p.name == "vir16")
    assert (vir16.memory_mib, vir16.native["aicore"], vir16.max_instances) == (17476, 16, 1)
    vir01 = partitions.profiles("Ascend310P3")[0]
    assert (vir01.memory_mib, vir01.cores, vir01.max_instances) == (3072, 12, 8)


def test_5gb_on_310p_is_granted_vir02(dcmi_node: Callable[[str], Path]) -> None:
    dcmi_node("310p_vnpu.dcmi")
    _, devices = discover_npus()
    handle = allocate(devices, {"parts": [{"memory_mib": GB5}]})
    (grant,) = handle.grants
    assert (grant.partition, grant.memory_mib, grant.cores) == ("vir02", 6144, 25)
    assert grant.uuid == devices[0].uuid  # the three free AICores of chip 0 still hold a vir02
    vdev_id = int(grant.partition_uuid or "-1")
    assert (vdev_id, "vir02") in vnpus_on(0, 0)
    assert handle.env["ASCEND_VISIBLE_DEVICES"] == str(vdev_id)
    assert handle.env["ASCEND_RT_VISIBLE_DEVICES"] == str(vdev_id)
    assert handle.env["ASCEND_VNPU_SPECS"] == "vir02"
    release(handle)
    assert vdev_id not in [v for v, _ in vnpus_on(0, 0)]
    assert vnpus_on(0, 0) == [(100, "vir02"), (101, "vir01")]  # vNPUs made by others stay


def test_5gb_on_910b3_is_granted_vir05_1c_16g(dcmi_node: Callable[[str], Path]) -> None:
    dcmi_node("910b3x8.dcmi")
    _, devices = discover_npus()
    handle = allocate(devices, {"parts": [{"memory_mib": GB5, "count": 2}]})
    assert [g.partition for g in handle.grants] == ["vir05_1c_16g"] * 2
    assert [g.memory_mib for g in handle.grants] == [16384] * 2
    assert handle.env["ASCEND_VNPU_SPECS"] == "vir05_1c_16g,vir05_1c_16g"
    assert vnpus_on(0, 0) and vnpus_on(1, 0)


def test_too_big_for_any_template_takes_the_whole_chip(dcmi_node: Callable[[str], Path]) -> None:
    dcmi_node("910b3x8.dcmi")
    _, devices = discover_npus()
    handle = allocate(devices, {"parts": [{"memory_mib": 40000}]})
    (grant,) = handle.grants
    assert (grant.partition, grant.memory_mib, grant.cores, grant.exclusive) == (None, 65536, 100, True)
    assert grant.partition_uuid is None
    assert vnpus_on(0, 0) == []
    assert handle.env["ASCEND_VISIBLE_DEVICES"] == "0"
    assert "ASCEND_VNPU_SPECS" not in handle.env


def test_vnpus_made_by_others_hold_their_aicores(dcmi_node: Callable[[str], Path]) -> None:
    dcmi_node("310p_vnpu.dcmi")
    _, devices = discover_npus()
    chip1 = devices[1].uuid  # a vir04 already holds 4 of its 8 AICores
    allocate(devices, {"parts": [{"partition": "vir04", "uuids": [chip1]}]})
    with pytest.raises(InsufficientResources) as caught:
        allocate(devices, {"parts": [{"partition": "vir01", "uuids": [chip1]}]})
    assert caught.value.reasons[chip1] == [ReasonCode.CARD_PARTITION_UNAVAILABLE]
    with pytest.raises(InsufficientResources) as caught:
        allocate(devices, {"parts": [{"cores": 100, "uuids": [devices[0].uuid]}]})
    assert caught.value.reasons[devices[0].uuid] == [ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE]


def test_vnpus_persist_across_processes(dcmi_node: Callable[[str], Path]) -> None:
    dcmi_node("910b3x8.dcmi")
    _, devices = discover_npus()
    handle = allocate(devices, {"parts": [{"memory_mib": 20000}]})
    vdev = handle.grants[0].partition_uuid
    script = (
        "import json; from hami_ascend.adapter import AscendAdapter; from hami_devices import MemoryLedger;"
        "d = AscendAdapter().discover(MemoryLedger())[0].info;"
        "print(json.dumps(d.attributes))"
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True,
                         env=dict(os.environ))
    attributes = json.loads(out.stdout)
    assert attributes["vnpus"] == f"vir10_3c_32g:{vdev}"
    assert attributes["vnpu.reserved_aicore"] == "10"  # another process's ledger does not own it


def test_the_unhealthy_chip_is_never_granted(dcmi_node: Callable[[str], Path]) -> None:
    dcmi_node("910b4_unhealthy.dcmi")
    _, devices = discover_npus()
    bad = devices[2].uuid
    with pytest.raises(InsufficientResources) as caught:
        allocate(devices, {"parts": [{"cores": 100, "count": 4}]})
    assert ReasonCode.CARD_UNHEALTHY in caught.value.reasons[bad]
    granted = []
    while True:
        try:
            granted.extend(allocate(devices, {"parts": [{"memory_mib": 4096}]}).grants)
        except InsufficientResources as exc:
            assert ReasonCode.CARD_UNHEALTHY in exc.reasons[bad]
            break
    assert len(granted) == 12  # four vir05_1c_8g on each of the three healthy chips
    assert bad not in {g.uuid for g in granted}
    assert vnpus_on(2, 0) == []


def test_simulated_back_end_uses_the_templates(tmp_path: Path) -> None:
    inventory = parse_inventory(
        {"nodes": [{"name": "edge", "devices": [{"vendor": "ascend", "model": "310P3", "count": 2}]}]}
    )
    devices = discover(inventory, registry=load_vendors(["ascend"], CONFIG), config=CONFIG)
    assert [p.name for p in devices[0].info.partitions] == ["vir01", "vir02", "vir04"]
    handle = allocate(devices, {"parts": [{"memory_mib": GB5}]})
    (grant,) = handle.grants
    assert (grant.partition, grant.partition_uuid) == ("vir02", None)
    assert handle.env["ASCEND_VISIBLE_DEVICES"] == "0"
    assert handle.env["ASCEND_VNPU_SPECS"] == "vir02"
