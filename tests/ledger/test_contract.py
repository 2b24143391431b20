"""The ledger contract, run unchanged against SQLite and PostgreSQL (``any_ledger`` / ``ledger_target``).

Each expectation is written from the interface's definition (``hami_devices/ledger/base.py``): what a
plain Python list or dict holding the same rows would answer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from hami_devices.errors import LedgerSchemaError, LedgerUnavailable, UnknownAllocation
from hami_devices.ledger import Event, Ledger, UsageSample
from hami_devices.ledger.events import USAGE_BUCKET_SECONDS
from hami_devices.ledger.opening import LedgerTarget, describe, open_ledger
from hami_devices.models import DeviceHandle, Grant

HERE = Path(__file__).parent
REPO = HERE.parents[1]
LIFECYCLE = {"allocation.granted", "allocation.released", "allocation.evicted"}
ENDS = {"allocation.released", "allocation.evicted"}


def _grant(uuid: str, memory: int, *, cores: int = 10) -> Grant:
    return Grant(uuid=uuid, node="n", vendor="nvidia", model="T4", index=0, part=0, memory_mib=memory, cores=cores)


def _handle(handle_id: str, *grants: Grant, at: float = 1000.0) -> DeviceHandle:
    return DeviceHandle(id=handle_id, request={"parts": [{"memory_mib": 1}]}, grants=list(grants), created_at=at)


def _worker(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, str(HERE / "worker.py"), *args], stdout=subprocess.PIPE, text=True, env=env
    )


# ---- allocations ----


def test_handles_come_back_whole_in_creation_then_id_order(any_ledger: Ledger) -> None:
    # ids whose code-point order differs from a natural-language collation's ("B" < "_" < "a" < "b")
    made = [
        _handle("a_b", _grant("GPU-1", 100), _grant("GPU-2", 200), at=5.0),
        _handle("aB", _grant("GPU-1", 300), at=5.0),
        _handle("Ab", _grant("GPU-2", 400), at=5.0),
        _handle("z", _grant("GPU-1", 500), at=1.25),
        _handle("a-c", at=7.5),  # host-only: no grant
    ]
    with any_ledger.transaction() as view:
        for handle in made:
            view.add(handle)
    expected = sorted(made, key=lambda h: (h.created_at, h.id))
    assert any_ledger.handles() == expected
    with any_ledger.reading() as view:
        assert view.handle_ids() == [h.id for h in expected]
    for uuid in ("GPU-1", "GPU-2", "GPU-3"):
        on_it = [g for h in made for g in h.grants if g.uuid == uuid]
        got = any_ledger.grants_on(uuid)
        assert sorted(g.model_dump_json() for g in got) == sorted(g.model_dump_json() for g in on_it)
    assert any_ledger.get("aB") == made[1]
    assert any_ledger.get("a_b").created_at == 5.0


def test_remove_returns_the_handle_once_and_takes_its_grants(any_ledger: Ledger) -> None:
    kept, gone = _handle("kept", _grant("GPU-1", 100)), _handle("gone", _grant("GPU-1", 200), _grant("GPU-2", 1))
    with any_ledger.transaction() as view:
        view.add(kept)
        view.add(gone)
    with any_ledger.transaction() as view:
        assert view.remove("gone") == gone
        with pytest.raises(UnknownAllocation):
            view.remove("gone")
    with pytest.raises(UnknownAllocation):
        any_ledger.get("gone")
    assert any_ledger.grants_on("GPU-1") == kept.grants
    assert any_ledger.grants_on("GPU-2") == []
    assert [h.id for h in any_ledger.handles()] == ["kept"]


def test_get_answers_what_the_ledger_holds_now_whoever_wrote_it(ledger_target: LedgerTarget) -> None:
    reader, writer = open_ledger(ledger_target), open_ledger(ledger_target)
    with writer.transaction() as view:
        view.add(_handle("same-id", _grant("GPU-1", 100), at=1.0))
        view.add(_handle("other", _grant("GPU-2", 1), at=2.0))
    with reader.transaction() as view:
        assert view.handle_ids() == ["same-id", "other"]
        assert view.get("same-id").grants[0].memory_mib == 100
    with writer.transaction() as view:  # another scheduler releases it and books a new one under the same id
        view.remove("same-id")
        view.add(_handle("same-id", _grant("GPU-3", 200), at=2000.0))
        view.add(_handle("new", _grant("GPU-1", 5), at=3.0))
    with reader.transaction() as view:
        assert view.handle_ids() == ["other", "new", "same-id"]
        assert view.get("same-id") == _handle("same-id", _grant("GPU-3", 200), at=2000.0)
        assert view.get("new").grants == [_grant("GPU-1", 5)]
        view.remove("other")
        view.add(_handle("mine", _grant("GPU-4", 7)))
        with pytest.raises(UnknownAllocation):
            view.get("other")
        assert view.get("mine").grants == [_grant("GPU-4", 7)]
        got = view.get("new")
        got.metadata["changed"] = "by the caller"  # a caller's copy: the next get is the ledger's
        assert view.get("new").metadata == {}
    with reader.reading() as view:
        assert view.handle_ids() == ["new", "mine", "same-id"]
        with pytest.raises(UnknownAllocation):
            view.get("other")
    reader.close()
    writer.close()


def test_a_failed_transaction_leaves_nothing_behind(any_ledger: Ledger) -> None:
    with any_ledger.transaction() as view:
        view.add(_handle("before", _grant("GPU-1", 10)))
    with pytest.raises(UnknownAllocation), any_ledger.transaction() as view:
        view.add(_handle("torn", _grant("GPU-1", 20)))
        view.remove("before")
        view.record_event(Event(kind="allocation.granted", allocation_id="torn"))
        view.set_observation("procs/torn", 1.0, {"alive": [1]})
        view.add_usage([UsageSample(0.0, "torn", "GPU-1", 1.0, 20.0)])
        view.remove("never-there")  # the caller's error: everything above must roll back
    assert [h.id for h in any_ledger.handles()] == ["before"]
    assert any_ledger.grants_on("GPU-1") == [_grant("GPU-1", 10)]
    assert any_ledger.events() == []
    with any_ledger.reading() as view:
        assert view.observations("") == {}
        assert view.usage(0.0, 1e12) == []
    with any_ledger.transaction() as view:  # and the ledger is still usable
        view.add(_handle("after"))
    assert {h.id for h in any_ledger.handles()} == {"before", "after"}


def test_transactions_do_not_nest(any_ledger: Ledger) -> None:
    with any_ledger.transaction() as outer:
        outer.add(_handle("outer"))
        with pytest.raises(LedgerUnavailable), any_ledger.transaction():
            pass
    assert [h.id for h in any_ledger.handles()] == ["outer"]


# ---- events ----

EVENT_ROWS = [
    # (time, kind, allocation_id, uuid, node)
    (10.0, "allocation.granted", "a", "GPU-1", "n1"),
    (11.5, "allocation.refused", None, None, "n1"),
    (11.5, "process.started", "a", "GPU-1", "n1"),
    (12.0, "allocation.granted", "b", "GPU-2", "n2"),
    (13.0, "allocation.released", "a", None, "n1"),
    (14.0, "device.health", None, "GPU-2", "n2"),
    (15.0, "allocation.evicted", "b", None, "n2"),
]


def _by_definition(rows: list[Event], **f: Any) -> list[Event]:
    found = [
        e for e in rows
        if (e.seq or 0) > f.get("after_seq", 0)
        and (f.get("since") is None or e.time >= f["since"])
        and (f.get("until") is None or e.time < f["until"])
        and (f.get("allocation_id") is None or e.allocation_id == f["allocation_id"])
        and (f.get("kinds") is None or e.kind in f["kinds"])
    ]
    return found if f.get("limit") is None else found[: f["limit"]]


def test_events_are_numbered_in_commit_order_and_filter_as_defined(any_ledger: Ledger) -> None:
    recorded: list[Event] = []
    for at, kind, allocation_id, uuid, node in EVENT_ROWS:
        event = Event(time=at, kind=kind, allocation_id=allocation_id, uuid=uuid, node=node, data={"at": at, "n": [1]})
        recorded.append(any_ledger.record_event(event))
    assert [e.seq for e in recorded] == list(range(1, len(EVENT_ROWS) + 1))
    assert any_ledger.events() == recorded
    with any_ledger.reading() as view:
        assert view.last_seq() == len(EVENT_ROWS)
    filters: list[dict[str, Any]] = [
        {"after_seq": 3},
        {"since": 11.5},
        {"until": 11.5},
        {"since": 11.5, "until": 14.0},
        {"allocation_id": "a"},
        {"kinds": ["allocation.granted", "allocation.evicted"]},
        {"kinds": []},
        {"limit": 2},
        {"after_seq": 1, "allocation_id": "a", "limit": 1},
        {"since": 0.0, "kinds": {"device.health"}, "limit": 10},
    ]
    for f in filters:
        assert any_ledger.events(**f) == _by_definition(recorded, **f), f


def test_a_pruned_seq_is_never_handed_out_again(any_ledger: Ledger) -> None:
    for n in range(3):
        any_ledger.record_event(Event(time=float(n), kind="device.health"))
    with any_ledger.transaction() as view:
        assert view.prune(100.0) == 3
        assert view.last_seq() == 0
    later = any_ledger.record_event(Event(time=200.0, kind="device.health"))
    assert later.seq == 4


def test_prune_forgets_usage_buckets_that_end_before_the_cut(any_ledger: Ledger) -> None:
    width = USAGE_BUCKET_SECONDS
    samples = [UsageSample(b * width, "live", "GPU-1", 1.0, 5.0) for b in range(4)]
    with any_ledger.transaction() as view:
        view.add_usage(samples)
    cut = 2 * width + 1.0
    with any_ledger.transaction() as view:
        view.prune(cut)
    with any_ledger.reading() as view:
        assert view.usage(-1e9, 1e9) == [s for s in samples if s.bucket + width > cut]


def test_prune_by_definition_on_one_cut(any_ledger: Ledger) -> None:
    rows = [
        (1.0, "allocation.granted", "done"), (2.0, "allocation.released", "done"),
        (1.0, "allocation.granted", "live"),
        (3.0, "allocation.granted", "spans"), (9.0, "allocation.released", "spans"),
        (1.0, "allocation.granted", "evicted"), (4.0, "allocation.evicted", "evicted"),
        (2.0, "process.started", "live"), (8.0, "process.exited", "live"),
        (3.0, "allocation.refused", None),
    ]
    recorded = [any_ledger.record_event(Event(time=t, kind=k, allocation_id=a)) for t, k, a in rows]
    cut = 5.0
    ended = {e.allocation_id for e in recorded if e.kind in ENDS and e.time < cut}
    kept = [e for e in recorded if not (e.time < cut and (e.kind not in LIFECYCLE or e.allocation_id in ended))]
    with any_ledger.transaction() as view:
        assert view.prune(cut) == len(recorded) - len(kept)
    assert any_ledger.events() == kept


# ---- observer state ----


def test_observations_are_found_by_prefix_and_forgotten_by_none(any_ledger: Ledger) -> None:
    values: dict[str, tuple[float, Any]] = {
        "procs/a": (1.0, {"alive": [1, 2]}),
        "procs/b": (2.0, [1, "x", None]),
        "procs%": (3.0, "percent"),
        "procs_": (4.0, 5),
        "procsX/a": (5.0, True),
        "procs/\u00e9t\u00e9": (6.0, {"nested": {"deep": [1.5]}}),
        "health/GPU-1": (7.0, "ok"),
        "procs/\U0001f600": (8.0, "astral"),
    }
    with any_ledger.transaction() as view:
        for key, (at, value) in values.items():
            view.set_observation(key, at, value)
        view.set_observation("procs/b", 9.0, {"replaced": True})
        view.set_observation("procs/a", 10.0, None)
        view.set_observation("never/set", 11.0, None)
    values["procs/b"] = (9.0, {"replaced": True})
    del values["procs/a"]
    with any_ledger.reading() as view:
        for prefix in ("procs/", "procs", "health/", "", "nothing/", "procs/\u00e9"):
            assert view.observations(prefix) == {k: v for k, v in values.items() if k.startswith(prefix)}, prefix


# ---- usage ----


def test_usage_sums_per_bucket_allocation_and_device(any_ledger: Ledger) -> None:
    width = USAGE_BUCKET_SECONDS
    batches = [
        [UsageSample(0.0, "a", "GPU-1", 10.0, 100.0), UsageSample(0.0, "a", "GPU-1", 5.0, 50.0, 5.0, 2.5)],
        [UsageSample(width, "a", "GPU-1", 1.0, 1.0), UsageSample(width, "B", "GPU-1", 2.0, 2.0)],
        [UsageSample(0.0, "a", "GPU-1", 1.0, 1.0, 1.0, 0.5), UsageSample(2 * width, "a", "GPU-2", 3.0, 3.0)],
        [UsageSample(width, "_", "GPU-1", 2.0, 2.0)],
    ]
    for batch in batches:
        with any_ledger.transaction() as view:
            view.add_usage(batch)
    sums: dict[tuple[float, str, str], list[float]] = {}
    for sample in (s for batch in batches for s in batch):
        figures = [sample.seconds, sample.memory_mib_seconds, sample.utilization_seconds,
                   sample.utilization_ratio_seconds]
        key = (sample.bucket, sample.allocation_id, sample.uuid)
        sums[key] = [a + b for a, b in zip(sums.get(key, [0.0] * 4), figures, strict=True)]
    everything = [UsageSample(*key, *figures) for key, figures in sorted(sums.items())]
    with any_ledger.reading() as view:
        assert view.usage(-1e9, 1e9) == everything
        for since, until in [(0.0, width), (width + 1, 2 * width), (width, width), (2 * width + 1, 9 * width)]:
            want = [s for s in everything if s.bucket < until and s.bucket > since - width]
            assert view.usage(since, until) == want, (since, until)


# ---- durability, schema ----


def test_everything_survives_a_reopen(ledger_target: LedgerTarget) -> None:
    first = open_ledger(ledger_target)
    handle = _handle("h", _grant("GPU-1", 64), at=time.time())
    with first.transaction() as view:
        view.add(handle)
        event = view.record_event(Event(kind="allocation.granted", allocation_id="h", data={"k": "v"}))
        view.set_observation("procs/h", 2.5, {"alive": [7]})
        view.add_usage([UsageSample(0.0, "h", "GPU-1", 1.0, 64.0)])
    first.close()
    again = open_ledger(ledger_target)
    assert again.handles() == [handle]
    assert again.events() == [event]
    with again.reading() as view:
        assert view.observations("procs/") == {"procs/h": (2.5, {"alive": [7]})}
        assert view.usage(0.0, 1.0) == [UsageSample(0.0, "h", "GPU-1", 1.0, 64.0)]
    assert getattr(again, "schema_version") == 3  # noqa: B009  (both ledgers have it; Ledger does not)
    again.close()


def _store_schema_version(target: LedgerTarget, version: int) -> None:
    """Write a version number as a newer release would have: where each database keeps it."""
    if isinstance(target, Path):
        import sqlite3

        lite = sqlite3.connect(target)
        lite.execute(f"PRAGMA user_version = {version}")
        lite.commit()
        lite.close()
    else:
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("UPDATE ledger_schema SET version = %s", (version,))


def test_a_ledger_from_a_newer_release_is_refused(ledger_target: LedgerTarget) -> None:
    open_ledger(ledger_target).close()
    _store_schema_version(ledger_target, 99)
    with pytest.raises(LedgerSchemaError, match="schema version 99") as refused:
        open_ledger(ledger_target)
    assert describe(ledger_target) in str(refused.value)


# ---- concurrency: the guarantees of one writer lock ----


def test_a_writer_waits_for_the_one_before_and_sees_its_commit(ledger_target: LedgerTarget) -> None:
    first, second = open_ledger(ledger_target), open_ledger(ledger_target)  # two schedulers' connections
    entered = threading.Event()
    leaving_at: list[float] = []

    def hold() -> None:
        with first.transaction() as view:
            view.add(_handle("first", _grant("GPU-1", 1)))
            entered.set()
            time.sleep(0.5)
            leaving_at.append(time.monotonic())  # still holding the lock: it goes with the commit below

    holder = threading.Thread(target=hold)
    holder.start()
    assert entered.wait(10)
    with second.transaction() as view:
        got_in_at = time.monotonic()
        seen = view.handle_ids()
        view.add(_handle("second", _grant("GPU-1", 1)))
    holder.join()
    assert seen == ["first"]  # its check ran after the first commit, never beside it
    assert got_in_at >= leaving_at[0]
    assert {h.id for h in first.handles()} == {"first", "second"}
    first.close()
    second.close()


def test_a_reader_neither_waits_for_a_writer_nor_sees_its_uncommitted_rows(ledger_target: LedgerTarget) -> None:
    writer, reader = open_ledger(ledger_target), open_ledger(ledger_target)
    with writer.transaction() as view:
        view.add(_handle("uncommitted"))
        started = time.monotonic()
        with reader.reading() as snapshot:
            assert snapshot.handle_ids() == []
        assert time.monotonic() - started < 5.0
    assert [h.id for h in reader.handles()] == ["uncommitted"]
    writer.close()
    reader.close()


def test_a_writer_gives_up_after_its_timeout_naming_the_ledger(ledger_target: LedgerTarget) -> None:
    holder, waiter = open_ledger(ledger_target), open_ledger(ledger_target, busy_timeout_s=0.3)
    with holder.transaction() as view:
        view.add(_handle("held"))
        started = time.monotonic()
        with pytest.raises(LedgerUnavailable, match="locked") as refused, waiter.transaction():
            pass
        waited = time.monotonic() - started
    assert 0.25 <= waited < 10.0
    assert describe(ledger_target) in str(refused.value)
    with waiter.transaction() as view:  # the lock is free again: the same ledger object carries on
        assert view.handle_ids() == ["held"]
    holder.close()
    waiter.close()


def test_a_writer_killed_inside_its_transaction_leaves_nothing_and_frees_the_lock(ledger_target: LedgerTarget) -> None:
    worker = _worker("hold", str(ledger_target))
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "holding"
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    ledger = open_ledger(ledger_target, busy_timeout_s=20)
    with ledger.transaction() as view:
        assert view.handle_ids() == []
        assert view.last_seq() == 0
        view.add(_handle("next"))
    assert [h.id for h in ledger.handles()] == ["next"]
    ledger.close()


def test_schedulers_in_several_processes_never_book_past_a_device(ledger_target: LedgerTarget) -> None:
    """Three processes (three hosts' schedulers, for PostgreSQL) race ``hd.allocate`` on two devices."""
    request_mib = 1_000
    workers = [_worker("allocate", str(ledger_target), "15", str(request_mib)) for _ in range(3)]
    outputs = [w.communicate(timeout=300)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0], outputs
    said = Counter(line.split()[0] for out in outputs for line in out.splitlines())
    ledger = open_ledger(ledger_target)
    handles = ledger.handles()
    assert said["granted"] == len(handles) and said["granted"] + said["refused"] == 45
    capacity = json.loads(outputs[0].splitlines()[0])["capacity"]
    booked: Counter[str] = Counter()
    for handle in handles:
        for grant in handle.grants:
            booked[grant.uuid] += grant.memory_mib + grant.context_mib
    for uuid, total in capacity.items():
        assert booked[uuid] <= total, (uuid, booked[uuid], total)
    if said["refused"]:  # a refusal is only right once no device has room for one more
        for uuid, total in capacity.items():
            context = max((g.context_mib for h in handles for g in h.grants if g.uuid == uuid), default=0)
            assert total - booked[uuid] < request_mib + context, (uuid, booked[uuid], total)
    ledger.close()
