"""A ledger on PostgreSQL, so that schedulers on several hosts share one truth.

``--ledger postgresql://user:password@host/db`` (or ``$HAMI_LEDGER``) stores the
same tables as the SQLite ledger (``sqlite.py``) through psycopg 3, the
``[postgresql]`` extra.

**Writers take one lock, as on SQLite.**  Each write transaction starts with
``pg_advisory_xact_lock`` on one key, at READ COMMITTED, before it reads
anything; the lock is held until its COMMIT or ROLLBACK.  It was chosen over
serialisable transactions with retry because:

* A caller runs its own code inside ``transaction()`` (the allocation reads the
  devices' and nodes' rows, checks every rule, writes the handle and its event).
  A serialisation failure can only be detected at a later statement or at
  COMMIT, after that code has run, and a context manager cannot run its body
  again: every caller would have to carry a retry loop, and any side effect it
  made before the failure would have to be undone.  With the lock, the check
  and the insert can never interleave with another writer on any host, the
  same guarantee as SQLite's ``BEGIN IMMEDIATE``, and no commit is ever refused.
* Event ``seq`` values are drawn inside the lock, so they commit in the order
  they are drawn: a follower that remembers the last ``seq`` it printed never
  skips one that commits late (with concurrent writers an identity column's
  values can commit out of order).
* At READ COMMITTED each statement sees everything committed before it starts,
  so the first read after the lock is granted sees the previous writer's
  commit (PostgreSQL makes a commit visible before it releases its locks).  A
  REPEATABLE READ snapshot would be taken before the lock wait and miss it.

Readers (``reading()``) take no lock: one REPEATABLE READ, READ ONLY snapshot.

A writer waits for the lock at most ``busy_timeout_s`` (``$HAMI_LEDGER_TIMEOUT``,
else 30 s; PostgreSQL's ``lock_timeout``).  Every error from the server or the
driver (down, refused, wrong password, unknown database, bad URL, lock wait too
long) is raised as ``LedgerUnavailable`` naming the URL without its password.
The schema version lives in the one-row table ``ledger_schema`` (SQLite keeps it
in ``PRAGMA user_version``); opening migrates under the same lock, and a
database from a newer release is refused with ``LedgerSchemaError``.

Text columns that are compared as ranges or sorted are ``COLLATE "C"``, so rows
come back in the code-point order SQLite and the in-memory ledger use whatever
the database's collation; times are DOUBLE PRECISION, so a float round-trips.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from hami_devices.errors import InvalidRequest, LedgerSchemaError, LedgerUnavailable, UnknownAllocation
from hami_devices.ledger.base import Ledger, LedgerView
from hami_devices.ledger.events import USAGE_BUCKET_SECONDS, Event, EventKind, UsageSample
from hami_devices.ledger.paths import default_busy_timeout
from hami_devices.ledger.row_versions import RowVersions
from hami_devices.ledger.sqlite import SCHEMA_VERSION
from hami_devices.ledger.urls import redacted, scrubbed
from hami_devices.models import DeviceHandle, Grant

Connection = psycopg.Connection[tuple[Any, ...]]

WRITER_LOCK_KEY = 0x68616D696C656467  # "hamiledg": one advisory lock per database serialises the writers

_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS allocations (
    id TEXT COLLATE "C" PRIMARY KEY,
    body TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS grants (
    handle_id TEXT COLLATE "C" NOT NULL REFERENCES allocations(id) ON DELETE CASCADE,
    uuid TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS grants_by_uuid ON grants(uuid);
CREATE INDEX IF NOT EXISTS grants_by_handle ON grants(handle_id)
"""

