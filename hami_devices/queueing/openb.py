"""The openb trace as a timed two-queue workload: arrivals and deletions from the trace, load by copies.

A window ``[start, start + hours)`` of trace time is replayed: a task created in
the window arrives at ``creation - start`` and runs ``deletion - creation``
seconds; a task alive at ``start`` arrives at 0 with what was left of its run.
Its queue follows its qos: ``LS`` and ``Guaranteed`` tasks go to ``online``
(not interruptible), the rest (``BE``, ``Burstable``) to ``research``
(interruptible and recomputable).

On its own the trace loads the openb cluster to about 1% (a few dozen GPUs in
use at any time out of 6,212), so load is raised the standard way: each task is
submitted by ``copies`` tenants, copy ``k > 0`` shifted by a uniform draw in
``[0, jitter)`` seconds (tasks alive at the start stay at 0).  The draws are
part of the input stream, made when it is built; the loop sees each task only
when it arrives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hami_devices.inventory import Inventory
from hami_devices.queueing.workload import TimedTask
from hami_devices.simulate.openb import inventory_from_trace
from hami_devices.simulate.timeline import by_arrival, sample_nodes, trace_tasks
from hami_devices.simulate.trace import TraceNodes, TracePods

__all__ = ["ONLINE_QOS", "StreamFacts", "demand_cores", "facts", "inventory", "queue_of", "sample_nodes",
           "timed_stream"]

ONLINE_QOS = frozenset({"LS", "Guaranteed"})


@dataclass(frozen=True)
class StreamFacts:
    tasks: int
    per_queue: dict[str, int]
    peak_cores: dict[str, float]  # concurrent demand if every task ran at once on arrival (device-cores)
    mean_cores: dict[str, float]


def queue_of(pods: TracePods, index: int) -> str:
    qos = pods.qos[index] if pods.qos is not None else ""
    return "online" if qos in ONLINE_QOS else "research"


def timed_stream(
    pods: TracePods,
    *,
    start: float,
    hours: float,
    copies: Mapping[str, int],
    jitter: float,
    seed: int,
    min_duration: float = 1.0,
) -> list[TimedTask]:
    """The window's tasks (``simulate.timeline.trace_tasks``), each submitted by its queue's ``copies``."""
    rng = np.random.default_rng(seed)
    out: list[TimedTask] = []
    for base in trace_tasks(pods, window=(start, start + hours * 3600.0), min_duration=min_duration):
        queue = queue_of(pods, base.index)
        interruptible = queue == "research"
        for k in range(copies.get(queue, 1)):
            shift = 0.0 if base.alive or k == 0 else float(rng.uniform(0.0, jitter))
            request = base.request.model_copy(
                update={
                    "name": f"{base.request.name}#{k}",
                    "queue": queue,
                    "preemptible": interruptible,
                    "recomputable": True,
                }
            )
            out.append(TimedTask(request, base.arrival + shift, base.duration))
    return by_arrival(out)


def demand_cores(tasks: Sequence[TimedTask], queue: str, horizon: float, tick: float = 0.0) -> tuple[float, float]:
    """Peak and time-mean device-cores asked by ``queue``'s tasks within ``horizon``, each running its duration
    from the first tick at or after its arrival (from its arrival when ``tick`` is 0)."""
    edges: list[tuple[float, float]] = []
    for t in tasks:
        if t.request.queue != queue:
            continue
        cores = float(sum(p.count * p.cores for p in t.request.parts))
        if cores <= 0:
            continue
        start = math.ceil(t.arrival / tick) * tick if tick > 0 else t.arrival
        stop = horizon if t.duration is None else min(start + t.duration, horizon)
        edges.append((start, cores))
        edges.append((stop, -cores))
    if not edges:
        return 0.0, 0.0
    edges.sort()
    level = peak = area = 0.0
    last = 0.0
    for when, delta in edges:
        area += level * (when - last)
        last = when
        level += delta
        peak = max(peak, level)
    return peak, area / horizon if horizon > 0 else 0.0


def facts(tasks: Sequence[TimedTask], horizon: float, tick: float = 0.0) -> StreamFacts:
    per_queue: dict[str, int] = {}
    for t in tasks:
        per_queue[t.request.queue] = per_queue.get(t.request.queue, 0) + 1
    peaks, means = {}, {}
    for q in per_queue:
        peaks[q], means[q] = demand_cores(tasks, q, horizon, tick)
    return StreamFacts(len(tasks), per_queue, peaks, means)


def inventory(nodes: TraceNodes) -> Inventory:
    return inventory_from_trace(nodes)
