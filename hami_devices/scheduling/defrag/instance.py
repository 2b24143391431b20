"""The reduced instance a migration plan is chosen on: devices to empty, where their tasks could go, and why.

A **source** is a device every holder of which may move (preemptible, one
device each, the caller's ``movable`` allows it); emptying it *gains* the
fall in its node's FGD fragmentation ``F_n`` when the device is whole again
and its tasks' host CPU and memory come back (the planning mix, learned from
what arrived, never the future).  A **destination** is a device already in use
with room left; putting a task there *costs* the rise of that node's ``F_n``
(the fragmentation index's exact delta for that one placement).  A pending
request that found no room may name a share to make room for.  Which devices
a task may go to is the rule table's to say (``hami_devices.rules``, the
engine's own filter, model aliases included); this module only counts shares.

Only the ``max_sources`` best sources (gain per task moved) and each task's
``dests_per_task`` cheapest destinations enter, so the solver sees hundreds
of variables, not the cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hami_devices.models import ResourceRequest
from hami_devices.models.requests import RequestPart
from hami_devices.rules import MATCH_RULES, passing
from hami_devices.rules.columns import BoolArray, IntArray
from hami_devices.scheduling import fgd
from hami_devices.scheduling.cluster import Booking, ClusterState
from hami_devices.scheduling.fgd import MILLI
from hami_devices.scheduling.fragindex import FragmentationIndex


def share_on(part: RequestPart, mem_cap: IntArray | int) -> IntArray:
    """Thousandths of a device of ``mem_cap`` MiB that ``part`` takes there (the scarcer of memory and cores)."""
    return fgd.thousandths(mem_cap, part.cores * 10, part.memory_mib, part.memory_percent)


def single_part(request: ResourceRequest | None) -> RequestPart | None:
    """The request's one part when it asks for exactly one device, else None (it is not moved)."""
    if request is None or len(request.parts) != 1 or request.parts[0].count != 1:
        return None
    return request.parts[0]


def accepts(part: RequestPart, cluster: ClusterState, rows: IntArray) -> BoolArray:
    """Which of ``rows`` the part's selectors allow, as the rule table's ``MATCH`` rows say (the engine's own
    filter: model aliases, vendors, uuids, precision, NUMA)."""
    return passing(MATCH_RULES, cluster.view(rows), part)


@dataclass(frozen=True)
class Mover:
    booking_id: str
    row: int  # the device it holds now
    cpu: int
    mem: int
    part: RequestPart


@dataclass(frozen=True)
class Option:
    mover: int  # index into Instance.movers
    dest: int  # device row
    take: int  # thousandths it takes there
    cost: float  # rise of the destination node's F_n


@dataclass
class Instance:
    sources: list[int] = field(default_factory=list)
    gain: dict[int, float] = field(default_factory=dict)
    movers: list[Mover] = field(default_factory=list)
    by_source: dict[int, list[int]] = field(default_factory=dict)  # source row -> mover indices
    options: list[Option] = field(default_factory=list)
    free: dict[int, int] = field(default_factory=dict)  # destination row -> free thousandths
    node_cpu: dict[int, int] = field(default_factory=dict)  # destination node row -> free CPU
    node_mem: dict[int, int] = field(default_factory=dict)
    dest_node: dict[int, int] = field(default_factory=dict)  # destination row -> its node row
    pending_ok: list[int] = field(default_factory=list)  # sources the pending share fits on once emptied


def _holders(cluster: ClusterState) -> dict[int, list[Booking]]:
    out: dict[int, list[Booking]] = {}
    for booking in cluster.bookings.values():
        for grant in booking.grants:
            row = cluster.uuid_index.get(grant.uuid)
            if row is not None:
                out.setdefault(row, []).append(booking)
    return out


def _emptied_frag(index: FragmentationIndex, cluster: ClusterState, row: int, cpu: int, mem: int) -> float:
    """``F_n`` of ``row``'s node once ``row`` is whole again and ``cpu``/``mem`` came back to the node."""
    n = int(cluster.node[row])
    free = index.free[n].copy()
    free[index.slot_of[row]] = MILLI
    t = fgd.terms(free[None, :], index.need[n][None])
    cpu_free = np.array([cluster.node_cpu_free[n] + cpu])
    mem_free = np.array([cluster.node_mem_free[n] + mem])
    return float(fgd.frag(t.count_ge, t.small, t.total, cpu_free, mem_free, index.mix)[0])


