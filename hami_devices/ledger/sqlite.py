"""A durable ledger on SQLite (WAL) for node agents.

Allocations survive a restart of the managing process.  ``BEGIN IMMEDIATE``
takes SQLite's write lock before the capacity check reads anything, which
serialises allocators across threads and processes: the check-then-insert
cannot interleave with another writer.  Writers first take their turn on a
lock file beside the ledger (``ledger.turns``), which wakes a waiter within a
millisecond where SQLite's busy handler would sleep up to 100 ms.

The file carries its schema version in ``PRAGMA user_version``
(``SCHEMA_VERSION``); opening an older file migrates it in one transaction, and
a file from a newer release is refused with ``LedgerSchemaError`` rather than
misread.  Version 1 is the original allocations and grants; version 2 adds the
event log, the observers' last-seen state and the usage samples; version 3 the
allocations' change log (``ledger.changes``).
"""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hami_devices.errors import LedgerSchemaError, LedgerUnavailable, UnknownAllocation
from hami_devices.ledger.base import Ledger, LedgerView
from hami_devices.ledger.changes import Change, follows_on, trim_below
from hami_devices.ledger.event_query import events_query
from hami_devices.ledger.events import USAGE_BUCKET_SECONDS, Event, EventKind, UsageSample
from hami_devices.ledger.paths import default_busy_timeout
from hami_devices.ledger.sqlite_schema import MIGRATIONS as MIGRATIONS  # imported from here before
from hami_devices.ledger.sqlite_schema import SCHEMA_VERSION as SCHEMA_VERSION
from hami_devices.ledger.sqlite_schema import schema_version as schema_version
from hami_devices.ledger.turns import WriterTurns
from hami_devices.models import DeviceHandle, Grant


def _event_from_row(row: Sequence[Any]) -> Event:
    seq, at, kind, allocation_id, uuid, node, data = row
    return Event.model_construct(
        seq=seq, time=at, kind=kind, allocation_id=allocation_id, uuid=uuid, node=node, data=json.loads(data)
    )


