"""Allocations the ledger holds past a limit (``ledger.conflicts``): which, the rule each breaks, what to do."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from hami_devices.doctor.report import Check, passed, warned
from hami_devices.ledger.conflicts import CONFLICT_PREFIX, WHAT_TO_DO
from hami_devices.ledger.sqlite import schema_version

SHOWN = 5
"""Allocations named in the one-line why; every one is in the detail."""


def ledger_conflicts_check(path: Path) -> Check:
    """The conflicts whoever loaded the ledger recorded, for allocations that are still live.

    Read-only: the rows are listed, never changed (a conflicting allocation is booked where it is, so the
    ledger stays usable; releasing it is an operator's decision)."""
    id = "ledger.conflicts"
    if not path.exists():
        return passed(id, f"no ledger yet at {path}")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        return passed(id, f"{path} cannot be opened ({exc}): the ledger check says what to do")
    try:
        if schema_version(conn) < 2:
            return passed(id, f"{path}: no conflicts recorded (schema before version 2)")
        rows = conn.execute(
            "SELECT o.key, o.value FROM observations o JOIN allocations a ON a.id = substr(o.key, ?) "
            "WHERE o.key >= ? AND o.key < ? ORDER BY o.key",
            (len(CONFLICT_PREFIX) + 1, CONFLICT_PREFIX, CONFLICT_PREFIX + "\U0010ffff"),
        ).fetchall()
    except sqlite3.DatabaseError as exc:
        return passed(id, f"{path} cannot be read ({exc}): the ledger check says what to do")
    finally:
        conn.close()
    return conflicts_found(str(path), rows)


def conflicts_found(where: str, rows: Sequence[tuple[str, str]]) -> Check:
    """The check's answer from the live allocations' conflict rows (observation key, JSON value) of the
    ledger at ``where`` (a file, or a database URL without its password), whichever database holds it."""
    id = "ledger.conflicts"
    conflicts = {key[len(CONFLICT_PREFIX):]: json.loads(value) for key, value in rows}
    if not conflicts:
        return passed(id, f"{where}: no allocation is held past a limit", path=where)
    named = [
        f"{handle_id} ({', '.join(sorted({c for codes in broken.values() for c in codes}))})"
        for handle_id, broken in list(conflicts.items())[:SHOWN]
    ]
    more = f" and {len(conflicts) - SHOWN} more" if len(conflicts) > SHOWN else ""
    return warned(
        id,
        f"{len(conflicts)} allocation(s) held past a limit: {', '.join(named)}{more}",
        WHAT_TO_DO,
        path=where,
        conflicts=conflicts,
    )
