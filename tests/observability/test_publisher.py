"""Serving from a background snapshot: a scrape never gets readings older than the bound, the refresher keeps
them fresh without any scrape waiting, and a hung vendor library still costs no scrape more than the
deadline."""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.request

import pytest

import hami_devices as hd
from hami_devices.ledger import MemoryLedger
from hami_devices.observability import server
from hami_devices.observability.publisher import Publisher
from hami_devices.observability.snapshot import Sampler
from tests.observability.helpers import CLI, LOADED_DEADLINE_S, STALL_BOUND_S, cli_env, simulated, t4_node
from tests.observability.test_exporter import BrokenDevice, HungDevice, _samples, _third_party, released_gate

__all__ = ["released_gate"]  # the fixture, used by name below

SLACK_S = 0.05  # wall clock vs monotonic clock, and the gauge's float formatting


def _scrape(port: int) -> tuple[float, dict[str, list[tuple[dict[str, str], float]]]]:
    """(the time the request was sent, its samples)."""
    sent = time.time()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        return sent, _samples(response.read().decode())


def _taken(samples: dict[str, list[tuple[dict[str, str], float]]]) -> float:
    ((_, value),) = samples["hami_exporter_snapshot_timestamp_seconds"]
    return value


def _pods(samples: dict[str, list[tuple[dict[str, str], float]]]) -> set[str]:
    return {labels.get("pod", "") for labels, _ in samples.get("hami_allocation_info", [])}


def test_a_scrape_serves_the_snapshot_until_it_is_older_than_the_bound() -> None:
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(2))
    hd.allocate(devices, {"parts": [{"memory_mib": 1024}]}, metadata={"pod": "first"})
    max_age = 1.5
    # The background refresh is too slow to matter here: only the age bound refreshes.
    exporter = server.start(devices, ledger, listen="127.0.0.1:0", observe_interval_s=0, refresh_interval_s=600,
                            max_age_s=max_age)
    try:
        sent, first = _scrape(exporter.port)
        taken = _taken(first)
        assert sent - max_age - SLACK_S <= taken <= time.time()
        assert _pods(first) == {"first"}
        hd.allocate(devices, {"parts": [{"memory_mib": 1024}]}, metadata={"pod": "second"})
        sent, again = _scrape(exporter.port)
        if sent < taken + max_age - SLACK_S:  # still young enough: the same snapshot, without the new allocation
            assert _taken(again) == taken and _pods(again) == {"first"}
        time.sleep(max(0.0, taken + max_age + 0.1 - time.time()))
        sent, later = _scrape(exporter.port)
        assert _taken(later) > taken and _taken(later) >= sent - max_age - SLACK_S
        assert _pods(later) == {"first", "second"}
    finally:
        exporter.stop()


def test_the_refresher_keeps_readings_fresh_without_a_scrape_collecting() -> None:
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(1))
    # An age bound no scrape here reaches: every newer snapshot came from the background thread.
    exporter = server.start(devices, ledger, listen="127.0.0.1:0", observe_interval_s=0, refresh_interval_s=0.2,
                            max_age_s=60)
    try:
        _, first = _scrape(exporter.port)
        hd.allocate(devices, {"parts": [{"memory_mib": 1024}]}, metadata={"pod": "new"})
        deadline = time.monotonic() + 10
        while True:
            _, seen = _scrape(exporter.port)
            if "new" in _pods(seen):
                break
            assert time.monotonic() < deadline, "the refresher never picked up the new allocation"
            time.sleep(0.05)
        assert _taken(seen) > _taken(first)
    finally:
        exporter.stop()
    assert not any(t.name == "hami-exporter-refresh" and t.is_alive() for t in threading.enumerate())


def test_a_hung_vendor_under_the_refresher_stalls_no_scrape(released_gate: None) -> None:
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(2))
    devices += [_third_party(HungDevice, devices[0], "hung"), _third_party(BrokenDevice, devices[0], "broken")]
    exporter = server.start(devices, ledger, listen="127.0.0.1:0", timeout_s=LOADED_DEADLINE_S, observe_interval_s=0,
                            refresh_interval_s=0.1)
    try:
        for _ in range(10):
            begin = time.monotonic()
            sent, samples = _scrape(exporter.port)
            assert time.monotonic() - begin < STALL_BOUND_S  # the hung call never returns
            up = {labels["collector"]: value for labels, value in samples["hami_exporter_collector_up"]}
            assert up == {"nvidia": 1.0, "hung": 0.0, "broken": 0.0, "ledger": 1.0, "limiter": 1.0}
            assert _taken(samples) >= sent - exporter.publisher.max_age_s - SLACK_S
            time.sleep(0.05)
        assert sum(t.name.startswith("hami-collect-hung") for t in threading.enumerate()) == 1
    finally:
        HungDevice.gate.set()
        exporter.stop()


def test_the_default_bound_is_the_interval_plus_one_deadline() -> None:
    ledger = MemoryLedger()
    sampler = Sampler([], ledger, timeout_s=2.0)
    try:
        assert Publisher(sampler, server.TextRenderer(), interval_s=5.0).max_age_s == 7.0
        with pytest.raises(ValueError, match="negative"):
            Publisher(sampler, server.TextRenderer(), interval_s=-1)
    finally:
        sampler.close()


def test_the_cli_names_a_negative_refresh_interval() -> None:
    done = subprocess.run([*CLI, "exporter", "--refresh-interval", "-1"], env=cli_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0 and "--refresh-interval" in done.stderr
