"""The exporter: a hung or failing vendor library never stalls or breaks a scrape, not-available readings
are omitted, every served family is declared, and counters come from the event log."""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

import hami_devices as hd
from hami_devices.allocation import evict
from hami_devices.device import Device, DeviceReadings
from hami_devices.errors import InsufficientResources, VendorLibraryError
from hami_devices.ledger import Ledger, MemoryLedger
from hami_devices.limiter import fake_library
from hami_devices.models import Health
from hami_devices.observability import names, server
from hami_devices.observability.collector import families
from hami_devices.observability.exposition import TextRenderer
from hami_devices.observability.snapshot import Sampler
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import Env
from tests.observability.helpers import CLI, LOADED_DEADLINE_S, REPO, STALL_BOUND_S, cli_env, simulated, t4_node

NVML_FIXTURES = REPO / "vendors" / "nvidia" / "tests" / "fixtures"


class HungDevice(Device):
    """A vendor library call that never returns (until the test lets it go)."""

    gate = threading.Event()

    def read(self) -> DeviceReadings:
        self.gate.wait()
        return DeviceReadings(health=Health.HEALTHY)


class BrokenDevice(Device):
    def read(self) -> DeviceReadings:
        raise VendorLibraryError("broken", "brokenDeviceGetInfo", 999, "driver not loaded")


def _third_party(cls: type[Device], template: Device, vendor: str) -> Device:
    info = template.info.model_copy(update={"vendor": vendor, "uuid": f"{vendor.upper()}-0", "model": "X1"})
    return cls(info, template.adapter, template.ledger)


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


@pytest.fixture
def released_gate() -> Iterator[None]:
    HungDevice.gate.clear()
    yield
    HungDevice.gate.set()


def test_a_hung_and_a_failing_vendor_do_not_stall_or_break_the_scrape(released_gate: None) -> None:
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(2))
    devices += [_third_party(HungDevice, devices[0], "hung"), _third_party(BrokenDevice, devices[0], "broken")]
    exporter = server.start(devices, ledger, listen=None, timeout_s=LOADED_DEADLINE_S, observe_interval_s=0)
    try:
        for _ in range(3):  # the hung call is still running on later scrapes: not started again
            begin = time.monotonic()
            samples = _samples(exporter.scrape().decode())
            assert time.monotonic() - begin < STALL_BOUND_S  # the hung call never returns
            up = {labels["collector"]: value for labels, value in samples["hami_exporter_collector_up"]}
            assert up == {"nvidia": 1.0, "hung": 0.0, "broken": 0.0, "ledger": 1.0, "limiter": 1.0}
            healthy = {labels["uuid"] for labels, _ in samples["hami_device_healthy"]}
            assert healthy == {d.uuid for d in devices[:2]}  # nothing is said about devices nobody could read
            total = {labels["uuid"] for labels, _ in samples["hami_device_memory_total_bytes"]}
            assert total == {d.uuid for d in devices}  # static facts stay
        assert sum(t.name.startswith("hami-collect-hung") for t in threading.enumerate()) == 1
    finally:
        HungDevice.gate.set()
        exporter.stop()


def test_not_available_readings_are_omitted_never_zero() -> None:
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(1), isolation="none")  # no hardware readings, no limiter region
    hd.allocate(devices, {"parts": [{"memory_mib": 1024, "cores": 10}]}, metadata={"pod": "p"})
    exporter = server.start(devices, ledger, listen=None, observe_interval_s=0)
    samples = _samples(exporter.scrape().decode())
    exporter.stop()
    for absent in ("hami_device_memory_used_bytes", "hami_device_utilization_ratio", "hami_device_power_watts",
                   "hami_device_temperature_celsius", "hami_allocation_memory_used_bytes",
                   "hami_allocation_utilization_ratio"):
        assert absent not in samples, absent
    ((labels, value),) = samples["hami_allocation_memory_limit_bytes"]
    assert value == 1024 * 2**20 and labels["pod"] == "p" and labels["queue"] == "default"


