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

The price is that commits from every host go one at a time, so a commit keeps
its round trips under the lock few (``postgresql_view.py``) and does not hold
the lock through its WAL flush: it commits with ``synchronous_commit = off``,
which makes it visible and hands the lock on at once, then waits for the flush
in a second, tiny transaction (a transactional ``pg_logical_emit_message``,
flushed at the session's own ``synchronous_commit``) before ``transaction()``
returns.  The WAL is written in commit order, so whatever is flushed is a
prefix of the commits: a server crash can lose only commits whose callers were
still waiting, never one that another writer's durable commit relied on, and
the flushes of several writers are shared (group commit).  Where the server
refuses that function (a restricted service), each commit holds the lock
through its own flush instead.  bench/ledger.py measures 1 to 8 writers.

Readers (``reading()``) take no lock: one REPEATABLE READ, READ ONLY snapshot.
A transaction opened inside another on the same thread is refused (PostgreSQL
would only warn, and the inner COMMIT would end the outer one early).

A writer waits for the lock at most ``busy_timeout_s`` (``$HAMI_LEDGER_TIMEOUT``,
else 30 s; PostgreSQL's ``lock_timeout``).  Every error from the server or the
driver (down, refused, wrong password, unknown database, bad URL, lock wait too
long) is raised as ``LedgerUnavailable`` naming the URL without its password; a
value PostgreSQL cannot store (a NUL character in text) is the caller's
``InvalidRequest``.
The schema version lives in the one-row table ``ledger_schema`` (SQLite keeps it
in ``PRAGMA user_version``); opening migrates under the same lock, and a
database from a newer release is refused with ``LedgerSchemaError``.

The tables are in ``postgresql_schema.py``, a transaction's reads and writes in
``postgresql_view.py``.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import errors as pg_errors

from hami_devices.errors import InvalidRequest, LedgerSchemaError, LedgerUnavailable
from hami_devices.ledger.base import Ledger, LedgerView
from hami_devices.ledger.paths import default_busy_timeout
from hami_devices.ledger.postgresql_schema import MIGRATIONS, WRITER_LOCK_KEY
from hami_devices.ledger.postgresql_view import Connection, PostgresView
from hami_devices.ledger.row_versions import RowVersions
from hami_devices.ledger.sqlite import SCHEMA_VERSION
from hami_devices.ledger.urls import redacted, scrubbed

_BEGIN_WRITE = f"BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock({WRITER_LOCK_KEY})"
# a commit that lets the next writer in before its WAL flush; the caller waits for the flush after (_FLUSHED)
_BEGIN_COMMIT_FIRST = (
    f"BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit = off; "
    f"SELECT pg_advisory_xact_lock({WRITER_LOCK_KEY})"
)
# waits, at the session's synchronous_commit, until the WAL is flushed past this message, which follows the
# commit before it: a transactional message is the least a transaction can write to have a commit to flush
_FLUSHED = "BEGIN; SELECT pg_logical_emit_message(true, 'hami-devices', ''); COMMIT"
_BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


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
        self._commit_first = self._can_wait_for_flush()

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

    def _can_wait_for_flush(self) -> bool:
        """Whether this server lets a writer wait for its flush after COMMIT (some services restrict the
        function it uses); where not, each commit holds the writers' lock through its own flush instead."""
        conn = self._connection()
        try:
            conn.execute(_FLUSHED)
        except psycopg.OperationalError as exc:  # the server went away: that, not the function, is the news
            self._rollback(conn)
            raise self._unusable(exc) from None
        except psycopg.Error:
            self._rollback(conn)
            return False
        return True

    @property
    def schema_version(self) -> int:
        with self.reading() as view:
            assert isinstance(view, PostgresView)
            return int(view._rows("SELECT version FROM ledger_schema")[0][0])

    # ---- transactions ----

    @contextmanager
    def transaction(self) -> Iterator[LedgerView]:
        conn = self._begin(_BEGIN_COMMIT_FIRST if self._commit_first else _BEGIN_WRITE)
        view = PostgresView(conn, self._row_versions())
        try:
            yield view
        except psycopg.Error as exc:
            self._rollback(conn)
            raise self._unusable(exc) from None
        except BaseException:
            self._rollback(conn)
            raise
        with self._errors(conn):
            conn.execute("COMMIT")  # the lock goes now; the next writer sees this commit
        if self._commit_first and view.wrote:
            try:
                conn.execute(_FLUSHED)  # ...and this caller returns only once it is durable
            except psycopg.Error as exc:
                self._rollback(conn)
                raise LedgerUnavailable(
                    f"ledger {self.display_url}: the commit was made, but the server could not confirm that it "
                    f"is on disk ({scrubbed(str(exc), self.url)})"
                ) from None

    @contextmanager
    def reading(self) -> Iterator[LedgerView]:
        """A read transaction: one consistent snapshot, without the writers' lock."""
        conn = self._begin(_BEGIN_READ)
        try:
            yield PostgresView(conn, self._row_versions())
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
