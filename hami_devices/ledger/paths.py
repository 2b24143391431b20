"""Where a node's durable ledger lives when nobody says."""

from __future__ import annotations

import os
from pathlib import Path


def default_ledger_path() -> Path:
    """``$HAMI_LEDGER``, else ``$XDG_STATE_HOME/hami-devices/ledger.db`` (``~/.local/state`` by default)."""
    if "HAMI_LEDGER" in os.environ:
        return Path(os.environ["HAMI_LEDGER"])
    state = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state"))
    return state / "hami-devices" / "ledger.db"
