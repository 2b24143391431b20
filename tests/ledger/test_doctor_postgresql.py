"""``doctor --ledger postgresql://...``: the ledger and conflict checks, read-only, on a real server."""

from __future__ import annotations

import psycopg

from hami_devices.doctor.database import postgresql_checks
from hami_devices.doctor.report import Status
from hami_devices.ledger.conflicts import note_conflicts
from hami_devices.ledger.postgresql import PostgresLedger
from hami_devices.models import DeviceHandle
from tests.ledger.pg_server import PostgresServer


def _by_id(url: str) -> dict[str, tuple[Status, str, str]]:
    return {c.id: (c.status, c.why, c.action) for c in postgresql_checks(url)}


def _tables(url: str) -> int:
    with psycopg.connect(url) as conn:
        return int(conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0])


def test_an_empty_database_passes_and_is_left_untouched(postgres_url: str) -> None:
    checks = _by_id(postgres_url)
    assert checks["ledger"][0] == Status.PASS and "no ledger yet" in checks["ledger"][1]
    assert checks["ledger.conflicts"][0] == Status.PASS
    assert _tables(postgres_url) == 0  # read-only: the doctor created nothing


def test_a_ledger_reports_its_version_and_the_live_allocations_past_a_limit(postgres_url: str) -> None:
    ledger = PostgresLedger(postgres_url)
    with ledger.transaction() as view:
        for handle_id in ("live-1", "live-2"):
            view.add(DeviceHandle(id=handle_id, request={"parts": [{"memory_mib": 1}]}, grants=[]))
        note_conflicts(view, {"live-1": {"n": ["NodeInsufficientCpu"]}, "gone": {"GPU-1": ["CardInsufficientMemory"]}})
    ledger.close()
    checks = _by_id(postgres_url)
    status, why, _ = checks["ledger"]
    database = postgres_url.rsplit("/", 1)[1]
    assert status == Status.PASS and why.endswith(f"/{database}: schema version 3, 2 allocation(s)")
    assert why.startswith("postgresql://hami:***@127.0.0.1:")
    status, why, action = checks["ledger.conflicts"]
    assert status == Status.WARN and "1 allocation(s) held past a limit: live-1 (NodeInsufficientCpu)" in why
    assert "gone" not in why and action


def test_a_newer_schema_fails_and_a_wrong_password_fails_without_showing_it(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    PostgresLedger(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE ledger_schema SET version = 7")
    status, why, action = _by_id(postgres_url)["ledger"]
    assert status == Status.FAIL and "schema version 7" in why and "upgrade" in action
    wrong = postgres_url.replace(postgres_server.password, "guessed-pw")
    status, why, action = _by_id(wrong)["ledger"]
    assert status == Status.FAIL and "password authentication failed" in why
    assert "guessed-pw" not in why + action and "hami:***@" in why
