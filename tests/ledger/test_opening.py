"""``--ledger`` / ``$HAMI_LEDGER``: which ledger a target names, and how a URL is shown."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from hami_devices.errors import InvalidRequest
from hami_devices.ledger import SqliteLedger
from hami_devices.ledger.opening import argument_type, describe, ledger_target, open_ledger
from hami_devices.ledger.postgresql import PostgresLedger
from hami_devices.ledger.urls import redacted


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgres://u:p%40ss@h/db?sslmode=require", "postgres://u:***@h/db?sslmode=require"),
        ("postgresql://u@h/db?password=pw&application_name=x", "postgresql://u@h/db?password=***&application_name=x"),
        ("postgresql://u:@h/db", "postgresql://u:***@h/db"),
        ("postgresql://h/db", "postgresql://h/db"),
        ("postgresql://u:pw@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
        ("postgresql://u:pw@[::1/db", "postgresql://***"),  # does not even split: show nothing after the scheme
    ],
)
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert redacted(url) == shown


def test_a_path_is_sqlite_and_a_postgresql_url_stays_a_string() -> None:
    assert ledger_target("state/ledger.db") == Path("state/ledger.db")
    assert ledger_target(Path("/x/l.db")) == Path("/x/l.db")
    assert ledger_target("C:\\ledger.db") == Path("C:\\ledger.db")
    for url in ("postgresql://u:pw@h/db", "POSTGRES://h/db"):
        assert ledger_target(url) == url  # a Path would fold "//" into "/"
    assert describe("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"


def test_an_unknown_scheme_is_refused_naming_the_option_and_hiding_the_password() -> None:
    with pytest.raises(InvalidRequest) as refused:
        ledger_target("mysql://u:pw@h/db")
    assert refused.value.field == "--ledger" and "'mysql'" in refused.value.message
    assert ":pw@" not in str(refused.value)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown ledger scheme 'sqlite'"):
        argument_type("sqlite:///tmp/l.db")


def test_hami_ledger_names_the_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HAMI_LEDGER", str(tmp_path / "env.db"))
    ledger = open_ledger()
    assert isinstance(ledger, SqliteLedger) and ledger.path == tmp_path / "env.db"
    ledger.close()
    monkeypatch.setenv("HAMI_LEDGER", "redis://h/0")
    with pytest.raises(InvalidRequest) as refused:
        open_ledger()
    assert refused.value.field == "HAMI_LEDGER"


def test_hami_ledger_may_be_a_database(monkeypatch: pytest.MonkeyPatch, postgres_url: str) -> None:
    monkeypatch.setenv("HAMI_LEDGER", postgres_url)
    ledger = open_ledger()
    assert isinstance(ledger, PostgresLedger) and ledger.url == postgres_url
    ledger.close()


def test_a_node_setup_hands_its_processes_the_url_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hami_devices.integrations.node import NodeSetup

    url = "postgresql://sched:pw@db.example:5432/ledger?sslmode=require"
    assert NodeSetup.from_env({"HAMI_LEDGER": url}).variables()["HAMI_LEDGER"] == url
    monkeypatch.chdir(tmp_path)
    relative = NodeSetup.from_env({"HAMI_LEDGER": "state/l.db"})
    assert relative.variables()["HAMI_LEDGER"] == str(tmp_path / "state" / "l.db")  # resolved for other folders
    with pytest.raises(InvalidRequest) as refused:
        NodeSetup.from_env({"HAMI_LEDGER": "ftp://h/l.db"})
    assert refused.value.field == "HAMI_LEDGER"
