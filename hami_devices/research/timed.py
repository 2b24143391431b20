"""A timed replay with departures: this project's protocol, not the FGD paper's.

The paper's protocol never releases anything.  This one replays the task
list in time (``simulate.timeline``): each task arrives at its
``creation_time`` and, if it was placed, leaves ``stretch`` x its own
duration later (``deletion_time - creation_time``); at one instant departures
go before arrivals.  Placement is the engine's (``Engine.try_place`` with the
policy by name, then ``book``; a departure is ``forget``), exactly as in
:func:`~hami_devices.research.replay.replay`.

The openb tasks live minutes while their arrivals spread over five months, so
on the whole cluster the peak concurrent demand is about 1 % of its GPUs.
Two knobs make the replay load a cluster: ``stretch`` lengthens every
lifetime, and ``scale`` keeps that fraction of the nodes (the same fraction
of each GPU model's nodes, chosen with the seed).  The defaults (100, 0.12)
put the peak concurrent GPU demand near the sampled cluster's capacity.

Two things may act on the cluster besides placement, each alone or both:

* ``defrag`` (``DefragOptions``): every ``check_every_s`` the defragmenter
  measures the fragmentation rate for the mix it learned from the arrivals so
  far and, above its threshold, makes a planned round of moves of preemptible
  tasks; and a task that finds no room asks it to make room (then is placed
  again).  A move is checkpointed (the task keeps its departure time); the work
  it would have lost without a checkpoint is reported beside it.
* ``predict``: the ``DemandForecast`` learns the arrivals; a task that takes
  part of a device is placed first without the whole free devices kept for the
  whole-device arrivals expected within ``reserve_horizon_s``, and only if it
  fits nowhere else with them.

The run reports, sampled every ``sample_every_s``: both fragmentation rates
(``scheduling.defrag.measure``: FGD's, for the trace's typical shapes, and the
operators') and the allocated GPU share; at the last arrival the same and the
unallocated GPU %; the tasks that could not be placed; the moves and what they
cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hami_devices.inventory import Inventory
from hami_devices.models import ResourceRequest
from hami_devices.research.replay import trace_mix
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.defrag.controller import Defragmenter, DefragOptions
from hami_devices.scheduling.defrag.forecast import DemandForecast, whole_devices
from hami_devices.scheduling.defrag.measure import measure
from hami_devices.scheduling.engine import Engine, Placement
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.simulate.openb import inventory_from_trace, share_milli
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
    arrivals: int
    placed: int
    failed: int
    failed_gpu_milli: int
    samples: Samples = field(repr=False)
    at_last_arrival: dict[str, float]
    wall_s: float
    defrag: dict[str, object] = field(default_factory=dict)

    @property
    def samples_t(self) -> list[float]:
        return self.samples.times

    @property
    def samples_fragmentation(self) -> list[float]:
        return self.samples.series.get("fgd", [])

    @property
    def samples_allocated(self) -> list[float]:
        return self.samples.series.get("allocated", [])

    @property
    def fragmentation_at_last_arrival(self) -> float:
        return self.at_last_arrival["fgd"]

    @property
    def moves(self) -> int:
        moves = self.defrag.get("moves", 0)
        return moves if isinstance(moves, int) else 0

    def summary(self) -> dict[str, object]:
        s = self.samples.series
        busy = np.array(s.get("allocated", [])) > 0

        def mean(name: str) -> float:
            values = np.array(s.get(name, []))[busy]
            return round(100 * float(values.mean()), 2) if values.size else 0.0

        return {
            "policy": self.policy,
            "seed": self.seed,
            "stretch": self.stretch,
            "scale": self.scale,
            "gpus": self.gpus,
            "arrivals": self.arrivals,
            "placed": self.placed,
            "failed": self.failed,
            "failed_gpu_share_pct": round(100 * self.failed_gpu_milli / max(1, self.gpus * 1000), 2),
            "fragmentation_rate_mean_pct": mean("fgd"),
            "fragmentation_rate_at_last_arrival_pct": round(100 * self.at_last_arrival["fgd"], 2),
            "operator_fragmentation_mean_pct": mean("operator"),
            "operator_fragmentation_at_last_arrival_pct": round(100 * self.at_last_arrival["operator"], 2),
            "allocated_gpu_pct_mean": round(100 * float(np.mean(s.get("allocated", [0.0]))), 2),
            "unallocated_gpu_pct_at_last_arrival": round(100 * (1 - self.at_last_arrival["allocated"]), 2),
            **self.defrag,
            "wall_s": round(self.wall_s, 1),
        }


def scaled_inventory(nodes: TraceNodes, scale: float, seed: int) -> Inventory:
    """``scale`` of each model's nodes (at least one each), chosen with the seed, as an inventory."""
    return inventory_from_trace(sample_nodes(nodes, scale, seed))


def _without(request: ResourceRequest, uuids: list[str]) -> ResourceRequest:
    parts = [p.model_copy(update={"exclude_uuids": [*p.exclude_uuids, *uuids]}) for p in request.parts]
    return request.model_copy(update={"parts": parts})


