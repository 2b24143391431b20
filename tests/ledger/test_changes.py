"""The allocations' change log (``hami_devices.ledger.changes``), on the in-memory, SQLite and PostgreSQL ledgers.

Written from the definition: each allocation added or removed takes the next generation in its own
transaction, so the log after generation ``g`` is exactly the list of (id, added) the test itself made
since it read ``g``; a rolled-back transaction leaves none; a generation the log no longer holds, or never
reached, is answered None (the follower lists every id instead).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_devices.errors import UnknownAllocation
from hami_devices.ledger import Ledger, MemoryLedger, SqliteLedger, changes
from hami_devices.ledger.opening import LedgerTarget, open_ledger
from hami_devices.models import DeviceHandle, Grant


def _handle(handle_id: str, at: float = 1000.0) -> DeviceHandle:
    grant = Grant(uuid="GPU-1", node="n", vendor="nvidia", model="T4", index=0, part=0, memory_mib=1, cores=0)
    return DeviceHandle(id=handle_id, request={"parts": [{"memory_mib": 1}]}, grants=[grant], created_at=at)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def each_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    """The in-memory ledger, then each durable one."""
    if request.param == "memory":
        yield MemoryLedger()
        return
    target = tmp_path / "l.db" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    ledger = open_ledger(target)
    yield ledger
    ledger.close()


def _changes(ledger: Ledger, since: int) -> list[tuple[str, bool]] | None:
    with ledger.reading() as view:
        found = view.changes_since(since)
    return None if found is None else [(c.handle_id, c.added) for c in found]


def test_every_add_and_remove_is_one_generation_in_commit_order(each_ledger: Ledger) -> None:
    with each_ledger.reading() as view:
        start = view.generation()
        assert start == 0 and view.changes_since(0) == []
    made: list[tuple[str, bool]] = []
    with each_ledger.transaction() as view:
        for name in ("a", "b", "c"):
            view.add(_handle(name))
            made.append((name, True))
        assert view.generation() == 3  # its own writes count inside the transaction
    with each_ledger.transaction() as view:
        view.remove("b")
        view.add(_handle("b", at=2000.0))  # the same id again, as a retrying writer may
        view.remove("a")
        made += [("b", False), ("b", True), ("a", False)]
    with each_ledger.reading() as view:
        assert view.generation() == len(made) == 6
        found = view.changes_since(0)
        assert found is not None and [c.generation for c in found] == [1, 2, 3, 4, 5, 6]
    for since in range(len(made) + 1):
        assert _changes(each_ledger, since) == made[since:]


def test_a_rolled_back_transaction_and_a_failed_remove_change_nothing(each_ledger: Ledger) -> None:
    with each_ledger.transaction() as view:
        view.add(_handle("kept"))
    with pytest.raises(UnknownAllocation), each_ledger.transaction() as view:
        view.add(_handle("torn"))
        view.remove("kept")
        view.remove("never-there")
    with pytest.raises(UnknownAllocation), each_ledger.transaction() as view:
        view.remove("never-there")
    assert _changes(each_ledger, 0) == [("kept", True)]
    with each_ledger.transaction() as view:
        view.add(_handle("next"))
    assert _changes(each_ledger, 1) == [("next", True)]


def test_a_generation_the_ledger_never_reached_is_answered_none(each_ledger: Ledger) -> None:
    with each_ledger.transaction() as view:
        view.add(_handle("a"))
    assert _changes(each_ledger, 2) is None
    assert _changes(each_ledger, -1) is None
    assert _changes(each_ledger, 1) == []


def test_another_writer_s_changes_are_read_by_generation(ledger_target: LedgerTarget) -> None:
    reader, writer = open_ledger(ledger_target), open_ledger(ledger_target)
    with writer.transaction() as view:
        view.add(_handle("first"))
    with reader.reading() as view:
        seen = view.generation()
    with writer.transaction() as view:
        view.add(_handle("second"))
        view.remove("first")
    with reader.transaction() as view:  # a commit reads what changed, and the bodies of what was added
        found = view.changes_since(seen)
        assert found is not None and [(c.handle_id, c.added) for c in found] == [("second", True), ("first", False)]
        assert view.get("second") == _handle("second")
        with pytest.raises(UnknownAllocation):
            view.get("first")
    reader.close()
    writer.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_the_log_keeps_its_newest_changes_and_says_when_older_ones_are_gone(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the log's length is a setting: a short one here, so that it is trimmed a few times within the test
    monkeypatch.setattr(changes, "CHANGES_KEPT", 40)
    monkeypatch.setattr(changes, "PRUNE_EVERY", 16)
    CHANGES_KEPT, PRUNE_EVERY = changes.CHANGES_KEPT, changes.PRUNE_EVERY
    target = tmp_path / "l.db" if kind == "sqlite" else request.getfixturevalue("postgres_url")
    ledger: Ledger = MemoryLedger() if kind == "memory" else open_ledger(target)
    # trimmed to the newest CHANGES_KEPT each time a generation reaches a multiple of PRUNE_EVERY
    total = (CHANGES_KEPT // PRUNE_EVERY + 2) * PRUNE_EVERY + 2
    first_kept = (total - total % PRUNE_EVERY) - CHANGES_KEPT + 1
    made: list[tuple[str, bool]] = []
    with ledger.transaction() as view:
        for n in range(total // 2):
            view.add(_handle(f"h{n}"))
            view.remove(f"h{n}")
            made += [(f"h{n}", True), (f"h{n}", False)]
    with ledger.reading() as view:
        assert view.generation() == total
        assert view.changes_since(first_kept - 2) is None  # trimmed: list every id instead
        kept = view.changes_since(first_kept - 1)
        assert kept is not None and [(c.handle_id, c.added) for c in kept] == made[first_kept - 1:]
        assert kept[0].generation == first_kept and len(kept) == total - first_kept + 1
        assert view.changes_since(total) == []
    ledger.close()


def test_handle_ids_starting_is_handle_ids_filtered(each_ledger: Ledger) -> None:
    names = ["revoked-b", "a", "revoked-a", "revoked", "revokee", "zz", "revoked-\u00e9"]
    with each_ledger.transaction() as view:
        for at, name in enumerate(names):
            view.add(_handle(name, at=float(len(names) - at)))
    with each_ledger.reading() as view:
        every = view.handle_ids()
        assert view.handle_ids_starting("revoked-") == [i for i in every if i.startswith("revoked-")]
        assert view.handle_ids_starting("") == every


def test_a_version_2_file_migrates_and_its_allocations_are_listed_once(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    SqliteLedger(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE allocation_changes")
    conn.execute("PRAGMA user_version = 2")
    handle = _handle("from-before")
    conn.execute("INSERT INTO allocations VALUES (?, ?, ?)", (handle.id, handle.model_dump_json(), handle.created_at))
    conn.commit()
    conn.close()
    ledger = SqliteLedger(path)
    assert ledger.schema_version == 3
    with ledger.reading() as view:  # a follower lists the ids at generation 0, then reads changes
        assert view.generation() == 0 and view.handle_ids() == ["from-before"]
    with ledger.transaction() as view:
        view.remove("from-before")
    assert _changes(ledger, 0) == [("from-before", False)]
    ledger.close()