class _SqliteView(LedgerView):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._newest: int | None = None  # the generation this transaction's last change took

    def grants_on(self, uuid: str) -> list[Grant]:
        rows = self._conn.execute("SELECT body FROM grants WHERE uuid = ?", (uuid,)).fetchall()
        return [Grant.model_validate_json(r[0]) for r in rows]

    def get(self, handle_id: str) -> DeviceHandle:
        row = self._conn.execute("SELECT body FROM allocations WHERE id = ?", (handle_id,)).fetchone()
        if row is None:
            raise UnknownAllocation(handle_id)
        return DeviceHandle.model_validate_json(row[0])

    def add(self, handle: DeviceHandle) -> None:
        self._conn.execute(
            "INSERT INTO allocations (id, body, created_at) VALUES (?, ?, ?)",
            (handle.id, handle.model_dump_json(), handle.created_at),
        )
        self._conn.executemany(
            "INSERT INTO grants (handle_id, uuid, body) VALUES (?, ?, ?)",
            [(handle.id, g.uuid, g.model_dump_json()) for g in handle.grants],
        )
        self._changed(handle.id, added=True)

    def remove(self, handle_id: str) -> DeviceHandle:
        handle = self.get(handle_id)
        self._conn.execute("DELETE FROM grants WHERE handle_id = ?", (handle_id,))
        self._conn.execute("DELETE FROM allocations WHERE id = ?", (handle_id,))
        self._changed(handle_id, added=False)
        return handle

    def _changed(self, handle_id: str, *, added: bool) -> None:
        cursor = self._conn.execute(
            "INSERT INTO allocation_changes (handle_id, added) VALUES (?, ?)", (handle_id, int(added))
        )
        generation = self._newest = int(cursor.lastrowid or 0)
        below = trim_below(generation - 1, generation)
        if below is not None:
            self._conn.execute("DELETE FROM allocation_changes WHERE generation <= ?", (below,))

    def generation(self) -> int:
        if self._newest is not None:  # a writer holds the lock: its own last change is the newest
            return self._newest
        return int(self._conn.execute("SELECT COALESCE(MAX(generation), 0) FROM allocation_changes").fetchone()[0])

    def changes_since(self, generation: int) -> list[Change] | None:
        # two subqueries: SQLite answers a lone MIN or MAX from the index, both in one SELECT by a scan
        oldest, newest = self._conn.execute(
            "SELECT (SELECT MIN(generation) FROM allocation_changes), "
            "(SELECT COALESCE(MAX(generation), 0) FROM allocation_changes)"
        ).fetchone()
        if not follows_on(generation, oldest, newest):
            return None
        rows = self._conn.execute(
            "SELECT generation, handle_id, added FROM allocation_changes WHERE generation > ? ORDER BY generation",
            (generation,),
        )
        return [Change(g, i, bool(a)) for g, i, a in rows]

    def handles(self) -> list[DeviceHandle]:
        rows = self._conn.execute("SELECT body FROM allocations ORDER BY created_at, id").fetchall()
        return [DeviceHandle.model_validate_json(r[0]) for r in rows]

    def handle_ids(self) -> list[str]:
        return [r[0] for r in self._conn.execute("SELECT id FROM allocations ORDER BY created_at, id")]

    def handle_ids_starting(self, prefix: str) -> list[str]:
        # a range on the primary key (its index), as ``observations`` reads its keys
        rows = self._conn.execute(
            "SELECT id FROM allocations WHERE id >= ? AND id < ? ORDER BY created_at, id",
            (prefix, prefix + "\U0010ffff"),
        )
        return [r[0] for r in rows]

    def record_event(self, event: Event) -> Event:
        cursor = self._conn.execute(
            "INSERT INTO events (time, kind, allocation_id, uuid, node, data) VALUES (?, ?, ?, ?, ?, ?)",
            (event.time, event.kind, event.allocation_id, event.uuid, event.node, json.dumps(event.data)),
        )
        return event.model_copy(update={"seq": cursor.lastrowid})

    def events(
        self,
        *,
        after_seq: int = 0,
        since: float | None = None,
        until: float | None = None,
        allocation_id: str | None = None,
        kinds: Collection[str] | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        sql, args = events_query(
            "?",
            after_seq=after_seq,
            since=since,
            until=until,
            allocation_id=allocation_id,
            kinds=kinds,
            limit=limit,
        )
        return [_event_from_row(r) for r in self._conn.execute(sql, args)]

    def last_seq(self) -> int:
        return int(self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0])

    def prune(self, before: float) -> int:
        lifecycle = (EventKind.GRANTED, EventKind.RELEASED, EventKind.EVICTED)
        cursor = self._conn.execute(
            "DELETE FROM events WHERE time < ? AND (kind NOT IN (?, ?, ?) OR allocation_id IN "
            "(SELECT allocation_id FROM events WHERE kind IN (?, ?) AND time < ?))",
            (before, *lifecycle, EventKind.RELEASED, EventKind.EVICTED, before),
        )
        self._conn.execute("DELETE FROM usage WHERE bucket + ? <= ?", (USAGE_BUCKET_SECONDS, before))
        return int(cursor.rowcount)

    def observations(self, prefix: str) -> dict[str, tuple[float, Any]]:
        # A range scan on the primary key; LIKE would need escaping of the key's own % and _.
        rows = self._conn.execute(
            "SELECT key, observed_at, value FROM observations WHERE key >= ? AND key < ?",
            (prefix, prefix + "\U0010ffff"),
        )
        return {key: (at, json.loads(value)) for key, at, value in rows}

    def set_observation(self, key: str, observed_at: float, value: Any | None) -> None:
        if value is None:
            self._conn.execute("DELETE FROM observations WHERE key = ?", (key,))
            return
        self._conn.execute(
            "INSERT INTO observations (key, observed_at, value) VALUES (?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET observed_at = excluded.observed_at, value = excluded.value",
            (key, observed_at, json.dumps(value)),
        )

    def add_usage(self, samples: Sequence[UsageSample]) -> None:
        self._conn.executemany(
            "INSERT INTO usage (bucket, allocation_id, uuid, seconds, memory_mib_seconds, utilization_seconds, "
            "utilization_ratio_seconds) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(bucket, allocation_id, uuid) "
            "DO UPDATE SET seconds = seconds + excluded.seconds, "
            "memory_mib_seconds = memory_mib_seconds + excluded.memory_mib_seconds, "
            "utilization_seconds = utilization_seconds + excluded.utilization_seconds, "
            "utilization_ratio_seconds = utilization_ratio_seconds + excluded.utilization_ratio_seconds",
            [
                (
                    s.bucket, s.allocation_id, s.uuid, s.seconds, s.memory_mib_seconds,
                    s.utilization_seconds, s.utilization_ratio_seconds,
                )
                for s in samples
            ],
        )

    def usage(self, since: float, until: float) -> list[UsageSample]:
        rows = self._conn.execute(
            "SELECT bucket, allocation_id, uuid, seconds, memory_mib_seconds, utilization_seconds, "
            "utilization_ratio_seconds FROM usage WHERE bucket < ? AND bucket > ? "
            "ORDER BY bucket, allocation_id, uuid",
            (until, since - USAGE_BUCKET_SECONDS),
        )
        return [UsageSample(*row) for row in rows]


