"""Usage reports: device-hours weighted by the share granted (memory and cores) and by measured use."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest

import hami_devices as hd
from hami_devices.cli.main import main
from hami_devices.errors import InvalidRequest
from hami_devices.ledger import EventKind, MemoryLedger, SqliteLedger
from hami_devices.ledger.events import USAGE_BUCKET_SECONDS
from hami_devices.observability.observer import Level, Observer, split_sample
from hami_devices.observability.regions import GrantReading, RegionReading
from hami_devices.observability.snapshot import LIMITER, Snapshot
from hami_devices.observability.timeouts import Outcome
from hami_devices.observability.timeparse import parse_time
from hami_devices.observability.usage import usage_report
from tests.observability.helpers import simulated, t4_node

MIB = 1 << 20


def test_a_quarter_core_share_is_charged_a_quarter_of_a_device() -> None:
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(1), isolation="none")
    small = hd.allocate(devices, {"name": "infer", "parts": [{"memory_mib": 3840, "cores": 25}]},
                        metadata={"queue": "gold", "owner": "ana"})
    big = hd.allocate(devices, {"parts": [{"memory_mib": 7680, "cores": 10}]}, metadata={"queue": "silver"})
    time.sleep(0.05)
    hd.release(small)
    (granted,) = ledger.events(kinds=[EventKind.GRANTED], allocation_id=small.id)
    (ended,) = ledger.events(kinds=[EventKind.RELEASED])
    held_h = (ended.time - granted.time) / 3600
    now = time.time()
    rows = {r.group: r for r in usage_report(ledger, granted.time - 60, now + 60, "queue", now=now).rows}
    gold, silver = rows["gold"], rows["silver"]
    assert (gold.vendor, gold.model, gold.allocations) == ("nvidia", "T4", 1)
    assert gold.device_hours == pytest.approx(held_h)  # what a whole-GPU view would charge
    assert gold.core_share_hours == pytest.approx(0.25 * held_h)
    assert gold.memory_share_hours == pytest.approx(0.25 * held_h)  # 3840 of 15360 MiB
    assert gold.charged_share_hours == pytest.approx(0.25 * held_h)
    still_held_h = (now - big.created_at) / 3600
    assert silver.memory_share_hours == pytest.approx(0.5 * still_held_h) and silver.charged_share_hours == (
        pytest.approx(0.5 * still_held_h)
    )
    by_workload = {r.group for r in usage_report(ledger, 0, now + 60, "workload", now=now).rows}
    assert by_workload == {"infer", big.id}  # no workload name: the allocation stands for itself
    assert {r.group for r in usage_report(ledger, 0, now + 60, "owner", now=now).rows} == {"ana", "(none)"}
    assert {r.group for r in usage_report(ledger, 0, now + 60, "device", now=now).rows} == {devices[0].uuid}
    assert usage_report(ledger, now + 3600, now + 7200, "queue", now=now).rows == []  # nothing held then


def test_measured_use_is_split_by_bucket_and_prorated_to_the_period() -> None:
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(1), isolation="none")
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 7680, "cores": 50}]}, metadata={"queue": "q"})
    uuid = handle.grants[0].uuid
    start = (int(handle.created_at // USAGE_BUCKET_SECONDS) + 1) * USAGE_BUCKET_SECONDS  # a bucket edge
    reading = Level.of(GrantReading(7680 * MIB, 3840 * MIB, 3840 * MIB, 0.4))  # held: the same at both ends
    samples = split_sample(handle.id, uuid, start - 100, start + 200, reading, reading)
    assert [s.bucket for s in samples] == [start - USAGE_BUCKET_SECONDS, start]
    assert [s.seconds for s in samples] == [100, 200]
    with ledger.transaction() as view:
        view.add_usage(samples)
        view.add_usage(split_sample(handle.id, uuid, start + 200, start + 300, reading, reading))  # summed per bucket
    whole = usage_report(ledger, start - USAGE_BUCKET_SECONDS, start + USAGE_BUCKET_SECONDS, "queue",
                         now=start + 300).rows[0]
    assert whole.sampled_hours == pytest.approx(400 / 3600)
    assert whole.used_memory_share_hours == pytest.approx(0.25 * 400 / 3600)  # 3840 of 15360 MiB held
    assert whole.used_core_share_hours == pytest.approx(0.4 * 400 / 3600)
    assert whole.utilization_sampled_hours == pytest.approx(400 / 3600)
    half = usage_report(ledger, start, start + USAGE_BUCKET_SECONDS / 2, "queue", now=start + 300).rows[0]
    assert half.sampled_hours == pytest.approx(0.5 * 300 / 3600)  # half of the bucket, taken as even


def _observed(handle: hd.DeviceHandle, at: float, used_mib: int, ratio: float | None) -> Snapshot:
    """What an observer pass at ``at`` sees of one grant: the limiter's reading, nothing else."""
    uuid = handle.grants[0].uuid
    reading = GrantReading(7680 * MIB, used_mib * MIB, used_mib * MIB, ratio)
    region = RegionReading(handle.id, f"{handle.grants[0].node}/nvidia", [], {uuid: reading})
    return Snapshot(at, [], {}, [handle], [region], None, {LIMITER: Outcome(LIMITER, True, 0.0)})


