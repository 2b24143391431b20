"""A timed replay with departures: this project's protocol, not the FGD paper's.

The paper's protocol never releases anything.  This one replays the task
list in time: each task arrives at its ``creation_time`` and, if it was
placed, leaves ``stretch`` x its own duration later (``deletion_time -
creation_time``); at one instant departures go before arrivals.  Placement is
the engine's (``Engine.try_place`` with the policy by name, then ``book``;
a departure is ``forget``), exactly as in :func:`~hami_devices.simulate.replay.replay`.

The openb tasks live minutes while their arrivals spread over five months, so
on the whole cluster the peak concurrent demand is about 1 % of its GPUs.
Two knobs make the replay load a cluster: ``stretch`` lengthens every
lifetime, and ``scale`` keeps that fraction of the nodes (the same fraction
of each GPU model's nodes, chosen with the seed).  The defaults (100, 0.12)
put the peak concurrent GPU demand near the sampled cluster's capacity.

Every ``defrag_every_s`` of trace time, optionally, a defragmentation round
plans moves of preemptible tasks (``plan_defragmentation``, at most
``max_moves``) and carries them out.  The run reports, sampled every
``sample_every_s``: the cluster fragmentation rate (FGD's definition, for the
trace's typical shapes) and the allocated GPU share; at the last arrival the
unallocated GPU %; the tasks that could not be placed; and the moves made.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hami_devices.inventory import Inventory
from hami_devices.models import ResourceRequest
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.scheduling.fragmentation import defragment, fragmentation
from hami_devices.simulate.openb import inventory_from_trace, request_for, share_milli
from hami_devices.simulate.replay import trace_mix
from hami_devices.simulate.trace import TraceNodes, TracePods

DEFAULT_STRETCH = 100.0
DEFAULT_SCALE = 0.12


@dataclass
class TimedResult:
    policy: str
    seed: int
    stretch: float
    scale: float
    gpus: int
    defrag_every_s: float | None
    arrivals: int
    placed: int
    failed: int
    failed_gpu_milli: int
    moves: int
    defrag_rounds: int
    samples_t: list[float] = field(repr=False)
    samples_fragmentation: list[float] = field(repr=False)
    samples_allocated: list[float] = field(repr=False)
    unallocated_gpu_pct_at_last_arrival: float
    fragmentation_at_last_arrival: float
    wall_s: float

    def summary(self) -> dict[str, object]:
        busy = [f for f, a in zip(self.samples_fragmentation, self.samples_allocated, strict=True) if a > 0]
        return {
            "policy": self.policy,
            "seed": self.seed,
            "stretch": self.stretch,
            "scale": self.scale,
            "gpus": self.gpus,
            "defrag_every_s": self.defrag_every_s,
            "arrivals": self.arrivals,
            "placed": self.placed,
            "failed": self.failed,
            "failed_gpu_share_pct": round(100 * self.failed_gpu_milli / max(1, self.gpus * 1000), 2),
            "fragmentation_rate_mean_pct": round(100 * float(np.mean(busy)), 2) if busy else 0.0,
            "fragmentation_rate_at_last_arrival_pct": round(100 * self.fragmentation_at_last_arrival, 2),
            "allocated_gpu_pct_mean": round(100 * float(np.mean(self.samples_allocated)), 2),
            "unallocated_gpu_pct_at_last_arrival": round(self.unallocated_gpu_pct_at_last_arrival, 2),
            "moves": self.moves,
            "defrag_rounds": self.defrag_rounds,
            "wall_s": round(self.wall_s, 1),
        }


def scaled_inventory(nodes: TraceNodes, scale: float, seed: int) -> Inventory:
    """``scale`` of each model's nodes (at least one each), chosen with the seed."""
    rng = np.random.default_rng([seed, 1337])
    keep: list[int] = []
    for model in np.unique(nodes.model_idx):
        members = np.flatnonzero(nodes.model_idx == model)
        count = max(1, round(scale * members.size))
        keep.extend(int(i) for i in rng.choice(members, size=count, replace=False))
    full = inventory_from_trace(nodes)
    return Inventory(nodes=[full.nodes[i] for i in sorted(keep)], source=full.source)


