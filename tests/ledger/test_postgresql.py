"""What only the PostgreSQL ledger has: a URL, a server that can be down or refuse us, and the CLI over it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from hami_devices.errors import InvalidRequest, LedgerUnavailable
from hami_devices.ledger import Event
from hami_devices.ledger.opening import open_ledger
from hami_devices.ledger.postgresql import PostgresLedger
from hami_devices.models import DeviceHandle
from tests.ledger.pg_server import PostgresServer, free_port

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "hami_devices.cli.main"]
EXAMPLE_INVENTORY = REPO / "examples" / "cluster.yaml"


def _refusal(url: str) -> str:
    with pytest.raises(LedgerUnavailable) as refused:
        open_ledger(url, busy_timeout_s=2)
    return str(refused.value)


def test_a_wrong_password_is_named_without_any_password(postgres_server: PostgresServer, postgres_url: str) -> None:
    wrong = postgres_url.replace(postgres_server.password, "s3cret-guess")
    text = _refusal(wrong)
    assert "password authentication failed" in text
    assert "s3cret-guess" not in text and postgres_server.password not in text
    assert f"postgresql://hami:***@127.0.0.1:{postgres_server.port}/" in text


def test_a_password_given_as_a_parameter_is_hidden_too(postgres_server: PostgresServer) -> None:
    secret = postgres_server.password
    url = f"postgresql://hami@127.0.0.1:{postgres_server.port}/no_such_db?password={secret}&sslmode=disable"
    text = _refusal(url)
    assert 'database "no_such_db" does not exist' in text
    assert secret not in text and "password=***" in text


def test_a_server_that_is_not_there_is_unavailable_not_a_crash() -> None:
    port = free_port()  # free a moment ago: nobody listens there
    text = _refusal(f"postgresql://hami:pw@127.0.0.1:{port}/db")
    assert "cannot be reached" in text and f"hami:***@127.0.0.1:{port}/db" in text and ":pw@" not in text


def test_a_malformed_url_is_unavailable_naming_it(postgres_server: PostgresServer) -> None:
    text = _refusal(f"postgresql://hami:topsecret@127.0.0.1:{postgres_server.port}x/db")
    assert "topsecret" not in text and "invalid" in text


def test_a_lost_connection_is_replaced_on_the_next_transaction(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    ledger = PostgresLedger(postgres_url)
    ledger.record_event(Event(kind="device.health"))
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:  # as a server restart would
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'hami-devices' AND datname = %s",
            (postgres_url.rsplit("/", 1)[1],),
        ).fetchall()
    assert ended == [(True,)]
    ledger.record_event(Event(kind="device.health"))  # on a new connection: nothing was sent on the dead one
    assert [e.seq for e in ledger.events()] == [1, 2]
    ledger.close()


def test_a_value_postgresql_cannot_store_is_the_callers_error(postgres_url: str) -> None:
    ledger = PostgresLedger(postgres_url)
    with pytest.raises(InvalidRequest, match="NUL"), ledger.transaction() as view:
        view.record_event(Event(kind="device.health", allocation_id="a\x00b"))
    assert ledger.events() == []
    ledger.close()


def test_the_database_collation_changes_no_answer(postgres_url: str) -> None:
    ledger = PostgresLedger(postgres_url)
    with psycopg.connect(postgres_url) as conn:  # the fixture makes databases with a language-aware collation
        row = conn.execute("SELECT datlocprovider FROM pg_database WHERE datname = current_database()").fetchone()
        ordered = [r[0] for r in conn.execute("SELECT x FROM unnest(ARRAY['a', 'B', '_']) AS x ORDER BY x")]
    if row == ("i",):
        assert ordered == ["_", "a", "B"]  # language order, not code points: the ledger must not rely on it
    keys = ["obs/a", "obs/B", "obs/_", "obs-x", "obs0", "obs/\U0010fffe"]
    with ledger.transaction() as view:
        for n, key in enumerate(keys):
            view.set_observation(key, float(n), key)
            view.add(DeviceHandle(id=key, request={"parts": [{"memory_mib": 1}]}, grants=[], created_at=1.0))
    with ledger.reading() as view:
        assert view.observations("obs/") == {k: (float(n), k) for n, k in enumerate(keys) if k.startswith("obs/")}
        assert view.handle_ids() == sorted(keys)  # code-point order, as SQLite and Python sort
    ledger.close()


def test_without_the_extra_the_url_asks_for_it() -> None:
    probe = (
        "import sys; sys.modules['psycopg'] = None\n"  # what an install without the [postgresql] extra sees
        "from hami_devices.errors import MissingExtra\n"
        "from hami_devices.ledger.opening import open_ledger\n"
        "try:\n    open_ledger('postgresql://u:pw@127.0.0.1:1/db')\n"
        "except MissingExtra as exc:\n    print(exc.extra, '|', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    extra, message = done.stdout.strip().split(" | ")
    assert extra == "postgresql" and "pip install 'hami-devices[postgresql]'" in message


def _cli(*args: str, env: dict[str, str] | None = None) -> Any:
    done = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if "--json" in args else done.stdout


def test_the_cli_allocates_lists_and_releases_through_a_url(postgres_url: str) -> None:
    handle = _cli("allocate", "--inventory", str(EXAMPLE_INVENTORY), "--ledger", postgres_url, "--model", "T4",
                  "--memory", "2048", "--json")
    listed = _cli("allocations", "--json", env={"HAMI_LEDGER": postgres_url})
    assert [a["id"] for a in listed["allocations"]] == [handle["id"]]
    assert handle["id"] in _cli("release", handle["id"], "--ledger", postgres_url)
    kinds = [e["kind"] for e in _cli("events", "--json", env={"HAMI_LEDGER": postgres_url})["events"]]
    assert kinds == ["allocation.granted", "allocation.released"]
    charged = _cli("usage", "--ledger", postgres_url, "--from", "1h", "--by", "allocation", "--json")
    assert charged["totals"]["device_hours"] > 0  # the share that was granted and released, from the events


def test_the_cli_names_a_refused_url_without_its_password(postgres_server: PostgresServer) -> None:
    url = f"postgresql://hami:not-the-password@127.0.0.1:{postgres_server.port}/postgres"
    done = subprocess.run([*CLI, "allocations", "--ledger", url], capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode != 0
    assert "LedgerUnavailable" in done.stderr and "hami:***@" in done.stderr
    assert "not-the-password" not in done.stderr + done.stdout


def test_the_same_tables_and_columns_as_the_sqlite_ledger(postgres_url: str, tmp_path: Path) -> None:
    import sqlite3

    from hami_devices.ledger import postgresql_schema, sqlite

    assert set(postgresql_schema.MIGRATIONS) == set(sqlite.MIGRATIONS) == set(range(1, sqlite.SCHEMA_VERSION + 1))
    PostgresLedger(postgres_url).close()
    open_ledger(tmp_path / "l.db").close()
    lite = sqlite3.connect(tmp_path / "l.db")
    tables = [r[0] for r in lite.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    in_sqlite = {(t, r[1]) for t in tables if t != "sqlite_sequence" for r in lite.execute(f"PRAGMA table_info({t})")}
    lite.close()
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
        ).fetchall()
    in_postgresql = {(t, c) for t, c in rows if t != "ledger_schema"}  # where SQLite has PRAGMA user_version
    assert in_postgresql == in_sqlite


def test_a_write_returns_only_once_its_commit_is_flushed(postgres_server: PostgresServer, postgres_url: str) -> None:
    """Writers hand the lock on at COMMIT, before the WAL flush, and wait for the flush after it (group commit):
    when ``transaction()`` returns, the WAL is flushed past everything the transaction wrote.

    The wait is at the session's ``synchronous_commit``; the test server runs with it off (for speed), so this
    ledger's sessions ask for it on, as a durable server's default is."""
    separator = "&" if "?" in postgres_url else "?"
    ledger = PostgresLedger(f"{postgres_url}{separator}options=-c%20synchronous_commit%3Don")
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        for n in range(20):
            with ledger.transaction() as view:
                view.record_event(Event(kind="device.health", data={"n": n, "pad": "x" * 2000}))
                (written,) = admin.execute("SELECT pg_current_wal_insert_lsn()").fetchone()  # past those rows
            (flushed,) = admin.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (written,)).fetchone()
            assert flushed, n
    ledger.close()


def test_where_the_flush_cannot_be_awaited_after_commit_each_commit_holds_the_lock_through_it(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    role = f"plain_{os.getpid()}_{abs(hash(postgres_url)) % 10**6}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:  # as a managed service might restrict it
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
        admin.execute(f"GRANT CREATE, USAGE ON SCHEMA public TO {role}")
        admin.execute("REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC")
        url = postgres_url.replace(postgres_url.split("@")[0], f"postgresql://{role}:pw")
        with psycopg.connect(url) as plain, pytest.raises(psycopg.errors.InsufficientPrivilege):
            plain.execute("SELECT pg_logical_emit_message(true, 'x', '')")
        ledger = PostgresLedger(url)
        with ledger.transaction() as view:
            view.record_event(Event(kind="device.health"))
            (written,) = admin.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
        (flushed,) = admin.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (written,)).fetchone()
    assert flushed and [e.seq for e in ledger.events()] == [1]
    ledger.close()
