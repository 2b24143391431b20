"""What ``hami-devices defrag`` shows: fragmentation per node now, and the moves a round would make.

Nothing here plans on its own: the moves are the controller's (``build_instance``, then a ``planner``
(``milp`` or ``greedy``), then ``carry_out`` through the engine) on a scratch ``ClusterState``, and the rates are
``measure``'s.  Per node, FGD's rate is ``F_n / idle_n`` (the cluster's is their sums' ratio).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from hami_devices.scheduling.cluster import Booking, ClusterState
from hami_devices.scheduling.defrag.instance import Instance, build_instance
from hami_devices.scheduling.defrag.measure import Fragmentation, measure
from hami_devices.scheduling.defrag.moves import Moved, carry_out
from hami_devices.scheduling.defrag.plan import Solution, planner
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.scheduling.fragindex import FragmentationIndex

MILLI = 1000


@dataclass(frozen=True)
class NodeFragmentation:
    """One node's (or the cluster's) fragmentation now; rates are 0..1."""

    node: str
    devices: int  # healthy devices
    partly_used: int  # devices something holds that still have some free share
    unallocated: float  # free share over the devices' capacity
    fgd: float  # FGD's: the idle share the workload mix cannot use, over the idle share
    operator: float  # idle share on partly used devices over the idle share

    @property
    def partly_used_share(self) -> float:
        return self.partly_used / self.devices if self.devices else 0.0

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = asdict(self)
        out["partly_used_share"] = self.partly_used_share
        return out


def node_status(cluster: ClusterState, mix: WorkloadMix) -> tuple[NodeFragmentation, list[NodeFragmentation]]:
    """The cluster's fragmentation and each node's, for ``mix``."""
    index = FragmentationIndex(cluster, mix)
    index.sync()
    f_n = index.node_fragmentation()
    nodes = []
    for name, state in sorted(cluster.nodes.items()):
        rows = np.array([r for r in state.devices if cluster.healthy[r]], dtype=np.int64)
        nodes.append(_fragmentation(cluster, name, rows, float(f_n[cluster.node_row(name)])))
    rows = cluster.live_rows()
    rates = measure(cluster, mix)
    whole = _fragmentation(cluster, "(cluster)", rows, 0.0)
    return NodeFragmentation(whole.node, whole.devices, whole.partly_used, whole.unallocated, rates.fgd,
                             rates.operator), nodes


def _fragmentation(cluster: ClusterState, name: str, rows: np.ndarray, fragmented: float) -> NodeFragmentation:
    if rows.size == 0:
        return NodeFragmentation(name, 0, 0, 0.0, 0.0, 0.0)
    free = cluster.free_share_milli(rows)
    partly = (cluster.sharers[rows] > 0) & (free > 0)
    idle = float(free.sum())
    return NodeFragmentation(
        node=name,
        devices=int(rows.size),
        partly_used=int(partly.sum()),
        unallocated=idle / (MILLI * rows.size),
        fgd=fragmented / idle if idle > 0 else 0.0,
        operator=float(free[partly].sum()) / idle if idle > 0 else 0.0,
    )


@dataclass(frozen=True)
class PlannedMove:
    """One task moved: from where to where, and what it gains (thousandths of a device's share)."""

    allocation_id: str
    from_node: str
    from_uuids: tuple[str, ...]
    to_node: str
    to_uuids: tuple[str, ...]
    freed: float  # its part of the fall of its source node's F_n once the source device is empty
    cost: float  # the rise of its destination node's F_n
    fgd_points: float  # (freed - cost) over the idle share, in percentage points of FGD's rate

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    moves: list[PlannedMove]
    allowed: int  # the budget the solver planned within
    method: str  # milp, greedy or none
    before: Fragmentation
    after: Fragmentation
    moved: list[Moved]  # carry_out's records, in order (what apply repeats on the ledger)


def preemptible(booking: Booking) -> bool:
    return booking.preemptible


def plan_moves(
    cluster: ClusterState,
    mix: WorkloadMix,
    allowed: int,
    *,
    solver: Literal["milp", "greedy"] = "greedy",
    time_limit_s: float = 1.0,
    movable: Callable[[Booking], bool] = preemptible,
) -> Plan:
    """The moves a defragmentation round makes within ``allowed`` moves, made on ``cluster`` (a scratch
    state: the caller repeats them on the ledger, or drops it)."""
    before = measure(cluster, mix)
    index = FragmentationIndex(cluster, mix)
    inst = build_instance(cluster, index, movable)
    if allowed <= 0 or not inst.sources:
        return Plan([], allowed, "none", before, before, [])
    plan = planner(solver, time_limit_s)(inst, allowed)
    idle = float(cluster.free_share_milli(cluster.live_rows()).sum())
    priced = _priced(inst, plan, idle)
    moved = carry_out(Engine(cluster, "binpack"), inst, plan, 0.0, runtime_of=_zero, checkpointable=_no)
    moves = [
        PlannedMove(m.booking_id, m.before[0], m.before[1], m.after[0], m.after[1], *priced[m.booking_id])
        for m in moved
    ]
    return Plan(moves, allowed, plan.method, before, measure(cluster, mix), moved)


def _priced(inst: Instance, plan: Solution, idle: float) -> dict[str, tuple[float, float, float]]:
    cost = {(o.mover, o.dest): o.cost for o in inst.options}
    out: dict[str, tuple[float, float, float]] = {}
    for source in plan.emptied:
        movers = inst.by_source[source]
        for m in movers:
            freed = inst.gain[source] / len(movers)
            rise = cost.get((m, plan.dest.get(m, -1)), 0.0)
            points = 100 * (freed - rise) / idle if idle > 0 else 0.0
            out[inst.movers[m].booking_id] = (round(freed, 3), round(rise, 3), round(points, 3))
    return out


def _zero(_: str) -> float:
    return 0.0


def _no(_: str) -> bool:
    return False