def build_instance(
    cluster: ClusterState,
    index: FragmentationIndex,
    movable: Callable[[Booking], bool],
    *,
    pending: ResourceRequest | None = None,
    max_sources: int = 24,
    dests_per_task: int = 8,
) -> Instance:
    index.sync()
    holders = _holders(cluster)
    pending_part = single_part(pending)
    # where the pending part could go once a device is empty, by the rule table (selectors, then fit)
    pending_fits = cluster.fits_empty(pending_part, 0) if pending_part is not None else None
    candidates: list[tuple[float, int, list[Booking], float]] = []
    for row, held in holders.items():
        if not cluster.healthy[row] or not all(single_part(b.request) and movable(b) for b in held):
            continue
        n = int(cluster.node[row])
        cpu = sum(b.host_cpu_milli for b in held)
        mem = sum(b.host_memory_mib for b in held)
        gain = float(index.base[n]) - _emptied_frag(index, cluster, row, cpu, mem)
        fits_pending = False
        if pending is not None and pending_fits is not None and pending_fits[row]:
            fits_pending = (
                cluster.node_cpu_free[n] + cpu >= pending.host_cpu_milli
                and cluster.node_mem_free[n] + mem >= pending.host_memory_mib
            )
        if pending is not None and not fits_pending:
            continue
        candidates.append((gain / len(held), row, held, gain))
    candidates.sort(key=lambda c: (-c[0], c[1]))
    inst = Instance()
    for _, row, held, gain in candidates[:max_sources]:
        inst.sources.append(row)
        inst.gain[row] = gain
        if pending is not None:
            inst.pending_ok.append(row)
        inst.by_source[row] = []
        for b in held:
            part = single_part(b.request)
            assert part is not None
            inst.by_source[row].append(len(inst.movers))
            inst.movers.append(Mover(b.id, row, b.host_cpu_milli, b.host_memory_mib, part))
    _add_options(cluster, index, inst, dests_per_task)
    return inst


def _add_options(cluster: ClusterState, index: FragmentationIndex, inst: Instance, dests_per_task: int) -> None:
    rows = cluster.live_rows()
    free = cluster.free_share_milli(rows)
    split = np.array([cluster.info(int(r)).split_count for r in rows])
    room = (cluster.sharers[rows] > 0) & (free > 0) & cluster.healthy[rows] & (cluster.sharers[rows] < split)
    dests = rows[room].astype(np.int64)  # a source too, unless the plan empties it (the solver's rule)
    if dests.size == 0:
        return
    dest_free = cluster.free_share_milli(dests)
    for m, mover in enumerate(inst.movers):
        take = share_on(mover.part, cluster.mem_cap[dests])
        nodes = cluster.node[dests]
        ok = (
            (dests != mover.row)
            & (take <= dest_free)
            & (cluster.node_cpu_free[nodes] >= mover.cpu)
            & (cluster.node_mem_free[nodes] >= mover.mem)
            & accepts(mover.part, cluster, dests)
        )
        if not ok.any():
            continue
        rows_ok, take_ok = dests[ok], take[ok]
        cost = index.share_deltas(rows_ok, take_ok, mover.cpu, mover.mem)
        best = np.argsort(cost, kind="stable")[:dests_per_task]
        for i in best:
            if not np.isfinite(cost[i]):
                continue
            r = int(rows_ok[i])
            inst.options.append(Option(m, r, int(take_ok[i]), float(cost[i])))
            inst.free[r] = int(cluster.free_share_milli(np.array([r]))[0])
            nrow = int(cluster.node[r])
            inst.dest_node[r] = nrow
            inst.node_cpu[nrow] = int(cluster.node_cpu_free[nrow])
            inst.node_mem[nrow] = int(cluster.node_mem_free[nrow])