# an identity column's sequence never hands a value out twice, even after old events are pruned
# (SQLite's AUTOINCREMENT): a follower remembering the last seq it printed never skips or repeats one
_SCHEMA_V2 = """
CREATE TABLE IF NOT EXISTS events (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    time DOUBLE PRECISION NOT NULL,
    kind TEXT NOT NULL,
    allocation_id TEXT COLLATE "C",
    uuid TEXT,
    node TEXT,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_allocation ON events(allocation_id, seq);
CREATE INDEX IF NOT EXISTS events_by_time ON events(time);
CREATE TABLE IF NOT EXISTS observations (
    key TEXT COLLATE "C" PRIMARY KEY,
    observed_at DOUBLE PRECISION NOT NULL,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS usage (
    bucket DOUBLE PRECISION NOT NULL,
    allocation_id TEXT COLLATE "C" NOT NULL,
    uuid TEXT COLLATE "C" NOT NULL,
    seconds DOUBLE PRECISION NOT NULL,
    memory_mib_seconds DOUBLE PRECISION NOT NULL,
    utilization_seconds DOUBLE PRECISION NOT NULL,
    utilization_ratio_seconds DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (bucket, allocation_id, uuid)
)
"""

MIGRATIONS = {1: _SCHEMA_V1, 2: _SCHEMA_V2}
"""Version -> the DDL that brings a database from the version before it (idempotent).  The versions are the
SQLite ledger's (``SCHEMA_VERSION``): the same tables at the same version in either database."""

_WRITTEN_HERE = ""  # the xmin a row written by the open transaction is known by until it is listed again

_BEGIN_WRITE = f"BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock({WRITER_LOCK_KEY})"
_BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def _event_from_row(row: Sequence[Any]) -> Event:
    seq, at, kind, allocation_id, uuid, node, data = row
    return Event.model_construct(
        seq=seq, time=at, kind=kind, allocation_id=allocation_id, uuid=uuid, node=node, data=json.loads(data)
    )


