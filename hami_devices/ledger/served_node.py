"""The node a ledger serves and the vendors seen on it, recorded in the ledger at its first use on a node.

A node agent started with ``NODE_NAME`` and a shell without it on the same machine would otherwise
name the node differently (the shell falls back to the host's name), so the one ledger would hold
grants on a node that the other process's devices are not on.  The vendors seen are kept so that a
vendor library that goes missing later is reported, not read as a node without that vendor.  Both are
observations (``NODE_KEY``, ``VENDORS_KEY``): the SQLite and the PostgreSQL ledger keep them without a
schema change.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from hami_devices.ledger.base import Ledger

PREFIX = "ledger.served-"
NODE_KEY = PREFIX + "node"
VENDORS_KEY = PREFIX + "vendors"


@dataclass(frozen=True)
class Served:
    """What a ledger recorded about the node it serves."""

    node: str | None
    vendors: frozenset[str]


def served(ledger: Ledger) -> Served:
    """The node ``ledger`` serves (None before its first use on a node) and the vendors seen there."""
    with ledger.reading() as view:
        seen = view.observations(PREFIX)
    return _decode(seen)


def record_served(ledger: Ledger, node: str | None = None, vendors: Iterable[str] = ()) -> Served:
    """Record ``node`` unless a node is recorded already (by this or another process), and add ``vendors``.
    Returns what the ledger holds afterwards."""
    with ledger.transaction() as view:
        before = _decode(view.observations(PREFIX))
        now = time.time()
        if before.node is None and node is not None:
            view.set_observation(NODE_KEY, now, {"node": node})
        added = before.vendors | frozenset(vendors)
        if added != before.vendors:
            view.set_observation(VENDORS_KEY, now, {"vendors": sorted(added)})
    return Served(before.node or node, added)


def ledger_label(ledger: Ledger) -> str:
    """How an operator names the ledger: its file, its URL without the password, or "the in-memory ledger"."""
    for attribute in ("path", "display_url"):
        where = getattr(ledger, attribute, None)
        if where is not None:
            return f"ledger {where}"
    return "the in-memory ledger"


def _decode(seen: dict[str, tuple[float, object]]) -> Served:
    node = seen.get(NODE_KEY)
    vendors = seen.get(VENDORS_KEY)
    return Served(
        str(node[1]["node"]) if node is not None and isinstance(node[1], dict) else None,
        frozenset(vendors[1]["vendors"]) if vendors is not None and isinstance(vendors[1], dict) else frozenset(),
    )
