"""Which runtime-env agent owns a share, so shares of an agent that died are released.

Ray releases a share through the plugin when the worker's runtime env is no longer
referenced (the worker exited, was killed, or crashed).  Only the agent's own death
(which takes its raylet and workers with it) skips that path, so each share's
allocation id names its agent by pid and process start time, and the next agent on
the node releases every share whose agent is gone.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from hami_devices.adapter import VendorAdapter
from hami_devices.allocation import release_from
from hami_devices.errors import UnknownAllocation
from hami_devices.ledger import Ledger

PREFIX = "ray."


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields resume after the last ")".
    fields = text[text.rindex(")") + 2 :].split()
    return fields[19] if fields[0] not in ("Z", "X") else None


def owner_key(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{start_time(pid)}"


def handle_id(owner: str, digest: str) -> str:
    return f"{PREFIX}{owner}.{digest}"


def owner_of(handle_id: str) -> str | None:
    if not handle_id.startswith(PREFIX):
        return None
    owner, _, _ = handle_id[len(PREFIX) :].partition(".")
    return owner


def alive(owner: str) -> bool:
    pid, _, started = owner.partition("-")
    return pid.isdigit() and start_time(int(pid)) == started


def reap(ledger: Ledger, adapters: Mapping[str, VendorAdapter], logger: logging.Logger) -> list[str]:
    """Release every Ray share whose agent is gone; the ids released."""
    released = []
    for handle in ledger.handles():
        owner = owner_of(handle.id)
        if owner is None or alive(owner):
            continue
        try:
            release_from(ledger, handle.id, adapters, ended=True)  # its agent is gone: nothing else will
        except UnknownAllocation:
            continue  # another agent reaped it first
        logger.info("hami: released share %s of a runtime-env agent that is gone", handle.id)
        released.append(handle.id)
    return released