class SqliteLedger(Ledger):
    """One connection per thread; safe across threads and processes.

    A file that is not a ledger, is damaged, cannot be opened, or stays locked by another process for
    longer than ``busy_timeout_s`` (default ``$HAMI_LEDGER_TIMEOUT``, else 30 s) raises ``LedgerUnavailable``
    naming the file, whichever call meets it.
    """

    def __init__(self, path: str | Path, *, busy_timeout_s: float | None = None) -> None:
        self.path = Path(path)
        self._timeout = default_busy_timeout() if busy_timeout_s is None else busy_timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._turns = WriterTurns(self.path, self._timeout)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerUnavailable(f"ledger {self.path}: cannot create its folder: {exc.strerror}") from None
        with self._errors():
            self._initialise(self._connection())

    def _unusable(self, exc: sqlite3.Error) -> LedgerUnavailable:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return LedgerUnavailable(
                f"ledger {self.path} is locked by another process (waited {self._timeout:g} s; "
                "HAMI_LEDGER_TIMEOUT sets the wait)"
            )
        if "unable to open" in text or "readonly" in text or "disk I/O" in text:
            return LedgerUnavailable(f"ledger {self.path} cannot be used ({text}): check the file and its folder")
        return LedgerUnavailable(
            f"ledger {self.path} is not a readable ledger ({text}); `hami-devices doctor --ledger {self.path}` "
            "says what to do"
        )

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise self._unusable(exc) from None

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        # a damaged file may refuse even that; the caller's error is the one to report
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")

    def _initialise(self, conn: sqlite3.Connection) -> None:
        """Switch to WAL and create the tables, waiting out other processes doing the same.

        Changing the journal mode does not go through SQLite's busy handler, so two
        node agents opening a new ledger at once can get "database is locked" here
        even with a timeout; retry until the busy timeout instead.
        """
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                self._migrate(conn)
                return
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or time.monotonic() >= deadline:
                    raise
                time.sleep(random.uniform(0.005, 0.05))

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Bring the file to ``SCHEMA_VERSION`` in one transaction (two openers cannot both migrate)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = schema_version(conn)
            if version > SCHEMA_VERSION:
                raise LedgerSchemaError(
                    f"ledger {self.path} has schema version {version}; this release reads up to {SCHEMA_VERSION}"
                )
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[step].split(";"):
                    if statement.strip():
                        conn.execute(statement)
            if version != SCHEMA_VERSION or int(conn.execute("PRAGMA user_version").fetchone()[0]) == 0:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        with self._errors():
            return schema_version(self._connection())

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            # isolation_level=None: we issue BEGIN IMMEDIATE ourselves.
            # Each thread uses only its own connection; check_same_thread=False lets close() (on
            # whichever thread shuts the ledger down) close them all, e.g. an exporter's collector threads'.
            with self._errors():
                conn = sqlite3.connect(
                    self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
                )
                conn.execute("PRAGMA foreign_keys=ON")
                conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[LedgerView]:
        conn = self._connection()
        with self._turns.turn():
            with self._errors():
                conn.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteView(conn)
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise self._unusable(exc) from None
            except BaseException:
                self._rollback(conn)
                raise
            with self._errors():
                conn.execute("COMMIT")

    @contextmanager
    def reading(self) -> Iterator[LedgerView]:
        """A read transaction: one consistent snapshot (WAL), without taking the write lock."""
        conn = self._connection()
        with self._errors():
            conn.execute("BEGIN DEFERRED")
        try:
            yield _SqliteView(conn)
        except sqlite3.Error as exc:
            raise self._unusable(exc) from None
        finally:
            if conn.in_transaction:
                with self._errors():
                    conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
        self._turns.close()
