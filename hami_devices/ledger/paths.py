"""Where a node's durable ledger lives when nobody says."""

from __future__ import annotations

import os
from pathlib import Path

from hami_devices.errors import InvalidRequest

DEFAULT_BUSY_TIMEOUT_S = 30.0


def default_ledger_path() -> Path:
    """``$HAMI_LEDGER``, else ``$XDG_STATE_HOME/hami-devices/ledger.db`` (``~/.local/state`` by default)."""
    if "HAMI_LEDGER" in os.environ:
        return Path(os.environ["HAMI_LEDGER"])
    state = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state"))
    return state / "hami-devices" / "ledger.db"


def default_ledger_target() -> str | Path:
    """``$HAMI_LEDGER`` as given when it is a URL (``postgresql://...``: a ``Path`` would fold its ``//``),
    else ``default_ledger_path()``."""
    text = os.environ.get("HAMI_LEDGER", "")
    if "://" in text:
        return text
    return default_ledger_path()


def default_busy_timeout() -> float:
    """How long to wait for a ledger another process holds: ``$HAMI_LEDGER_TIMEOUT`` seconds, else 30."""
    text = os.environ.get("HAMI_LEDGER_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_BUSY_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise InvalidRequest("HAMI_LEDGER_TIMEOUT", f"expected seconds (a number >= 0), got {text!r}")
    return seconds
