"""How a cluster state follows a ledger: by the ledger's change log, reading only what changed.

Every allocation a ledger adds or removes takes the next generation of its change log in the same
transaction (``hami_devices.ledger.changes``).  A cluster state that followed a ledger keeps a
``FollowMark``: that ledger, the generation it reached, and the cluster's own ``version`` then.  The
next follow reads only the changes after that generation, which is nothing at all when the ledger's
last change was this state's own commit (``mirror_commit``).  It lists every allocation id instead
(``ClusterState.follow``) the first time, when the cluster's bookings changed some other way since
(``book``, ``unbook``, ``assume``, a node added or removed: its ``version`` moved), when the ledger
keeps no change log or no longer holds those changes, or when it is another ledger.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_devices.ledger import Ledger, LedgerView
from hami_devices.models import DeviceHandle
from hami_devices.scheduling.cluster import ClusterState

__all__ = ["FollowMark", "follow_ledger", "mirror_commit"]


@dataclass(frozen=True)
class FollowMark:
    """A cluster state was in step with ``ledger`` at ``generation`` while its own version was ``version``."""

    ledger: Ledger
    generation: int
    version: int


def _in_step(cluster: ClusterState, ledger: Ledger) -> FollowMark | None:
    mark = cluster.followed
    if mark is not None and mark.ledger is ledger and mark.version == cluster.version:
        return mark
    return None


def follow_ledger(cluster: ClusterState, ledger: Ledger, view: LedgerView, *, partial: bool = True) -> int:
    """Bring ``cluster`` in step with what ``view`` (a transaction or snapshot of ``ledger``) holds; returns
    how many allocations were fetched."""
    mark = _in_step(cluster, ledger)
    changes = None if mark is None else view.changes_since(mark.generation)
    if mark is None or changes is None:
        generation = view.generation()
        fetched = cluster.follow(view.handle_ids(), view.get, partial=partial)
    else:
        generation = changes[-1].generation if changes else mark.generation
        fetched = cluster.follow_changes([(c.handle_id, c.added) for c in changes], view.get, partial=partial)
    cluster.followed = None if generation is None else FollowMark(ledger, generation, cluster.version)
    return fetched


def mirror_commit(cluster: ClusterState, ledger: Ledger, handle: DeviceHandle, generation: int | None) -> None:
    """Book ``handle``, which this process committed to ``ledger`` reaching ``generation``, after following
    the ledger in that same write transaction: nothing else changed the ledger in between (writers go one
    at a time), so the cluster is in step at ``generation`` and the next follow reads only what comes after."""
    mark = _in_step(cluster, ledger)
    cluster.mirror(handle, partial=True, verified=True)
    if mark is not None and generation is not None:
        cluster.followed = FollowMark(ledger, generation, cluster.version)
