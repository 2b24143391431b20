"""Ledger fixtures for any test (registered in tests/conftest.py): a real PostgreSQL server, a fresh database
per test, and ``ledger_target`` parametrized over SQLite and PostgreSQL so one test runs against both.

``ledger_target`` is what ``--ledger`` / ``$HAMI_LEDGER`` would hold (a file path or a URL), so a test
can hand it to worker processes; ``any_ledger`` is that target opened with ``open_ledger``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_devices.ledger import Ledger
from hami_devices.ledger.opening import LedgerTarget, open_ledger
from tests.ledger.pg_server import PostgresServer, PostgresServerError, start_server

BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One server for the session, started from the distribution's binaries (scripts/system-deps.sh)."""
    try:
        server = start_server()
    except PostgresServerError as exc:
        pytest.fail(f"the PostgreSQL test server cannot start: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a new, empty database, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    url = postgres_server.create_database(name)
    yield url
    postgres_server.drop_database(name)


@pytest.fixture(params=BACKENDS)
def ledger_target(request: pytest.FixtureRequest, tmp_path: Path) -> LedgerTarget:
    """A fresh, empty ledger's ``--ledger`` value: a SQLite file, or a PostgreSQL URL."""
    if request.param == "sqlite":
        return tmp_path / "ledger.db"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def any_ledger(ledger_target: LedgerTarget) -> Iterator[Ledger]:
    ledger = open_ledger(ledger_target)
    yield ledger
    ledger.close()
