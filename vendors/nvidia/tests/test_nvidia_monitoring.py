"""Monitoring through pynvml against the fake: readings, processes, fallbacks and not-available values."""

from __future__ import annotations

from nvidia_helpers import FAKE_NVML_OLD, scenario


def test_h100_readings_and_processes() -> None:
    metrics = scenario("monitor", "", "h100-nvlink.conf")["metrics"]
    first = metrics[0]
    assert first["health"] == "healthy" and first["memory_total_mib"] == 81559
    assert first["memory_used_mib"] == 2048  # v2: the driver's reservation is not counted as used
    assert first["utilization_pct"] == 0 and first["temperature_c"] == 30 and first["power_w"] == 70.0
    assert [(p["pid"], p["memory_used_mib"]) for p in first["processes"]] == [(4242, 1024), (4243, 1024)]
    third = metrics[3]
    assert third["utilization_pct"] == 30 and third["extra"]["memory_utilization_pct"] == 15
    assert third["power_w"] == 73.0 and third["processes"] == []


def test_old_driver_falls_back_and_reports_not_available() -> None:
    metrics = scenario("monitor", "", "old-driver.conf", FAKE_NVML_OLD)["metrics"]
    assert metrics[0]["power_w"] == 30.0 and metrics[0]["temperature_c"] == 50
    second = metrics[1]
    assert second["power_w"] == "n/a" and second["temperature_c"] == "n/a"  # never 0
    assert second["memory_used_mib"] == 512  # nvmlDeviceGetMemoryInfo v1
    assert second["processes"] == [{"pid": 31337, "memory_used_mib": 512, "utilization_pct": "n/a"}]  # v1 query


def test_lost_gpu_monitors_as_unhealthy_without_crashing() -> None:
    metrics = scenario("monitor", "", "gpu-lost.conf")["metrics"]
    lost = metrics[2]
    assert lost["health"] == "unhealthy"
    assert lost["memory_used_mib"] == "n/a" and lost["power_w"] == "n/a" and lost["utilization_pct"] == "n/a"
    assert all(m["health"] == "healthy" and m["power_w"] == 250.0 for i, m in enumerate(metrics) if i != 2)
