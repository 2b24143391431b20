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

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hami_devices.inventory import Inventory
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.scheduling.fragmentation import defragment, fragmentation
from hami_devices.simulate.openb import inventory_from_trace, share_milli
from hami_devices.simulate.replay import trace_mix
from hami_devices.simulate.timeline import Samples, Timeline, by_arrival, sample_nodes, trace_tasks
from hami_devices.simulate.trace import TraceNodes, TracePods
from hami_devices.workload import TimedTask

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
    """``scale`` of each model's nodes (at least one each), chosen with the seed, as an inventory."""
    return inventory_from_trace(sample_nodes(nodes, scale, seed))


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
    started = time.perf_counter()
    tasks = by_arrival(trace_tasks(pods, stretch=stretch))
    inventory = scaled_inventory(nodes, scale, seed)
    cluster = ClusterState.from_inventory(inventory)
    engine = Engine(cluster, policy)
    mix = measure_mix or trace_mix(pods)
    capacity = sum(len(n.devices) for n in inventory.nodes) * 1000
    first = tasks[0].arrival if tasks else 0.0
    timeline = Timeline(tasks, start=first)
    samples = Samples()
    tally = {"allocated": 0, "failed_milli": 0, "placed": 0, "failed": 0, "moves": 0, "rounds": 0, "seen": 0}

    def sample(now: float) -> None:
        samples.record(now, {"fragmentation": fragmentation(cluster, mix), "allocated": tally["allocated"] / capacity})

    def defrag_round(now: float) -> None:
        tally["moves"] += len(defragment(cluster, max_moves, policy).moves)
        tally["rounds"] += 1

    def arrive(task: TimedTask, now: float) -> None:
        milli = share_milli(task.request)
        placement = engine.try_place(task.request)
        if placement is None:
            tally["failed"] += 1
            tally["failed_milli"] += milli
        else:
            booking = engine.book(placement)
            tally["placed"] += 1
            tally["allocated"] += milli
            timeline.leave(now + (task.duration or 0.0), (booking.id, milli))
        tally["seen"] += 1
        if progress is not None and tally["seen"] % 256 == 0:
            progress(256)

    def depart(payload: tuple[str, int], now: float) -> None:
        booking_id, milli = payload
        cluster.forget(booking_id)
        tally["allocated"] -= milli

    timeline.every(sample_every_s, sample)
    if defrag_every_s:
        timeline.every(defrag_every_s, defrag_round, first=first + defrag_every_s)
    last_arrival = tasks[-1].arrival if tasks else first
    timeline.run(last_arrival, arrive, depart)
    series = samples.padded()
    return TimedResult(
        policy=policy,
        seed=seed,
        stretch=stretch,
        scale=scale,
        gpus=capacity // 1000,
        defrag_every_s=defrag_every_s,
        arrivals=len(tasks),
        placed=tally["placed"],
        failed=tally["failed"],
        failed_gpu_milli=tally["failed_milli"],
        moves=tally["moves"],
        defrag_rounds=tally["rounds"],
        samples_t=samples.times,
        samples_fragmentation=series.get("fragmentation", []),
        samples_allocated=series.get("allocated", []),
        unallocated_gpu_pct_at_last_arrival=100.0 * (1.0 - tally["allocated"] / capacity) if tasks else 100.0,
        fragmentation_at_last_arrival=fragmentation(cluster, mix) if tasks else 0.0,
        wall_s=time.perf_counter() - started,
    )
