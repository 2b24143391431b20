"""The PostgreSQL ledger's tables: the SQLite ledger's, in PostgreSQL's types, one migration per version.

Text columns that are compared as ranges or sorted are ``COLLATE "C"``, so rows come back
in the code-point order SQLite and the in-memory ledger use whatever the database's
collation; times are DOUBLE PRECISION (REAL is single precision here), so a float
round-trips.  The version lives in the one-row table ``ledger_schema``, where SQLite has
``PRAGMA user_version``.
"""

from __future__ import annotations

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

# the allocations' change log (``ledger.changes``); its generations are drawn under the writers' lock, so they
# commit in the order they are drawn, as event seqs do
_SCHEMA_V3 = """
CREATE TABLE IF NOT EXISTS allocation_changes (
    generation BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    handle_id TEXT COLLATE "C" NOT NULL,
    added BOOLEAN NOT NULL
)
"""

MIGRATIONS = {1: _SCHEMA_V1, 2: _SCHEMA_V2, 3: _SCHEMA_V3}
"""Version -> the DDL that brings a database from the version before it (idempotent).  The versions are the
SQLite ledger's (``SCHEMA_VERSION``): the same tables at the same version in either database."""
