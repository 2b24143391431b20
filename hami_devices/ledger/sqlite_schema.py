"""The SQLite ledger's tables, one migration per schema version, and how a file says its version.

The version lives in ``PRAGMA user_version``; the PostgreSQL ledger keeps the same tables at the same
versions (``postgresql_schema.py``).
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 3
"""``PRAGMA user_version`` of a ledger this release writes; readers check it before anything else."""

_SCHEMA_V1 = """
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

# AUTOINCREMENT: a seq is never reused, even after old events are pruned, so a follower
# that remembers the last seq it printed can never skip or repeat one.
_SCHEMA_V2 = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    allocation_id TEXT,
    uuid TEXT,
    node TEXT,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_allocation ON events(allocation_id, seq);
CREATE INDEX IF NOT EXISTS events_by_time ON events(time);
CREATE TABLE IF NOT EXISTS observations (
    key TEXT PRIMARY KEY,
    observed_at REAL NOT NULL,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS usage (
    bucket REAL NOT NULL,
    allocation_id TEXT NOT NULL,
    uuid TEXT NOT NULL,
    seconds REAL NOT NULL,
    memory_mib_seconds REAL NOT NULL,
    utilization_seconds REAL NOT NULL,
    utilization_ratio_seconds REAL NOT NULL,
    PRIMARY KEY (bucket, allocation_id, uuid)
);
"""

# A plain INTEGER PRIMARY KEY takes the largest generation + 1, and the log is never trimmed of its newest
# change, so a generation is never handed out twice (AUTOINCREMENT would also write sqlite_sequence on every
# change).  grants_by_handle: a release finds its grants (and the cascade its rows) without a scan.
_SCHEMA_V3 = """
CREATE TABLE IF NOT EXISTS allocation_changes (
    generation INTEGER PRIMARY KEY,
    handle_id TEXT NOT NULL,
    added INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS grants_by_handle ON grants(handle_id);
"""

MIGRATIONS = {1: _SCHEMA_V1, 2: _SCHEMA_V2, 3: _SCHEMA_V3}
"""Version -> the DDL that brings a file from the version before it (idempotent)."""


def schema_version(conn: sqlite3.Connection) -> int:
    """The file's schema version; 1 for files written before versions were recorded."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version == 0 and conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'allocations'").fetchone():
        return 1
    return version
