"""Allocations the ledger holds past a limit: listed, recorded once, never dropped.

A ledger can hold rows that break a rule where they are: written by an older
release, by hand, by a bug, or by a scheduler that raced another before every
rule was re-checked in the commit.  Whoever loads the ledger into a cluster
state books them all the same (``ClusterState.book``: the ledger is the truth)
and passes the cluster's ``conflicts`` here, inside a ledger transaction.  Each
conflicting allocation is recorded once as a ``ledger.conflict`` event, and its
codes are kept as observer state (``CONFLICT_PREFIX`` + id) for ``doctor``,
until the allocation is released.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hami_devices.ledger.base import LedgerView
from hami_devices.ledger.events import Event, EventKind

CONFLICT_PREFIX = "ledger.conflict/"
"""Observation key prefix: ``ledger.conflict/<allocation id>`` -> {device uuid or node: [codes]}."""

WHAT_TO_DO = (
    "nothing was dropped: the allocation stays booked where it is; release or evict it once its work allows "
    "(hami-devices release ID --force), or give the device or node the capacity it really has"
)


def note_conflicts(view: LedgerView, conflicts: Mapping[str, Mapping[str, Sequence[str]]]) -> list[str]:
    """Record each allocation of ``conflicts`` (id -> where -> codes) not recorded yet; returns the ids
    recorded now."""
    if not conflicts:
        return []
    known = view.observations(CONFLICT_PREFIX)
    recorded: list[str] = []
    for handle_id, broken in conflicts.items():
        value = {where: [str(c) for c in codes] for where, codes in broken.items()}
        key = CONFLICT_PREFIX + handle_id
        if key in known and known[key][1] == value:
            continue
        event = view.record_event(
            Event(kind=EventKind.CONFLICT, allocation_id=handle_id, data={"breaks": value, "action": WHAT_TO_DO})
        )
        view.set_observation(key, event.time, value)
        recorded.append(handle_id)
    return recorded


def forget_conflict(view: LedgerView, handle_id: str) -> None:
    """The allocation is gone: it no longer conflicts with anything."""
    view.set_observation(CONFLICT_PREFIX + handle_id, 0.0, None)


def listed_conflicts(view: LedgerView) -> dict[str, dict[str, list[str]]]:
    """Allocation id -> where -> codes, as recorded (for ``doctor`` and operators)."""
    return {key[len(CONFLICT_PREFIX):]: value for key, (_, value) in view.observations(CONFLICT_PREFIX).items()}
