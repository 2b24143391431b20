"""Cluster fragmentation (FGD) and defragmentation plans over a ``ClusterState``.

A device's free share is the scarcer of its free memory and free cores, in
thousandths, so FGD applies to any vendor.  ``fragmentation`` is the share of
the cluster's idle device capacity that the workload mix cannot use:
``sum_n F_n / sum_n idle_n`` (0..1), computed by the same index the
fragmentation-aware policy scores with.  Without a mix given, the mix is
learned from the requests of what the cluster holds (the neutral prior when
it holds nothing).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hami_devices.errors import HamiError
from hami_devices.scheduling import fgd
from hami_devices.scheduling.cluster import Booking, ClusterState
from hami_devices.scheduling.fragindex import FragmentationIndex
from hami_devices.scheduling.mix import OnlineMix

if TYPE_CHECKING:
    from hami_devices.scheduling.engine import Engine


def held_mix(cluster: ClusterState) -> fgd.WorkloadMix:
    """The mix of the requests the cluster's bookings hold (the neutral prior where there are none)."""
    learner = OnlineMix(refresh=2**62)
    for booking in cluster.bookings.values():
        if booking.request is not None:
            learner.observe(booking.request)
    return learner.derive()


def index_for(cluster: ClusterState, mix: fgd.WorkloadMix | None = None) -> FragmentationIndex:
    index = FragmentationIndex(cluster, mix or held_mix(cluster))
    index.sync()
    return index


def node_fragmentation(cluster: ClusterState, mix: fgd.WorkloadMix | None = None) -> dict[str, float]:
    """``F_n`` (thousandths of a device) per node."""
    base = index_for(cluster, mix).node_fragmentation()
    return {name: float(base[cluster.node_row(name)]) for name in cluster.nodes}


def fragmentation(cluster: ClusterState, workload_mix: fgd.WorkloadMix | None = None) -> float:
    """The cluster fragmentation rate: fragmented idle share / idle share (0 when nothing is idle)."""
    return index_for(cluster, workload_mix).fragmentation_rate()


@dataclass(frozen=True)
class Move:
    booking_id: str
    from_node: str
    to_node: str
    from_uuids: tuple[str, ...]
    to_uuids: tuple[str, ...]


@dataclass(frozen=True)
class DefragPlan:
    moves: tuple[Move, ...]
    devices_freed: tuple[str, ...]  # uuids that end with nothing on them
    whole_free_before: int
    whole_free_after: int


def plan_defragmentation(cluster: ClusterState, max_moves: int, policy: str = "binpack") -> DefragPlan:
    """Moves of preemptible placements that free the most whole devices within ``max_moves``.

    Greedy: devices whose every holder is preemptible are emptied cheapest
    first (fewest holders, least used); each holder is re-placed by the engine
    (``policy``) on a scratch copy of the cluster, never onto a device being
    emptied nor onto a whole free device (which would defeat the purpose).  A
    device counts only when all its holders found a new home; otherwise its
    holders go back where they were.  The cluster itself is not changed.
    """
    from hami_devices.scheduling.engine import Engine

    scratch = copy.deepcopy(cluster)
    engine = Engine(scratch, policy)
    before = scratch.whole_free_devices()
    holders: dict[int, list[str]] = {}
    for booking in scratch.bookings.values():
        for grant in booking.grants:
            holders.setdefault(scratch.row(grant.uuid), []).append(booking.id)
    candidates = [
        row
        for row, ids in holders.items()
        if all(scratch.bookings[i].preemptible and scratch.bookings[i].request is not None for i in ids)
    ]
    candidates.sort(key=lambda r: (len(holders[r]), int(scratch.mem_used[r]), r))
    moves: list[Move] = []
    freed: list[str] = []
    emptying: set[str] = set()
    for row in candidates:
        ids = [i for i in holders[row] if i in scratch.bookings]
        if not ids or len(moves) + len(ids) > max_moves or scratch.sharers[row] != len(ids):
            continue
        uuid = scratch.info(row).uuid
        old = [scratch.forget(i) for i in ids]
        banned = sorted(
            emptying | {uuid} | {scratch.info(int(r)).uuid for r in scratch.live_rows() if scratch.sharers[r] == 0}
        )
        planned = _rehome(scratch, engine, old, banned)
        if planned is None:
            continue
        emptying.add(uuid)
        moves.extend(planned)
        freed.append(uuid)
    return DefragPlan(tuple(moves), tuple(freed), before, scratch.whole_free_devices())


def _rehome(scratch: ClusterState, engine: Engine, old: list[Booking], banned: list[str]) -> list[Move] | None:
    """Place every booking of ``old`` elsewhere, or put them all back and return None."""
    made: list[Booking] = []
    moves: list[Move] = []
    for booking in old:
        assert booking.request is not None
        request = booking.request.model_copy(
            update={
                "parts": [
                    p.model_copy(update={"exclude_uuids": [*p.exclude_uuids, *banned]}) for p in booking.request.parts
                ]
            }
        )
        try:
            placement = engine.place(request)
            new = engine.book(placement)
        except HamiError:
            for done in made:
                scratch.forget(done.id)
            for back in old:
                scratch.assume(
                    back.node,
                    back.grants,
                    host_cpu_milli=back.host_cpu_milli,
                    host_memory_mib=back.host_memory_mib,
                    preemptible=back.preemptible,
                    request=back.request,
                    booking_id=back.id,
                    state=back.state,
                )
            return None
        made.append(new)
        moves.append(
            Move(
                booking.id,
                booking.node,
                placement.node,
                tuple(g.uuid for g in booking.grants),
                tuple(g.uuid for g in placement.grants),
            )
        )
    return moves
