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

from dataclasses import dataclass

from hami_devices.errors import HamiError
from hami_devices.models import Grant
from hami_devices.scheduling import fgd
from hami_devices.scheduling.cluster import Booking, ClusterState
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.fragindex import FragmentationIndex
from hami_devices.scheduling.mix import OnlineMix


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
    grants: tuple[Grant, ...] = ()  # what the placement holds after the move
    from_grants: tuple[Grant, ...] = ()  # and before it


@dataclass(frozen=True)
class DefragPlan:
    moves: tuple[Move, ...]
    devices_freed: tuple[str, ...]  # uuids that end with nothing on them
    whole_free_before: int
    whole_free_after: int


def plan_defragmentation(cluster: ClusterState, max_moves: int, policy: str = "binpack") -> DefragPlan:
    """Moves of preemptible placements that free the most whole devices within ``max_moves``.

    What ``defragment`` would do, undone again: the cluster ends as it was.
    """
    plan = defragment(cluster, max_moves, policy)
    for move in reversed(plan.moves):
        moved = cluster.forget(move.booking_id)
        cluster.rebook(moved, move.from_node, move.from_grants)
    return plan


def defragment(
    cluster: ClusterState, max_moves: int, policy: str = "binpack", max_attempts: int | None = None
) -> DefragPlan:
    """Move preemptible placements so as to free the most whole devices within ``max_moves``; returns the moves.

    Greedy: devices whose every holder is preemptible are emptied cheapest first
    (fewest holders, least used); each holder is re-placed by the engine
    (``policy``), never onto a device being emptied nor onto a whole free device
    (which would defeat the purpose).  A device counts only when all its holders
    found a new home; otherwise its holders go back where they were.  At most
    ``max_attempts`` devices are tried (default four per allowed move).
    """
    engine = Engine(cluster, policy)
    before = cluster.whole_free_devices()
    holders: dict[int, list[str]] = {}
    for booking in cluster.bookings.values():
        for grant in booking.grants:
            holders.setdefault(cluster.row(grant.uuid), []).append(booking.id)
    candidates = [
        row
        for row, ids in holders.items()
        if all(cluster.bookings[i].preemptible and cluster.bookings[i].request is not None for i in ids)
    ]
    candidates.sort(key=lambda r: (len(holders[r]), int(cluster.mem_used[r]), r))
    whole_free = {cluster.info(int(r)).uuid for r in cluster.live_rows() if cluster.sharers[r] == 0}
    moves: list[Move] = []
    freed: list[str] = []
    attempts = max_attempts if max_attempts is not None else 4 * max_moves
    for row in candidates:
        if attempts <= 0 or len(moves) >= max_moves:
            break
        ids = [i for i in holders[row] if i in cluster.bookings]
        if not ids or len(moves) + len(ids) > max_moves or cluster.sharers[row] != len(ids):
            continue
        attempts -= 1
        uuid = cluster.info(row).uuid
        old = [cluster.forget(i) for i in ids]
        planned = _rehome(cluster, engine, old, sorted(whole_free | set(freed) | {uuid}))
        if planned is None:
            continue
        moves.extend(planned)
        freed.append(uuid)
    return DefragPlan(tuple(moves), tuple(freed), before, cluster.whole_free_devices())


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
            new = scratch.rebook(booking, placement.node, placement.grants)  # the same booking, moved
        except HamiError:
            for done in made:
                scratch.forget(done.id)
            for back in old:
                scratch.rebook(back)
            return None
        made.append(new)
        moves.append(
            Move(
                booking.id,
                booking.node,
                placement.node,
                tuple(g.uuid for g in booking.grants),
                tuple(g.uuid for g in placement.grants),
                tuple(placement.grants),
                tuple(booking.grants),
            )
        )
    return moves


def apply_defragmentation(cluster: ClusterState, plan: DefragPlan) -> int:
    """Carry out a plan's moves on ``cluster`` in order; returns how many were made.

    The plan was made on a copy by the same forget/book steps, so each move fits; a
    move that no longer does (the cluster changed since) is put back, and the rest of
    the plan is dropped.
    """
    done = 0
    for move in plan.moves:
        old = cluster.forget(move.booking_id)
        try:
            cluster.rebook(old, move.to_node, move.grants)
        except HamiError:
            cluster.rebook(old)
            break
        done += 1
    return done