class _PostgresView(LedgerView):
    def __init__(self, conn: Connection, versions: RowVersions) -> None:
        self._conn = conn
        self._versions = versions
        self._listed: dict[str, str] | None = None  # id -> xmin of the live allocations, once handle_ids ran

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, args).fetchall())

    def grants_on(self, uuid: str) -> list[Grant]:
        return [Grant.model_validate_json(r[0]) for r in self._rows("SELECT body FROM grants WHERE uuid = %s", (uuid,))]

    def get(self, handle_id: str) -> DeviceHandle:
        listed = self._listed
        if listed is not None:  # the ids were listed in this transaction: what is not there is gone
            if handle_id not in listed:
                raise UnknownAllocation(handle_id)
            if self._versions.body(handle_id, listed[handle_id]) is None:
                self._fetch(self._versions.unknown(listed))
            body = self._versions.body(handle_id, listed[handle_id])
            if body is not None:
                return DeviceHandle.model_validate_json(body)
        rows = self._rows("SELECT id, xmin::text, body FROM allocations WHERE id = %s", (handle_id,))
        if not rows:
            raise UnknownAllocation(handle_id)
        self._versions.put(*rows[0])
        return DeviceHandle.model_validate_json(rows[0][2])

    def _fetch(self, ids: list[str]) -> None:
        """Every body of ``ids`` in one round trip."""
        for row in self._rows("SELECT id, xmin::text, body FROM allocations WHERE id = ANY(%s::text[])", (ids,)):
            self._versions.put(*row)

    def add(self, handle: DeviceHandle) -> None:
        body = handle.model_dump_json()
        # one statement for the allocation and all its grants: one round trip however many devices
        self._conn.execute(
            "WITH a AS (INSERT INTO allocations (id, body, created_at) VALUES (%s, %s, %s)) "
            "INSERT INTO grants (handle_id, uuid, body) SELECT %s, u, b FROM unnest(%s::text[], %s::text[]) AS g(u, b)",
            (handle.id, body, handle.created_at, handle.id, [g.uuid for g in handle.grants],
             [g.model_dump_json() for g in handle.grants]),
        )
        if self._listed is not None:  # its xmin is this transaction's: known once committed and listed again
            self._listed[handle.id] = _WRITTEN_HERE
            self._versions.put(handle.id, _WRITTEN_HERE, body)

    def remove(self, handle_id: str) -> DeviceHandle:
        rows = self._rows("DELETE FROM allocations WHERE id = %s RETURNING body", (handle_id,))  # grants cascade
        self._versions.drop(handle_id)
        if self._listed is not None:
            self._listed.pop(handle_id, None)
        if not rows:
            raise UnknownAllocation(handle_id)
        return DeviceHandle.model_validate_json(rows[0][0])

    def handles(self) -> list[DeviceHandle]:
        rows = self._rows("SELECT id, xmin::text, body FROM allocations ORDER BY created_at, id")
        self._remember(rows)
        return [DeviceHandle.model_validate_json(r[2]) for r in rows]

    def handle_ids(self) -> list[str]:
        rows = self._rows("SELECT id, xmin::text FROM allocations ORDER BY created_at, id")
        self._listed = dict(rows)
        self._versions.keep_only(self._listed)
        return [r[0] for r in rows]

    def _remember(self, rows: list[tuple[Any, ...]]) -> None:
        self._listed = {handle_id: xmin for handle_id, xmin, _ in rows}
        self._versions.keep_only(self._listed)
        for row in rows:
            self._versions.put(*row)

    def record_event(self, event: Event) -> Event:
        (seq,) = self._rows(
            "INSERT INTO events (time, kind, allocation_id, uuid, node, data) VALUES (%s, %s, %s, %s, %s, %s) "
            "RETURNING seq",
            (event.time, event.kind, event.allocation_id, event.uuid, event.node, json.dumps(event.data)),
        )[0]
        return event.model_copy(update={"seq": seq})

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
        where: list[str] = ["seq > %s"]
        args: list[Any] = [after_seq]
        if since is not None:
            where.append("time >= %s")
            args.append(since)
        if until is not None:
            where.append("time < %s")
            args.append(until)
        if allocation_id is not None:
            where.append("allocation_id = %s")
            args.append(allocation_id)
        if kinds is not None:
            where.append("kind = ANY(%s::text[])")
            args.append([str(k) for k in kinds])
        sql = f"SELECT seq, time, kind, allocation_id, uuid, node, data FROM events WHERE {' AND '.join(where)}"
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT %s"
            args.append(limit)
        return [_event_from_row(r) for r in self._rows(sql, args)]

    def last_seq(self) -> int:
        return int(self._rows("SELECT COALESCE(MAX(seq), 0) FROM events")[0][0])

    def prune(self, before: float) -> int:
        lifecycle = [str(k) for k in (EventKind.GRANTED, EventKind.RELEASED, EventKind.EVICTED)]
        ended = [str(k) for k in (EventKind.RELEASED, EventKind.EVICTED)]
        cursor = self._conn.execute(
            "DELETE FROM events WHERE time < %s AND (kind <> ALL(%s::text[]) OR allocation_id IN "
            "(SELECT allocation_id FROM events WHERE kind = ANY(%s::text[]) AND time < %s))",
            (before, lifecycle, ended, before),
        )
        removed = int(cursor.rowcount)
        self._conn.execute("DELETE FROM usage WHERE bucket + %s <= %s", (USAGE_BUCKET_SECONDS, before))
        return removed

    def observations(self, prefix: str) -> dict[str, tuple[float, Any]]:
        # a range scan on the primary key (COLLATE "C": code-point order); LIKE would need escaping
        rows = self._rows(
            "SELECT key, observed_at, value FROM observations WHERE key >= %s AND key < %s",
            (prefix, prefix + "\U0010ffff"),
        )
        return {key: (at, json.loads(value)) for key, at, value in rows}

    def set_observation(self, key: str, observed_at: float, value: Any | None) -> None:
        if value is None:
            self._conn.execute("DELETE FROM observations WHERE key = %s", (key,))
            return
        self._conn.execute(
            "INSERT INTO observations (key, observed_at, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET observed_at = excluded.observed_at, value = excluded.value",
            (key, observed_at, json.dumps(value)),
        )

    def add_usage(self, samples: Sequence[UsageSample]) -> None:
        if not samples:
            return
        with self._conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO usage AS u (bucket, allocation_id, uuid, seconds, memory_mib_seconds, "
                "utilization_seconds, utilization_ratio_seconds) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (bucket, allocation_id, uuid) DO UPDATE SET seconds = u.seconds + excluded.seconds, "
                "memory_mib_seconds = u.memory_mib_seconds + excluded.memory_mib_seconds, "
                "utilization_seconds = u.utilization_seconds + excluded.utilization_seconds, "
                "utilization_ratio_seconds = u.utilization_ratio_seconds + excluded.utilization_ratio_seconds",
                [
                    (
                        s.bucket, s.allocation_id, s.uuid, s.seconds, s.memory_mib_seconds,
                        s.utilization_seconds, s.utilization_ratio_seconds,
                    )
                    for s in samples
                ],
            )

    def usage(self, since: float, until: float) -> list[UsageSample]:
        rows = self._rows(
            "SELECT bucket, allocation_id, uuid, seconds, memory_mib_seconds, utilization_seconds, "
            "utilization_ratio_seconds FROM usage WHERE bucket < %s AND bucket > %s "
            "ORDER BY bucket, allocation_id, uuid",
            (until, since - USAGE_BUCKET_SECONDS),
        )
        return [UsageSample(*row) for row in rows]


