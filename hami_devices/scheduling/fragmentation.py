"""Cluster fragmentation (FGD) and defragmentation plans over a ``ClusterState``.

A device's free share is the scarcer of its free memory and free cores, in
thousandths ("milli"), so the FGD math of ``scheduling.fgd`` applies to any
vendor.  ``fragmentation`` is the share of the cluster's idle device capacity
that the workload mix cannot use: ``sum_n F_n / sum_n idle_n`` (0..1).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from hami_devices.errors import HamiError
from hami_devices.models import ResourceRequest
from hami_devices.scheduling import fgd
from hami_devices.scheduling.cluster import ClusterState, IntArray

# Used when the caller gives no mix: a spread of fractional and whole-device tasks.
DEFAULT_MIX = fgd.WorkloadMix(
    (
        fgd.Shape(0, 100, 1, None, 0.10),
        fgd.Shape(0, 250, 1, None, 0.20),
        fgd.Shape(0, 500, 1, None, 0.20),
        fgd.Shape(0, 1000, 1, None, 0.30),
        fgd.Shape(0, 1000, 2, None, 0.10),
        fgd.Shape(0, 1000, 4, None, 0.06),
        fgd.Shape(0, 1000, 8, None, 0.04),
    )
)


def mix_from_requests(requests: list[ResourceRequest], coverage: float = 0.95) -> fgd.WorkloadMix:
    """Typical shapes of a list of requests (one shape per part; share from cores or 100%)."""

    def shapes() -> list[tuple[int, int, int, frozenset[str] | None]]:
        out = []
        for r in requests:
            for part in r.parts:
                share = part.cores if part.cores else int(part.memory_percent or 100)
                milli = 1000 if part.count > 1 else min(1000, max(1, share * 10))
                models = frozenset(part.models) if part.models else None
                out.append((r.host_cpu_milli, milli, part.count, models))
        return out

    return fgd.WorkloadMix.typical(shapes(), coverage)


def free_matrix(cluster: ClusterState, nodes: IntArray) -> tuple[IntArray, IntArray]:
    """``[len(nodes), G]`` free milli per device slot of the given node rows, and row -> slot."""
    live = cluster.live_rows()
    rows = live[np.isin(cluster.node[live], nodes)]
    rows = rows[np.argsort(cluster.node[rows], kind="stable")]
    node_of = cluster.node[rows]
    pos = np.searchsorted(nodes, node_of)
    first = np.searchsorted(node_of, nodes)
    slot = np.arange(rows.size) - first[pos]
    width = int(slot.max()) + 1 if rows.size else 1
    free = np.zeros((len(nodes), width), dtype=np.int64)
    free[pos, slot] = cluster.free_share_milli(rows)
    slot_of = np.full(cluster.size, -1, dtype=np.int64)
    slot_of[rows] = slot
    return free, slot_of


def node_fragmentation(cluster: ClusterState, mix: fgd.WorkloadMix | None = None) -> dict[str, float]:
    """``F_n`` (thousandths of a device) per node."""
    mix = mix or DEFAULT_MIX
    nodes = np.array(sorted(cluster.node_row(n) for n in cluster.nodes), dtype=np.int64)
    if nodes.size == 0:
        return {}
    free, _ = free_matrix(cluster, nodes)
    shape_ok = _shape_ok(cluster, nodes, mix)
    values = fgd.node_fragmentation(free, cluster.node_cpu_free[nodes], shape_ok, mix)
    return {cluster.node_name(int(n)): float(v) for n, v in zip(nodes, values, strict=True)}


def _shape_ok(cluster: ClusterState, nodes: IntArray, mix: fgd.WorkloadMix) -> fgd.BoolArray:
    """A shape with a model list fits a node only if the node has a device of such a model."""
    ok = np.ones((len(nodes), len(mix)), dtype=bool)
    for s, shape in enumerate(mix.shapes):
        if shape.models is None:
            continue
        ids = {cluster.model_id(m) for m in shape.models}
        for i, node in enumerate(nodes):
            rows = cluster.rows_of(cluster.node_name(int(node)))
            ok[i, s] = any(int(cluster.model[r]) in ids for r in rows)
    return ok


def fragmentation(cluster: ClusterState, workload_mix: fgd.WorkloadMix | None = None) -> float:
    """The cluster fragmentation rate: fragmented idle capacity / idle capacity (0 when nothing is idle)."""
    mix = workload_mix or DEFAULT_MIX
    per_node = node_fragmentation(cluster, mix)
    nodes = np.array(sorted(cluster.node_row(n) for n in cluster.nodes), dtype=np.int64)
    if nodes.size == 0:
        return 0.0
    free, _ = free_matrix(cluster, nodes)
    idle = float(free.sum())
    return float(sum(per_node.values()) / idle) if idle > 0 else 0.0


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


def plan_defragmentation(cluster: ClusterState, max_moves: int) -> DefragPlan:
    """Moves of preemptible placements that free the most whole devices within ``max_moves``.

    Greedy: devices whose every holder is preemptible are emptied cheapest
    first (fewest holders, least used); each holder is re-placed with the
    binpack policy on a scratch copy of the cluster, never onto a device being
    emptied nor onto a whole free device (which would defeat the purpose).
    A device is only counted when all its holders found a new home.  The
    cluster itself is not changed.
    """
    from hami_devices.scheduling.engine import Engine

    scratch = copy.deepcopy(cluster)
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
    emptying: set[int] = set()
    for row in candidates:
        ids = [i for i in holders[row] if i in scratch.bookings]
        if not ids or len(moves) + len(ids) > max_moves:
            continue
        trial = copy.deepcopy(scratch)
        emptying_now = emptying | {row}
        planned: list[Move] = []
        try:
            for bid in ids:
                old = trial.forget(bid)
                assert old.request is not None
                banned = [trial.info(r).uuid for r in emptying_now if trial.infos[r] is not None]
                banned += [trial.info(int(r)).uuid for r in trial.live_rows() if trial.sharers[r] == 0]
                request = old.request.model_copy(
                    update={
                        "parts": [
                            p.model_copy(update={"exclude_uuids": [*p.exclude_uuids, *banned]})
                            for p in old.request.parts
                        ]
                    }
                )
                placement = Engine(trial, "binpack").place(request)
                Engine(trial, "binpack").book(placement)
                planned.append(
                    Move(
                        bid,
                        old.node,
                        placement.node,
                        tuple(g.uuid for g in old.grants),
                        tuple(g.uuid for g in placement.grants),
                    )
                )
        except HamiError:
            continue
        scratch = trial
        emptying = emptying_now
        moves.extend(planned)
        freed.append(scratch.info(row).uuid)
    return DefragPlan(tuple(moves), tuple(freed), before, scratch.whole_free_devices())
