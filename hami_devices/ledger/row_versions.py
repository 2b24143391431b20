"""Allocation bodies a PostgreSQL ledger connection has already read, keyed by row version.

A commit brings its cluster state in step with the ledger by listing the allocation ids
and fetching the ones it has not booked yet (``ClusterState.follow``), inside the writers'
lock.  Fetched one by one, every allocation another scheduler made since costs one round
trip while the lock is held, so the lock is held longer the more writers there are.  The
listing returns each row's ``xmin`` (the transaction that wrote that version of the row:
any rewrite changes it), and the first body asked for that is not known at its listed
version fetches every such body at once.  A body is JSON text, decoded on every ``get``,
so callers never share a handle object.
"""

from __future__ import annotations

from collections.abc import Mapping


class RowVersions:
    """id -> (xmin, JSON body) of the allocations last listed; one per thread (connection)."""

    def __init__(self) -> None:
        self._bodies: dict[str, tuple[str, str]] = {}

    def body(self, handle_id: str, xmin: str) -> str | None:
        """The body of ``handle_id`` at version ``xmin``, if it was read at that version."""
        known = self._bodies.get(handle_id)
        return known[1] if known is not None and known[0] == xmin else None

    def put(self, handle_id: str, xmin: str, body: str) -> None:
        self._bodies[handle_id] = (xmin, body)

    def drop(self, handle_id: str) -> None:
        self._bodies.pop(handle_id, None)

    def unknown(self, listed: Mapping[str, str]) -> list[str]:
        """The ids of ``listed`` (id -> xmin) whose body at that version is not known."""
        return [i for i, xmin in listed.items() if self.body(i, xmin) is None]

    def keep_only(self, listed: Mapping[str, str]) -> None:
        """Forget the allocations that are gone (bounded by the live set)."""
        for handle_id in [i for i in self._bodies if i not in listed]:
            del self._bodies[handle_id]