def test_a_device_the_old_driver_cannot_read_has_no_power_series(tmp_path: Path) -> None:
    """The real NVIDIA binding on the fake NVML of an old driver: GPU 1 has no power or temperature reading."""
    env = cli_env(
        HAMI_NVML_LIBRARY=str(fake_library("nvml-old/libnvidia-ml.so.1")),
        HAMI_FAKE_NVML_FIXTURE=str(NVML_FIXTURES / "old-driver.conf"),
    )
    done = subprocess.run([*CLI, "exporter", "--vendor", "nvidia", "--ledger", str(tmp_path / "l.db"), "--once"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    samples = _samples(done.stdout)
    power = {labels["device_index"]: value for labels, value in samples["hami_device_power_watts"]}
    memory = {labels["device_index"]: value for labels, value in samples["hami_device_memory_used_bytes"]}
    assert power == {"0": 30.0} and set(memory) == {"0", "1"}


def _allocate_grant_evict_refuse(ledger: Ledger) -> None:
    devices = simulated(ledger, t4_node(1))
    kept = hd.allocate(devices, {"parts": [{"memory_mib": 8000}]}, metadata={"queue": "gold"})
    gone = hd.allocate(devices, {"parts": [{"memory_mib": 4000}]})
    evict(ledger, gone.id, reclaimer="gold", reason="guarantee")
    with pytest.raises(InsufficientResources):
        hd.allocate(devices, {"parts": [{"memory_mib": 9000}]})
    hd.release(kept)


def test_metrics_over_http_are_the_declared_ones_and_count_the_event_log() -> None:
    ledger = MemoryLedger()
    exporter = server.start([], ledger, listen="127.0.0.1:0", observe_interval_s=0)
    try:
        _allocate_grant_evict_refuse(ledger)
        with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        exporter.stop()
    declared = {m.name: m for m in names.SERVED}
    for family in text_string_to_metric_families(text):
        full = family.name + ("_total" if family.type == "counter" else "")
        metric = declared.get(full) or declared[family.name]
        assert family.type == ("gauge" if metric.kind == "info" else metric.kind), family.name
        for sample in family.samples:
            assert set(sample.labels) <= set(metric.labels), sample.name  # empty labels are left out
    samples = _samples(text)
    assert samples["hami_allocations_granted_total"] == [({}, 2.0)]
    assert samples["hami_allocations_released_total"] == [({}, 1.0)]
    assert samples["hami_allocation_evictions_total"] == [({"reclaimer": "gold"}, 1.0)]
    assert ({"reason": "CardInsufficientMemory"}, 1.0) in samples["hami_allocation_refusals_total"]


def test_metric_names_follow_prometheus_conventions() -> None:
    units = ("_bytes", "_ratio", "_celsius", "_watts", "_seconds", "_total", "_info", "_up", "_healthy",
             "_sharers", "_processes", "_hertz", "_bytes_per_second", "_pages", "_rows", "_pending", "_failed",
             "_xid")
    for metric in names.SERVED:
        assert metric.name.startswith("hami_") and metric.name == metric.name.lower()
        assert metric.name.endswith("_total") == (metric.kind == "counter"), metric.name
        assert metric.name.endswith(units), f"{metric.name}: say the unit"
        assert len(set(metric.labels)) == len(metric.labels)


def _normalised(text: str) -> set[tuple[str, frozenset[tuple[str, str]], float]]:
    """Samples as Prometheus stores them: a label with an empty value is no label."""
    return {
        (sample.name, frozenset((k, v) for k, v in sample.labels.items() if v != ""), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_the_fast_text_format_says_what_prometheus_client_says(drivers: Drivers, wenv: Env) -> None:
    """The exporter's own renderer (label strings kept between scrapes) against prometheus_client's."""
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(2))
    odd = {"pod": 'we"ird\\pod\nname', "namespace": "ns", "owner": "ünïcode"}
    held = hd.allocate(devices, {"parts": [{"memory_mib": 64, "cores": 30}]}, metadata=odd)
    hd.allocate(devices, {"name": "plain", "parts": [{"count": 2, "memory_mib": 512}]})
    with pytest.raises(InsufficientResources):
        hd.allocate(devices, {"parts": [{"memory_mib": 20000}]})
    evict(ledger, hd.allocate(devices, {"parts": [{"memory_mib": 128}]}).id, reclaimer="q/a", reason="test")
    holder = subprocess.Popen([str(drivers.cuda), "hold", str(8 << 20)], env={**wenv.build(shim=None), **held.env},
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().startswith("READY")
    sampler = Sampler(devices, ledger)
    renderer = TextRenderer()
    try:
        for _ in range(2):  # the second render reuses the kept label strings and lines
            snapshot = sampler.snapshot()
            ours = renderer.render(snapshot).decode()
            registry = CollectorRegistry(auto_describe=False)
            registry.register(_Fixed(families(snapshot)))
            assert _normalised(ours) == _normalised(generate_latest(registry).decode())
        assert f'pod="{_escaped(odd["pod"])}"' in ours and 'owner="ünïcode"' in ours
        assert "hami_allocation_memory_used_bytes{" in ours and 'reclaimer="q/a"' in ours
    finally:
        holder.kill()
        holder.wait()
        sampler.close()


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Fixed:
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        return self.metrics
