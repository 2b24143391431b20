"""The limiter's region folder and the allocation ledger: safe to use, readable, and of this release."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from hami_devices import limiter
from hami_devices.doctor.report import Check, failed, passed, warned
from hami_devices.errors import LimiterError
from hami_devices.ledger.sqlite import SCHEMA_VERSION, schema_version


def region_dir_check(folder: Path | None = None) -> Check:
    """The folder regions are created in: a folder of this user (or root) that nobody else can write to."""
    id = "limiter.region-dir"
    folder = folder or limiter.region_dir_path()
    if not folder.exists() and not folder.is_symlink():
        parent = next((p for p in folder.parents if p.exists()), Path("/"))
        if not os.access(parent, os.W_OK | os.X_OK):
            return failed(
                id,
                f"{folder} does not exist and {parent} is not writable by uid {os.geteuid()}",
                "create it (mode 0700) for the user the node agent runs as, or set HAMI_REGION_DIR",
            )
        return passed(id, f"{folder} does not exist yet; the first allocation creates it (mode 0700)")
    try:
        limiter.check_region_dir(folder)
    except LimiterError as exc:
        return failed(
            id,
            str(exc),
            f"chmod 700 {folder} and chown it to the user the node agent runs as (or set HAMI_REGION_DIR "
            "to such a folder): a writable region folder lets others choose a workload's limits",
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        return failed(id, f"{folder} is not writable by uid {os.geteuid()}", "run as its owner, or set HAMI_REGION_DIR")
    st = folder.stat()
    return passed(id, f"{folder}: owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}", path=str(folder))


def ledger_check(path: Path) -> Check:
    """The SQLite ledger: a database that passes ``PRAGMA integrity_check``, at a schema this release reads."""
    id = "ledger"
    if not path.exists():
        return passed(id, f"no ledger yet at {path}; the first allocate creates it", path=str(path))
    moved = f"mv {path} {path}.corrupt (the allocations it held must then be released by hand); the next allocate "
    moved += "creates a new ledger"
    try:
        # read-only: a doctor must not migrate, create or lock anyone out of the file
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        return failed(id, f"{path} cannot be opened: {exc}", f"check its permissions, or {moved}")
    try:
        problems = [str(row[0]) for row in conn.execute("PRAGMA integrity_check").fetchall()]
        version = schema_version(conn)
        allocations = int(conn.execute("SELECT count(*) FROM allocations").fetchone()[0]) if version >= 1 else 0
    except sqlite3.DatabaseError as exc:
        return failed(id, f"{path} is not a readable ledger: {exc}", moved, path=str(path))
    finally:
        conn.close()
    if problems != ["ok"]:
        return failed(
            id,
            f"{path} fails PRAGMA integrity_check: {problems[0]}"
            + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
            moved,
            path=str(path),
            problems=problems[:20],
        )
    if version > SCHEMA_VERSION:
        return failed(
            id,
            f"{path} has schema version {version}; this release reads up to {SCHEMA_VERSION}",
            "upgrade hami-devices to the release that wrote it",
            path=str(path),
            schema_version=version,
        )
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & stat.S_IWOTH:
        return warned(
            id,
            f"{path} is writable by others (mode {mode:04o}): anyone could forge or drop allocations",
            f"chmod 600 {path}",
            path=str(path),
        )
    note = "" if version == SCHEMA_VERSION else f"; migrates to {SCHEMA_VERSION} on the next write"
    return passed(
        id,
        f"{path}: integrity ok, schema version {version}{note}, {allocations} allocation(s)",
        path=str(path),
        schema_version=version,
        allocations=allocations,
    )
