"""The ledger's change log: every allocation added or removed takes the next generation, in its transaction.

A reader that brought its own copy of the live allocations in step with the ledger at generation ``g``
(``LedgerView.generation``) later asks only for what changed after ``g`` (``LedgerView.changes_since``):
nothing, when the last change was its own commit.  The log keeps the newest ``CHANGES_KEPT`` changes
(older ones go every ``PRUNE_EVERY`` generations, in the writing transaction); a reader further behind
than that, or holding a generation the ledger never reached (another ledger, a restored file), gets
``None`` and lists every allocation id instead.
"""

from __future__ import annotations

from typing import NamedTuple

CHANGES_KEPT = 10_000
"""Changes the log keeps: a follower that many changes behind lists every allocation instead."""
PRUNE_EVERY = 1_024
"""Generations between two trims of the log (each in the transaction that reaches such a generation)."""


class Change(NamedTuple):
    """One allocation added (``added``) or removed, at ``generation``."""

    generation: int
    handle_id: str
    added: bool


def follows_on(since: int, oldest: int | None, newest: int) -> bool:
    """Whether the log (generations ``oldest`` .. ``newest``; ``oldest`` None when it is empty) still holds
    every change after ``since``: none of them was trimmed, and ``since`` is a generation this ledger reached."""
    if since > newest or since < 0:
        return False
    return oldest is None or since >= oldest - 1


def trim_below(before: int, after: int) -> int | None:
    """The generation at and below which the log is trimmed by a transaction that took it from generation
    ``before`` to ``after``: when it reached a multiple of ``PRUNE_EVERY``, all but the newest ``CHANGES_KEPT``
    changes up to there (None: nothing to trim)."""
    reached = after - after % PRUNE_EVERY
    if reached <= before or reached <= CHANGES_KEPT:
        return None
    return reached - CHANGES_KEPT