def replay_timed(
    nodes: TraceNodes,
    pods: TracePods,
    policy: str,
    seed: int = 42,
    *,
    stretch: float = DEFAULT_STRETCH,
    scale: float = DEFAULT_SCALE,
    defrag: DefragOptions | None = None,
    predict: bool = False,
    check_every_s: float = 3600.0,
    reserve_horizon_s: float = 3600.0,
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
    tally = {"allocated": 0, "failed_milli": 0, "placed": 0, "failed": 0, "seen": 0}
    started_at: dict[str, float] = {}
    forecast = DemandForecast()
    clock = {"now": first}
    defragmenter = None
    if defrag is not None:
        defragmenter = Defragmenter(
            cluster,
            forecast,
            defrag,
            runtime_of=lambda booking_id: clock["now"] - started_at.get(booking_id, clock["now"]),
            checkpointable=lambda _: True,
        )

    def snapshot() -> dict[str, float]:
        frag = measure(cluster, mix)
        return {"fgd": frag.fgd, "operator": frag.operator, "allocated": tally["allocated"] / capacity}

    def check(now: float) -> None:
        assert defragmenter is not None
        clock["now"] = now
        defragmenter.check(now, defragmenter.planning_rate())

    def place(request: ResourceRequest, now: float) -> Placement | None:
        if predict and whole_devices(request) == 0 and request.parts:
            kept = forecast.reserve(cluster, now, reserve_horizon_s)
            if kept:
                placement = engine.try_place(_without(request, kept))
                if placement is not None:
                    return placement
        placement = engine.try_place(request)
        if placement is None and defragmenter is not None and request.parts:
            clock["now"] = now
            if defragmenter.make_room(request, now):
                placement = engine.try_place(request)
        return placement

    def arrive(task: TimedTask, now: float) -> None:
        milli = share_milli(task.request)
        engine.observe(task.request)  # each arrival teaches the mix once, placed or not (its retries are what-ifs)
        placement = place(task.request, now)
        forecast.observe(task.request, now)
        if placement is None:
            tally["failed"] += 1
            tally["failed_milli"] += milli
        else:
            booking = engine.assume(placement)
            tally["placed"] += 1
            tally["allocated"] += milli
            started_at[booking.id] = now
            timeline.leave(now + (task.duration or 0.0), (booking.id, milli))
        tally["seen"] += 1
        if progress is not None and tally["seen"] % 256 == 0:
            progress(256)

    def depart(payload: tuple[str, int], now: float) -> None:
        booking_id, milli = payload
        cluster.forget(booking_id)
        started_at.pop(booking_id, None)
        tally["allocated"] -= milli

    timeline.every(sample_every_s, lambda now: samples.record(now, snapshot()))
    if defragmenter is not None and defrag is not None and defrag.on_threshold:
        timeline.every(check_every_s, check, first=first + check_every_s)
    timeline.run(tasks[-1].arrival if tasks else first, arrive, depart)
    end = snapshot() if tasks else {"fgd": 0.0, "operator": 0.0, "allocated": 0.0}
    return TimedResult(
        policy=policy,
        seed=seed,
        stretch=stretch,
        scale=scale,
        gpus=capacity // 1000,
        arrivals=len(tasks),
        placed=tally["placed"],
        failed=tally["failed"],
        failed_gpu_milli=tally["failed_milli"],
        samples=samples,
        at_last_arrival=end,
        wall_s=time.perf_counter() - started,
        defrag=_defrag_figures(defragmenter, predict),
    )


def _defrag_figures(defragmenter: Defragmenter | None, predict: bool) -> dict[str, object]:
    out: dict[str, object] = {"defrag": defragmenter is not None, "predict": predict}
    if defragmenter is None:
        return out
    st = defragmenter.stats
    lost = sum(m.lost_device_s for m in st.moves) / 3600
    lost_plain = sum(m.lost_without_checkpoint_s for m in st.moves) / 3600
    out.update(
        {
            "threshold": defragmenter.options.threshold,
            "rounds": st.rounds,
            "refusal_rounds": st.refusal_rounds,
            "rooms_made": st.rooms_made,
            "moves": len(st.moves),
            "moves_within_budget": defragmenter.budget.within(),
            "budget_share_per_hour": defragmenter.budget.share_per_hour,
            "worst_hour_share": round(defragmenter.budget.worst_share, 4),
            "gpu_hours_lost_to_moves": round(lost, 3),
            "gpu_hours_lost_to_moves_without_checkpoints": round(lost_plain, 3),
            "work_lost_per_move_gpu_hours": round(lost / max(len(st.moves), 1), 4),
            "work_lost_per_move_without_checkpoints_gpu_hours": round(lost_plain / max(len(st.moves), 1), 4),
            "solver": defragmenter.options.solver,
            "solver_s": round(st.solver_s, 2),
            "milp_plans": st.milp,
            "greedy_plans": st.greedy,
            "solver_timeouts": st.timeouts,
        }
    )
    return out