def replay_timed(
    nodes: TraceNodes,
    pods: TracePods,
    policy: str,
    seed: int = 42,
    *,
    stretch: float = DEFAULT_STRETCH,
    scale: float = DEFAULT_SCALE,
    defrag_every_s: float | None = None,
    max_moves: int = 20,
    sample_every_s: float = 3600.0,
    measure_mix: WorkloadMix | None = None,
    progress: Callable[[int], None] | None = None,
) -> TimedResult:
    if pods.creation is None or pods.deletion is None:
        raise ValueError("the task list has no creation/deletion times (the multigpu variants have none)")
    started = time.perf_counter()
    inventory = scaled_inventory(nodes, scale, seed)
    cluster = ClusterState.from_inventory(inventory)
    engine = Engine(cluster, policy)
    mix = measure_mix or trace_mix(pods)
    capacity = sum(len(n.devices) for n in inventory.nodes) * 1000
    order = np.lexsort((np.array(pods.names), pods.creation))
    last_arrival = float(pods.creation.max())
    departures: list[tuple[float, str, int]] = []  # (time, booking id, milli)
    allocated = failed_milli = placed = failed = moves = rounds = 0
    next_defrag = float(pods.creation.min()) + defrag_every_s if defrag_every_s else float("inf")
    next_sample = float(pods.creation.min())
    samples_t: list[float] = []
    samples_f: list[float] = []
    samples_a: list[float] = []
    frag_end = 0.0
    unallocated_end = 100.0

    def sample(t: float) -> None:
        samples_t.append(t)
        samples_f.append(fragmentation(cluster, mix))
        samples_a.append(allocated / capacity)

    def depart_until(t: float) -> None:
        nonlocal allocated
        while departures and departures[0][0] <= t:
            _, booking_id, milli = heapq.heappop(departures)
            cluster.forget(booking_id)
            allocated -= milli

    for count, i in enumerate(order.tolist(), start=1):
        now = float(pods.creation[i])
        while min(next_sample, next_defrag) <= now:
            if next_sample <= next_defrag:
                depart_until(next_sample)
                sample(next_sample)
                next_sample += sample_every_s
            else:
                depart_until(next_defrag)
                moves += len(defragment(cluster, max_moves, policy).moves)
                rounds += 1
                next_defrag += defrag_every_s or float("inf")
        depart_until(now)
        request: ResourceRequest = request_for(pods, i)
        milli = share_milli(request)
        placement = engine.try_place(request)
        if placement is None:
            failed += 1
            failed_milli += milli
        else:
            booking = engine.book(placement)
            placed += 1
            allocated += milli
            leave = now + stretch * float(pods.deletion[i] - pods.creation[i])
            heapq.heappush(departures, (leave, booking.id, milli))
        if now >= last_arrival:
            frag_end = fragmentation(cluster, mix)
            unallocated_end = 100.0 * (1.0 - allocated / capacity)
        if progress is not None and count % 256 == 0:
            progress(256)
    return TimedResult(
        policy=policy,
        seed=seed,
        stretch=stretch,
        scale=scale,
        gpus=capacity // 1000,
        defrag_every_s=defrag_every_s,
        arrivals=len(order),
        placed=placed,
        failed=failed,
        failed_gpu_milli=failed_milli,
        moves=moves,
        defrag_rounds=rounds,
        samples_t=samples_t,
        samples_fragmentation=samples_f,
        samples_allocated=samples_a,
        unallocated_gpu_pct_at_last_arrival=unallocated_end,
        fragmentation_at_last_arrival=frag_end,
        wall_s=time.perf_counter() - started,
    )
