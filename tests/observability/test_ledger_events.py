"""Lifecycle events are written with the change they describe, by both ledgers, and replay to the live set."""

from __future__ import annotations

import contextlib
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hami_devices as hd
from hami_devices.allocation import evict, release_from
from hami_devices.errors import InsufficientResources, LedgerSchemaError, UnknownAllocation
from hami_devices.ledger import SCHEMA_VERSION, Event, EventKind, Ledger, MemoryLedger, SqliteLedger
from tests.observability.helpers import replay, simulated, t4_node

META = {"workload": "web", "namespace": "prod", "pod": "web-0", "container": "main", "queue": "gold", "owner": "ana"}


@pytest.fixture(params=["memory", "sqlite"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    made: Ledger = MemoryLedger() if request.param == "memory" else SqliteLedger(tmp_path / "ledger.db")
    yield made
    made.close()


def test_grant_release_evict_refuse_are_recorded_with_the_workload(ledger: Ledger) -> None:
    devices = simulated(ledger, t4_node(1))
    first = hd.allocate(devices, {"parts": [{"memory_mib": 4096, "cores": 25}]}, metadata=META)
    second = hd.allocate(devices, {"parts": [{"memory_mib": 2048}]}, metadata={"pod": "batch-1"})
    with pytest.raises(InsufficientResources) as refusal:
        hd.allocate(devices, {"parts": [{"memory_mib": 15000}]}, metadata={"pod": "big"})
    assert ledger.get(first.id).metadata == META
    hd.release(first, reason="job finished")
    evict(ledger, second.id, reclaimer="queue/gold", reason="reclaim for a guaranteed task")
    with pytest.raises(UnknownAllocation):
        release_from(ledger, first.id, {})

    events = ledger.events()
    assert [e.kind for e in events] == [
        EventKind.GRANTED, EventKind.GRANTED, EventKind.REFUSED, EventKind.RELEASED, EventKind.EVICTED,
    ]
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    granted = events[0]
    assert granted.allocation_id == first.id and granted.data["metadata"] == META
    (grant,) = granted.data["grants"]
    assert grant["memory_mib"] == 4096 and grant["cores"] == 25 and grant["device_memory_mib"] == 15360
    refused = events[2]
    assert refused.allocation_id is None and refused.data["metadata"] == {"pod": "big"}
    assert refused.data["counts"] == {str(code): n for code, n in refusal.value.counts.items()}
    assert "CardInsufficientMemory" in refused.data["counts"] and refused.data["permanent"] is False  # fits later
    assert events[3].data["reason"] == "job finished" and events[3].data["metadata"] == META
    assert events[4].data["reclaimer"] == "queue/gold" and events[4].allocation_id == second.id
    assert replay(events) == set() == {h.id for h in ledger.handles()}
    assert ledger.events(kinds=[EventKind.GRANTED], allocation_id=second.id)[0].data["metadata"] == {"pod": "batch-1"}
    assert ledger.events(after_seq=4) == events[4:]


def test_an_event_commits_or_rolls_back_with_its_transaction(ledger: Ledger) -> None:
    devices = simulated(ledger, t4_node(1))
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 1024}]})
    with pytest.raises(RuntimeError), ledger.transaction() as view:
        view.remove(handle.id)
        view.record_event(Event(kind=EventKind.RELEASED, allocation_id=handle.id))
        view.set_observation("procs/x", 1.0, {"alive": []})
        raise RuntimeError("crash between the change and the commit")
    assert [h.id for h in ledger.handles()] == [handle.id]
    assert [e.kind for e in ledger.events()] == [EventKind.GRANTED]
    with ledger.reading() as view:
        assert view.observations("procs/") == {}