def test_used_usage_integrates_only_between_real_samples() -> None:
    """Sampling starts two minutes after the grant, then every minute: the two minutes before are not
    sampled (no back-fill), and each minute between two readings is the trapezoid of those readings."""
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(1), isolation="none")
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 7680, "cores": 50}]}, metadata={"pod": "p"})
    granted = handle.created_at
    observer = Observer(ledger, max_gap_s=120)
    for offset, used, ratio in [(120, 6000, None), (180, 6000, 0.5), (240, 3000, 0.3), (600, 3000, 0.3)]:
        observer.observe(_observed(handle, granted + offset, used, ratio))
    # 120 s -> 180 s: 6000 MiB held, utilization not measured at the first end; 180 s -> 240 s: 6000 -> 3000 MiB,
    # 0.5 -> 0.3; 240 s -> 600 s is longer than max_gap_s: the observer was away, nothing is counted.
    now = granted + 600
    (row,) = usage_report(ledger, granted - 900, granted + 1800, "allocation", now=now).rows
    assert row.group == handle.id
    assert row.device_hours == pytest.approx(600 / 3600)
    assert row.sampled_hours == pytest.approx(120 / 3600)
    assert row.coverage == pytest.approx(120 / 600)
    assert row.used_memory_share_hours == pytest.approx((6000 * 60 + 4500 * 60) / 15360 / 3600)
    assert row.utilization_sampled_hours == pytest.approx(60 / 3600)
    assert row.used_core_share_hours == pytest.approx(0.4 * 60 / 3600)
    (by_pod,) = usage_report(ledger, granted - 900, granted + 1800, "pod", now=now).rows
    assert by_pod.group == "p" and by_pod.sampled_hours == row.sampled_hours


def test_usage_groups_by_namespace_and_pod() -> None:
    ledger = MemoryLedger()
    devices = simulated(ledger, t4_node(1), isolation="none")
    for meta in ({"namespace": "prod", "pod": "web-0"}, {"namespace": "prod", "pod": "web-1"}, {"pod": "solo"}, {}):
        hd.allocate(devices, {"parts": [{"memory_mib": 1024, "cores": 10}]}, metadata=meta)
    now = time.time()
    by_ns = {r.group: r.allocations for r in usage_report(ledger, 0, now + 60, "namespace", now=now).rows}
    assert by_ns == {"prod": 2, "(none)": 2}
    by_pod = {r.group for r in usage_report(ledger, 0, now + 60, "pod", now=now).rows}
    assert by_pod == {"prod/web-0", "prod/web-1", "solo", "(none)"}


def test_usage_and_events_cli_on_a_sqlite_ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ledger.db"
    ledger = SqliteLedger(path)
    devices = simulated(ledger, t4_node(1), isolation="none")
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 1536, "cores": 20}]}, metadata={"owner": "bo"})
    hd.release(handle, reason="done")
    ledger.close()
    assert main(["usage", "--ledger", str(path), "--from", "1h", "--by", "owner", "--csv"]) == 0
    (row,) = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert row["group"] == "bo" and float(row["core_share_hours"]) == pytest.approx(0.2 * float(row["device_hours"]))
    assert main(["events", "--ledger", str(path), "--since", "10m", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["kind"] for e in listed["events"]] == ["allocation.granted", "allocation.released"]
    assert main(["events", "--ledger", str(path), "--kind", "allocation.released"]) == 0
    assert "done" in capsys.readouterr().out
    assert main(["usage", "--ledger", str(tmp_path / "missing.db"), "--from", "1h", "--by", "queue"]) == 2
    assert "no ledger at" in capsys.readouterr().err
    assert main(["usage", "--ledger", str(path), "--from", "1h", "--to", "2h", "--by", "queue"]) == 2
    capsys.readouterr()
    assert main(["events", "--ledger", str(path), "--prune-before", "now", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pruned_events"] == 2


def test_times_on_the_command_line() -> None:
    assert parse_time("2024-05-01T12:00:00Z", "--since") == 1714564800.0
    assert parse_time("2024-05-01T12:00:00", "--since") == 1714564800.0  # naive: UTC
    assert parse_time("1714564800", "--since") == 1714564800.0
    assert parse_time("90m", "--since", now=10_000.0) == 10_000.0 - 5400
    assert parse_time("now", "--to", now=5.0) == 5.0
    with pytest.raises(InvalidRequest, match="--since"):
        parse_time("yesterday", "--since")
