"""Discovery and monitoring through cffi against the fake libdcmi.so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hami_ascend.adapter import AscendAdapter

from hami_devices import MemoryLedger, Metrics
from hami_devices.config import parse_config
from hami_devices.device import Device
from hami_devices.models import NOT_AVAILABLE, Health

CONFIG = parse_config({"device-plugin": {"isolation-level": "none"}})


def discover_npus() -> list[Device]:
    return AscendAdapter(CONFIG).discover(MemoryLedger())


def test_probe_finds_the_library(dcmi_node: Callable[[str], Path], dcmi_library: Path) -> None:
    dcmi_node("910b3x8.dcmi")
    probe = AscendAdapter().probe()
    assert probe.available
    assert probe.library == str(dcmi_library)
    assert "8 NPU chip(s)" in probe.detail


def test_absent_library_is_reported_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_DCMI_LIBRARY", str(tmp_path / "nowhere" / "libdcmi.so"))
    probe = AscendAdapter().probe()
    assert not probe.available
    assert "libdcmi.so" in probe.detail and "not found" in probe.detail


def test_eight_910b3(dcmi_node: Callable[[str], Path]) -> None:
    dcmi_node("910b3x8.dcmi")
    devices = discover_npus()
    assert len(devices) == 8
    first = devices[0].info
    assert first.model == "910B3"
    assert first.memory_mib == 65536
    assert first.health == Health.HEALTHY
    assert first.uuid == "5A3B00001F00A0B10C0D0E0F1020304050607080"  # die id
    assert first.pci_bus_id == "0000:c1:00.0"
    assert first.native_compute_units == {"aicore": 20}
    assert [p.name for p in first.partitions] == ["vir05_1c_16g", "vir10_3c_32g"]
    assert first.partitions[0].native == {"aicore": 5, "aicpu": 1}
    assert first.traits is not None and first.traits.model == "910B3"
    assert [d.info.index for d in devices] == list(range(8))
    assert len({d.uuid for d in devices}) == 8
    assert set(first.topology.values()) == {100}  # one HCCS mesh


def test_monitoring_reads_dcmi(dcmi_node: Callable[[str], Path]) -> None:
    dcmi_node("910b3x8.dcmi")
    metrics: Metrics = discover_npus()[1].monitor()
    assert metrics.memory_total_mib == 65536
    assert metrics.memory_used_mib == 103.0
    assert metrics.utilization_pct == 11.0
    assert metrics.temperature_c == 41.0
    assert metrics.power_w == pytest.approx(101.0)  # 1010 tenths of a watt
    assert metrics.extra["aicpu_utilization_pct"] == 2.0
    assert metrics.health == Health.HEALTHY


def test_310p_memory_is_ddr_and_vnpus_are_listed(dcmi_node: Callable[[str], Path]) -> None:
    dcmi_node("310p_vnpu.dcmi")
    devices = discover_npus()
    assert [d.info.model for d in devices] == ["310P"] * 4
    chip0 = devices[0].info
    assert chip0.memory_mib == 24576
    assert chip0.attributes["memory_kind"] == "ddr"
    assert chip0.attributes["vnpus"] == "vir02:100,vir01:101"
    assert chip0.attributes["vnpu.reserved_aicore"] == "3"
    assert chip0.attributes["vnpu.reserved_memory_mib"] == str(6144 + 3072)
    assert [p.name for p in chip0.partitions] == ["vir01", "vir02", "vir04"]
    assert "vnpus" not in devices[2].info.attributes
    assert devices[0].info.topology[devices[1].uuid] == 40  # PCIe only
    metrics = devices[0].monitor()
    assert metrics.memory_used_mib == 512.0


def test_unhealthy_chip(dcmi_node: Callable[[str], Path]) -> None:
    dcmi_node("910b4_unhealthy.dcmi")
    devices = discover_npus()
    health = [d.info.health for d in devices]
    assert health == [Health.HEALTHY, Health.HEALTHY, Health.UNHEALTHY, Health.HEALTHY]
    reason = devices[2].info.health_reason or ""
    assert "DCMI health 3" in reason and "0x80e01801" in reason
    assert devices[2].monitor().health == Health.UNHEALTHY


def test_metric_dcmi_cannot_give_is_not_available(dcmi_node: Callable[[str], Path]) -> None:
    fixture = dcmi_node("910b3x8.dcmi")
    fixture.write_text(fixture.read_text().replace("power=1000", "power=-1"))
    metrics = discover_npus()[0].monitor()
    assert metrics.power_w == NOT_AVAILABLE
    assert metrics.temperature_c == 40.0


def test_cli_discover_json(dcmi_node: Callable[[str], Path]) -> None:
    dcmi_node("910b4_unhealthy.dcmi")
    cli = Path(sys.executable).with_name("hami-devices")
    out = subprocess.run(
        [str(cli), "discover", "--json", "--vendor", "ascend"],
        check=True, capture_output=True, text=True, env=dict(os.environ),
    )
    devices = json.loads(out.stdout)["devices"]
    assert [d["model"] for d in devices] == ["910B4"] * 4
    assert [d["memory_mib"] for d in devices] == [32768] * 4
    assert [d["health"] for d in devices] == ["healthy", "healthy", "unhealthy", "healthy"]
    assert all(d["traits"]["model"] == "910B4" for d in devices)
    assert devices[0]["partitions"][0]["name"] == "vir05_1c_8g"


def test_cli_vendors_reports_the_library(dcmi_node: Callable[[str], Path], dcmi_library: Path) -> None:
    dcmi_node("910b3x8.dcmi")
    cli = Path(sys.executable).with_name("hami-devices")
    out = subprocess.run([str(cli), "vendors", "--json"], check=True, capture_output=True, text=True)
    row = next(r for r in json.loads(out.stdout)["vendors"] if r["name"] == "ascend")
    assert row["hardware_available"] is True
    assert row["library"] == str(dcmi_library)