def test_schema_version_migrates_an_old_ledger_and_refuses_a_newer_one(tmp_path: Path) -> None:
    old = tmp_path / "v1.db"
    conn = sqlite3.connect(old)
    conn.executescript(
        "CREATE TABLE allocations (id TEXT PRIMARY KEY, body TEXT NOT NULL, created_at REAL NOT NULL);"
        "CREATE TABLE grants (handle_id TEXT NOT NULL REFERENCES allocations(id) ON DELETE CASCADE,"
        " uuid TEXT NOT NULL, body TEXT NOT NULL);"
    )
    handle = hd.DeviceHandle(request={"parts": [{"memory_mib": 1}]}, grants=[])
    body = handle.model_dump_json(exclude={"metadata"})  # as a release before metadata wrote it
    conn.execute("INSERT INTO allocations VALUES (?, ?, ?)", (handle.id, body, handle.created_at))
    conn.commit()
    conn.close()
    ledger = SqliteLedger(old)
    assert ledger.schema_version == SCHEMA_VERSION == 3
    assert ledger.get(handle.id).metadata == {}
    assert ledger.events() == []
    ledger.close()
    conn = sqlite3.connect(old)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerSchemaError, match="schema version 99"):
        SqliteLedger(old)


OPS = st.lists(
    st.tuples(st.sampled_from(["allocate", "release", "evict"]), st.integers(1, 6000), st.integers(0, 9)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_the_event_log_replays_to_the_live_allocations(ops: list[tuple[str, int, int]], tmp_path: Path) -> None:
    # tmp_path is shared by every example: each needs a ledger file of its own
    for ledger in (MemoryLedger(), SqliteLedger(tmp_path / f"{uuid.uuid4().hex}.db")):
        devices = simulated(ledger, t4_node(2), isolation="none")
        for op, memory, pick in ops:
            live = ledger.handles()
            if op == "allocate":
                with contextlib.suppress(InsufficientResources):
                    hd.allocate(devices, {"parts": [{"memory_mib": memory}]}, metadata={"pod": f"p{pick}"})
            elif live:
                victim = live[pick % len(live)]
                if op == "release":
                    release_from(ledger, victim.id, {})
                else:
                    evict(ledger, victim.id, reclaimer="q", reason="test")
        events = ledger.events()
        assert replay(events) == {h.id for h in ledger.handles()}
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        refusals = sum(1 for e in events if e.kind == EventKind.REFUSED)
        grants = sum(1 for e in events if e.kind == EventKind.GRANTED)
        assert grants + refusals == sum(1 for op, _, _ in ops if op == "allocate")
        ledger.close()


def test_pruning_keeps_what_replay_and_reports_need(ledger: Ledger) -> None:
    devices = simulated(ledger, t4_node(1), isolation="none")
    done = hd.allocate(devices, {"parts": [{"memory_mib": 1024}]})
    spans = hd.allocate(devices, {"parts": [{"memory_mib": 1024}]})
    live = hd.allocate(devices, {"parts": [{"memory_mib": 1024}]})
    with pytest.raises(InsufficientResources):
        hd.allocate(devices, {"parts": [{"memory_mib": 99999}]})
    hd.release(done)
    cut = time.time()
    time.sleep(0.01)
    hd.release(spans)  # granted before the cut, released after it
    with ledger.transaction() as view:
        assert view.prune(cut) == 3  # done's grant and release, and the refusal
    events = ledger.events()
    assert [(e.kind, e.allocation_id) for e in events] == [
        (EventKind.GRANTED, spans.id), (EventKind.GRANTED, live.id), (EventKind.RELEASED, spans.id),
    ]
    assert replay(events) == {live.id} == {h.id for h in ledger.handles()}
    with pytest.raises(RuntimeError), ledger.transaction() as view:
        view.prune(time.time() + 1)
        raise RuntimeError("rolled back")
    assert ledger.events() == events


def test_gc_releases_and_orphan_removals_are_recorded(tmp_path: Path) -> None:
    from hami_devices import limiter
    from hami_devices.lifecycle import collect_garbage

    ledger = SqliteLedger(tmp_path / "ledger.db")
    devices = simulated(ledger, t4_node(1))
    idle = hd.allocate(devices, {"parts": [{"memory_mib": 64}]}, metadata={"pod": "gone"})
    orphan = limiter.region_dir() / "leftover.region"
    orphan.write_bytes(b"not a region")
    report = collect_garbage(ledger, {}, grace_s=0, now=time.time() + 120)
    assert {a.target for a in report.actions if a.done} >= {idle.id, str(orphan)}
    released, removed = ledger.events(kinds=[EventKind.RELEASED, EventKind.REGION_REMOVED])
    assert released.allocation_id == idle.id and released.data["reason"].startswith("gc: no live workload process")
    assert released.data["metadata"] == {"pod": "gone"}
    assert removed.data["path"] == str(orphan)
    ledger.close()
