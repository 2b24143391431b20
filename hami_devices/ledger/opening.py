"""Turn a ledger target (``--ledger``, ``$HAMI_LEDGER``) into a ledger: a file path is SQLite, a URL a database.

SQLite is the embedded default: any target that is not ``scheme://...`` is a file.
``postgresql://`` (or ``postgres://``) opens the PostgreSQL ledger, which needs the
``[postgresql]`` extra; any other scheme is refused rather than taken for a file name.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from hami_devices.errors import InvalidRequest
from hami_devices.extras import missing_extra
from hami_devices.ledger.base import Ledger
from hami_devices.ledger.paths import default_ledger_target
from hami_devices.ledger.sqlite import SqliteLedger
from hami_devices.ledger.urls import POSTGRESQL_SCHEMES, is_postgresql_url, redacted, url_scheme

LedgerTarget = str | Path
"""A SQLite file (a path) or a database URL (a string with a scheme)."""

LEDGER_HELP = (
    "ledger of live allocations: a SQLite file, or postgresql://user:password@host/db for schedulers on "
    "several hosts (default: $HAMI_LEDGER or ~/.local/state/hami-devices/ledger.db)"
)


def ledger_target(text: str | os.PathLike[str], *, field: str = "--ledger") -> LedgerTarget:
    """A URL stays a string (a ``Path`` would fold its ``//``); anything else is a file path."""
    if isinstance(text, str):
        scheme = url_scheme(text)
        if scheme is not None:
            if scheme not in POSTGRESQL_SCHEMES:
                raise InvalidRequest(
                    field,
                    f"unknown ledger scheme {scheme!r} in {redacted(text)}: give a file path (SQLite) or a "
                    "postgresql://user:password@host/database URL",
                )
            return text
    return Path(text)


def argument_type(text: str) -> LedgerTarget:
    """``ledger_target`` for argparse: a bad scheme is a usage error naming the option."""
    try:
        return ledger_target(text)
    except InvalidRequest as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def describe(target: LedgerTarget) -> str:
    """The target as it may be printed: a URL without its password."""
    return redacted(target) if isinstance(target, str) else str(target)


def open_ledger(target: str | os.PathLike[str] | None = None, *, busy_timeout_s: float | None = None) -> Ledger:
    """The ledger at ``target`` (default: ``$HAMI_LEDGER``, else the user's state folder)."""
    where = ledger_target(default_ledger_target(), field="HAMI_LEDGER") if target is None else ledger_target(target)
    if is_postgresql_url(where):
        assert isinstance(where, str)
        try:
            from hami_devices.ledger.postgresql import PostgresLedger
        except ModuleNotFoundError as exc:
            missing = missing_extra(exc, "a PostgreSQL ledger (--ledger postgresql://...)")
            if missing is None:
                raise
            raise missing from None
        return PostgresLedger(where, busy_timeout_s=busy_timeout_s)
    return SqliteLedger(where, busy_timeout_s=busy_timeout_s)