class PostgresLedger(Ledger):
    """One connection per thread (and per process: a forked child opens its own); safe across hosts.

    ``url`` is a libpq URL (``postgresql://user:password@host:port/database?sslmode=...``).  The
    tables are created on first use; the database and the user must exist.
    """

    def __init__(self, url: str, *, busy_timeout_s: float | None = None) -> None:
        self.url = url
        self.display_url = redacted(url)
        self._timeout = default_busy_timeout() if busy_timeout_s is None else busy_timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[tuple[int, Connection]] = []
        self._migrate()

    # ---- errors ----

    def _unusable(self, exc: BaseException) -> LedgerUnavailable | InvalidRequest:
        text = scrubbed(str(exc), self.url) or type(exc).__name__
        where = f"ledger {self.display_url}"
        if isinstance(exc, psycopg.DataError):
            # a value PostgreSQL cannot store (a NUL character in text, an integer past 64 bits): the
            # caller's input, not the database, is at fault
            return InvalidRequest("ledger", f"{where} cannot store a value: {text}")
        if isinstance(exc, pg_errors.LockNotAvailable):
            return LedgerUnavailable(
                f"{where} is locked by another writer (waited {self._timeout:g} s; HAMI_LEDGER_TIMEOUT sets the wait)"
            )
        if isinstance(exc, pg_errors.InsufficientPrivilege):
            return LedgerUnavailable(f"{where}: the user lacks a privilege the ledger needs ({text})")
        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            return LedgerUnavailable(
                f"{where} cannot be reached ({text}): check that the server runs, the address, the database "
                "and the credentials"
            )
        return LedgerUnavailable(
            f"{where} is not a readable ledger ({text}); `hami-devices doctor --ledger URL` says what to do"
        )

    @contextmanager
    def _errors(self, conn: Connection | None = None) -> Iterator[None]:
        try:
            yield
        except psycopg.Error as exc:
            if conn is not None:
                self._rollback(conn)
            raise self._unusable(exc) from None

    @staticmethod
    def _rollback(conn: Connection) -> None:
        # a lost connection cannot roll back; the server already did
        with contextlib.suppress(psycopg.Error):
            if not conn.closed:
                conn.execute("ROLLBACK")

    # ---- connections ----

    def _connect(self) -> Connection:
        # libpq reads connect_timeout as whole seconds, 0 as "forever" and 1 as 2
        connect_timeout = max(2, math.ceil(self._timeout))
        try:
            conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=connect_timeout, application_name="hami-devices"
            )
        except (psycopg.Error, ValueError) as exc:  # ValueError: psycopg's own parse of a malformed URL
            raise self._unusable(exc if isinstance(exc, psycopg.Error) else psycopg.InterfaceError(str(exc))) from None
        # 0 is "wait forever" to PostgreSQL but "do not wait" to HAMI_LEDGER_TIMEOUT
        wait_ms = max(1, round(self._timeout * 1000))
        with self._errors():
            conn.execute(f"SET lock_timeout = {wait_ms}")
        return conn

    def _connection(self) -> Connection:
        pid = os.getpid()
        held: tuple[int, Connection] | None = getattr(self._local, "conn", None)
        if held is not None and held[0] == pid and not held[1].closed:
            return held[1]
        conn = self._connect()
        self._local.conn = (pid, conn)
        with self._lock:
            self._connections.append((pid, conn))
        return conn

    def _row_versions(self) -> RowVersions:
        versions: RowVersions | None = getattr(self._local, "versions", None)
        if versions is None:
            versions = self._local.versions = RowVersions()
        return versions

    def _begin(self, statement: str) -> Connection:
        """Start a transaction on this thread's connection, reconnecting once if the server dropped it."""
        conn = self._connection()
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            # PostgreSQL would only warn, and the inner COMMIT would end the outer transaction early
            raise LedgerUnavailable(
                f"ledger {self.display_url}: a transaction is already open on this thread (transactions do not nest)"
            )
        try:
            conn.execute(statement)
        except psycopg.Error as exc:
            self._rollback(conn)
            if not conn.closed:
                raise self._unusable(exc) from None
            conn = self._connection()  # nothing was done on the lost connection: a fresh one may start over
            with self._errors(conn):
                conn.execute(statement)
        return conn

    # ---- schema ----

    def _migrate(self) -> None:
        """Bring the database to ``SCHEMA_VERSION`` under the writers' lock (two openers cannot both migrate)."""
        conn = self._begin(_BEGIN_WRITE)
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS ledger_schema (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM ledger_schema").fetchone()
            version = 0 if row is None else int(row[0])
            if version > SCHEMA_VERSION:
                raise LedgerSchemaError(
                    f"ledger {self.display_url} has schema version {version}; this release reads up to "
                    f"{SCHEMA_VERSION}"
                )
            for step in range(version + 1, SCHEMA_VERSION + 1):
                conn.execute(MIGRATIONS[step])
            if row is None:
                conn.execute("INSERT INTO ledger_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
            elif version != SCHEMA_VERSION:
                conn.execute("UPDATE ledger_schema SET version = %s", (SCHEMA_VERSION,))
        except psycopg.Error as exc:
            self._rollback(conn)
            raise self._unusable(exc) from None
        except BaseException:
            self._rollback(conn)
            raise
        with self._errors(conn):
            conn.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        with self.reading() as view:
            assert isinstance(view, _PostgresView)
            return int(view._rows("SELECT version FROM ledger_schema")[0][0])

    # ---- transactions ----

    @contextmanager
    def transaction(self) -> Iterator[LedgerView]:
        conn = self._begin(_BEGIN_WRITE)
        try:
            yield _PostgresView(conn, self._row_versions())
        except psycopg.Error as exc:
            self._rollback(conn)
            raise self._unusable(exc) from None
        except BaseException:
            self._rollback(conn)
            raise
        with self._errors(conn):
            conn.execute("COMMIT")

    @contextmanager
    def reading(self) -> Iterator[LedgerView]:
        """A read transaction: one consistent snapshot, without the writers' lock."""
        conn = self._begin(_BEGIN_READ)
        try:
            yield _PostgresView(conn, self._row_versions())
        except psycopg.Error as exc:
            self._rollback(conn)
            raise self._unusable(exc) from None
        except BaseException:
            self._rollback(conn)
            raise
        with self._errors(conn):
            conn.execute("COMMIT")

    def close(self) -> None:
        pid = os.getpid()
        with self._lock:
            # a forked child must not close its parent's sockets: the parent still talks on them
            for owner, conn in self._connections:
                if owner == pid:
                    with contextlib.suppress(psycopg.Error):
                        conn.close()
            self._connections.clear()
        self._local = threading.local()
