"""The ledger checks for a PostgreSQL ledger (``--ledger postgresql://...``): reachable, of a schema this
release reads, and the allocations it holds past a limit.

Read-only like the SQLite checks: one READ ONLY transaction, so nothing is created, migrated or locked.
The URL is shown without its password everywhere.
"""

from __future__ import annotations

from typing import Any

from hami_devices.doctor.conflicts import conflicts_found
from hami_devices.doctor.report import Check, failed, passed
from hami_devices.errors import MissingExtra
from hami_devices.extras import require
from hami_devices.ledger.conflicts import CONFLICT_PREFIX
from hami_devices.ledger.sqlite import SCHEMA_VERSION
from hami_devices.ledger.urls import redacted, scrubbed

REACH = "check that the server runs, the address, the database and the credentials (URL: postgresql://user:pw@host/db)"


def postgresql_checks(url: str) -> list[Check]:
    """The ``ledger`` and ``ledger.conflicts`` checks of the database at ``url``."""
    where = redacted(url)
    try:
        psycopg = require("psycopg", "a PostgreSQL ledger (--ledger postgresql://...)")
    except MissingExtra as exc:
        missing = failed("ledger", f"{where}: {exc}", f"pip install 'hami-devices[{exc.extra}]'", path=where)
        return [missing, passed("ledger.conflicts", f"{where} cannot be read: the ledger check says what to do")]
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=5, application_name="hami-devices doctor") as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return _read(conn, where)
    except (psycopg.Error, ValueError) as exc:
        return [
            failed("ledger", f"{where} cannot be used: {scrubbed(str(exc), url)}", REACH, path=where),
            passed("ledger.conflicts", f"{where} cannot be read: the ledger check says what to do"),
        ]


def _read(conn: Any, where: str) -> list[Check]:
    if conn.execute("SELECT to_regclass('ledger_schema')").fetchone()[0] is None:
        return [
            passed("ledger", f"no ledger yet in {where}; the first allocate creates its tables", path=where),
            passed("ledger.conflicts", f"no ledger yet in {where}"),
        ]
    version = int(conn.execute("SELECT version FROM ledger_schema").fetchone()[0])
    if version > SCHEMA_VERSION:
        newer = failed(
            "ledger",
            f"{where} has schema version {version}; this release reads up to {SCHEMA_VERSION}",
            "upgrade hami-devices to the release that wrote it",
            path=where,
            schema_version=version,
        )
        return [newer, passed("ledger.conflicts", f"{where} cannot be read: the ledger check says what to do")]
    allocations = int(conn.execute("SELECT count(*) FROM allocations").fetchone()[0])
    ledger = passed(
        "ledger",
        f"{where}: schema version {version}, {allocations} allocation(s)",
        path=where,
        schema_version=version,
        allocations=allocations,
    )
    rows = conn.execute(
        "SELECT o.key, o.value FROM observations o JOIN allocations a ON a.id = substr(o.key, %s) "
        "WHERE o.key >= %s AND o.key < %s ORDER BY o.key",
        (len(CONFLICT_PREFIX) + 1, CONFLICT_PREFIX, CONFLICT_PREFIX + "\U0010ffff"),
    ).fetchall()
    return [ledger, conflicts_found(where, rows)]
