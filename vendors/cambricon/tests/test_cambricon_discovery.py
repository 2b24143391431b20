"""Discovery and monitoring through cffi against the fake libcndev.so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hami_cambricon.adapter import CambriconAdapter

from hami_devices import MemoryLedger
from hami_devices.config import parse_config
from hami_devices.device import Device
from hami_devices.models import Health

CONFIG = parse_config({"device-plugin": {"isolation-level": "none"}})


def discover_mlus() -> list[Device]:
    return CambriconAdapter(CONFIG).discover(MemoryLedger())


def test_probe_finds_the_library(cndev_node: Callable[[str], Path], cndev_library: Path) -> None:
    cndev_node("mlu370x8.cndev")
    probe = CambriconAdapter().probe()
    assert probe.available
    assert probe.library == str(cndev_library)
    assert "8 MLU(s)" in probe.detail


def test_absent_library_is_reported_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_CNDEV_LIBRARY", str(tmp_path / "libcndev.so"))
    probe = CambriconAdapter().probe()
    assert not probe.available
    assert "not found" in probe.detail


def test_neuware_home_is_searched(
    cndev_node: Callable[[str], Path], cndev_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cndev_node("mlu370x8.cndev")
    home = tmp_path / "neuware"
    (home / "lib64").mkdir(parents=True)
    (home / "lib64" / "libcndev.so").symlink_to(cndev_library)
    monkeypatch.delenv("HAMI_CNDEV_LIBRARY")
    monkeypatch.setenv("NEUWARE_HOME", str(home))
    probe = CambriconAdapter().probe()
    assert probe.available and probe.library == str(home / "lib64" / "libcndev.so")


def test_mlu370_x8_node(cndev_node: Callable[[str], Path]) -> None:
    cndev_node("mlu370x8.cndev")
    devices = discover_mlus()
    assert len(devices) == 8
    first = devices[0].info
    assert first.model == "MLU370-X8"
    assert first.uuid == "MLU-37000000-1a2b-4c3d-8e4f-5a6b7c8d9e00"
    assert first.memory_mib == 49152
    assert first.pci_bus_id == "0000:1a:00.0"
    assert [d.info.numa_node for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert first.native_compute_units == {"mlu_core": 16}
    assert first.attributes["mlulink.ports"] == "4" and first.attributes["mlulink.active"] == "4"
    assert first.attributes["smlu"] == "disabled"
    assert first.partitions == []
    assert first.traits is not None and first.traits.model == "MLU370-X8"
    assert set(first.topology.values()) == {100}  # MLU-Link
    health = [d.info.health for d in devices]
    assert health.count(Health.UNHEALTHY) == 1 and health[5] == Health.UNHEALTHY
    assert "driver state 5" in (devices[5].info.health_reason or "")


def test_monitoring_reads_cndev(cndev_node: Callable[[str], Path]) -> None:
    cndev_node("mlu370x8.cndev")
    devices = discover_mlus()
    metrics = devices[2].monitor()
    assert (metrics.memory_total_mib, metrics.memory_used_mib) == (49152, 302.0)
    assert metrics.utilization_pct == 7.0
    assert metrics.temperature_c == 47.0
    assert metrics.power_w == 120.0
    assert metrics.health == Health.HEALTHY
    assert devices[5].monitor().health == Health.UNHEALTHY


def test_mlu590_with_smlu(cndev_node: Callable[[str], Path]) -> None:
    cndev_node("mlu590_smlu.cndev")
    devices = discover_mlus()
    first, last = devices[0].info, devices[7].info
    assert first.model == "MLU590"
    assert first.memory_mib == 81920
    assert first.attributes["smlu"] == "enabled"
    names = [p.name for p in first.partitions]
    assert names == ["smlu.q12.m10240", "smlu.q25.m20480", "smlu.q50.m40960"]
    assert first.partitions[0].native == {"mlu_quota": 12, "memory_units": 40}
    assert "smlu.instances" not in first.attributes
    assert [p.name for p in last.partitions] == names  # the administrator's q25/q50 profiles are catalog shapes
    assert last.attributes["smlu.instances"] == "preexisting-7-1:59000007-7f6e-4d5c-9b4a-392817a00001"
    assert last.attributes["smlu.reserved_memory_mib"] == "20480"
    assert last.attributes["smlu.reserved_quota"] == "25"


def test_cli_discover_json(cndev_node: Callable[[str], Path]) -> None:
    cndev_node("mlu370x8.cndev")
    cli = Path(sys.executable).with_name("hami-devices")
    out = subprocess.run(
        [str(cli), "discover", "--json", "--vendor", "cambricon"],
        check=True, capture_output=True, text=True, env=dict(os.environ),
    )
    devices = json.loads(out.stdout)["devices"]
    assert [d["model"] for d in devices] == ["MLU370-X8"] * 8
    assert {d["memory_mib"] for d in devices} == {49152}
    assert [d["health"] for d in devices].count("unhealthy") == 1
    assert all(d["traits"]["interconnect"]["kind"] == "mlu-link" for d in devices)
