"""A durable ledger on SQLite (WAL) for node agents.

Allocations survive a restart of the managing process.  ``BEGIN IMMEDIATE``
takes SQLite's write lock before the capacity check reads anything, which
serialises allocators across threads and processes: the check-then-insert
cannot interleave with another writer.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hami_devices.errors import UnknownAllocation
from hami_devices.ledger.base import Ledger, LedgerView
from hami_devices.models import DeviceHandle, Grant

SCHEMA = """
CREATE TABLE IF NOT EXISTS allocations (
    id TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS grants (
    handle_id TEXT NOT NULL REFERENCES allocations(id) ON DELETE CASCADE,
    uuid TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS grants_by_uuid ON grants(uuid);
"""


class _SqliteView(LedgerView):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

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

    def remove(self, handle_id: str) -> DeviceHandle:
        handle = self.get(handle_id)
        self._conn.execute("DELETE FROM grants WHERE handle_id = ?", (handle_id,))
        self._conn.execute("DELETE FROM allocations WHERE id = ?", (handle_id,))
        return handle

    def handles(self) -> list[DeviceHandle]:
        rows = self._conn.execute("SELECT body FROM allocations ORDER BY created_at, id").fetchall()
        return [DeviceHandle.model_validate_json(r[0]) for r in rows]


class SqliteLedger(Ledger):
    """One connection per thread; safe across threads and processes."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._timeout = busy_timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._initialise(self._connection())

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
                conn.executescript(SCHEMA)
                return
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or time.monotonic() >= deadline:
                    raise
                time.sleep(random.uniform(0.005, 0.05))

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            # isolation_level=None: we issue BEGIN IMMEDIATE ourselves.
            conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[LedgerView]:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield _SqliteView(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
