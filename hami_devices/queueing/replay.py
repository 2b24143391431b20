"""Replaying a timed workload through an ``AdmissionLoop``, with the figures per queue.

Time is simulated: tasks are submitted at their arrival, finish ``duration``
seconds after they (last) started, and the loop ticks every ``tick`` seconds (a
task arriving between ticks is considered at the next one).  Nothing here
decides anything: the loop does, and it sees each task only when it arrives.

Figures are kept per *group* (default: the task's queue; a replay of a loop
with other queues, e.g. a single FIFO, can group by a label), so that one
yardstick, the groups' ``guarantees``, measures every policy:

* waiting time: first admission minus arrival, p50 and p99 (a task still waiting
  at the end counts with its wait so far);
* a **guarantee violation**: a task still waiting at the end of a tick although
  it fits within its group's guarantee (the group's usage, plus the tasks of the
  group waiting ahead of it that fit too, plus it, within the guarantee on every
  guaranteed resource); each task counts once;
* borrowed share: the group's ``device-cores`` above its guarantee over the
  cluster's, through time;
* utilisation: ``device-cores`` granted over the cluster's, time-weighted over
  ``[0, horizon]``;
* evictions and the device-hours they threw away.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hami_devices.queueing.events import Event, EventKind
from hami_devices.queueing.loop import AdmissionLoop
from hami_devices.queueing.spec import BASE_RESOURCES
from hami_devices.queueing.tasks import Task
from hami_devices.queueing.workload import TimedTask
from hami_devices.simulate.timeline import Samples, Timeline, by_arrival

CORES = BASE_RESOURCES.index("device-cores")


@dataclass
class GroupFigures:
    name: str
    guarantee: dict[str, int]
    submitted: int = 0
    admitted: int = 0
    waiting_at_end: int = 0
    waits: list[float] = field(default_factory=list)
    evictions: int = 0
    lost_device_seconds: float = 0.0
    violations: int = 0
    borrowed_integral: float = 0.0
    borrowed_max: float = 0.0
    usage_integral: float = 0.0
    device_seconds: float = 0.0  # devices held (cores / 100) x seconds

    def to_dict(self, horizon: float) -> dict[str, Any]:
        waits = np.array(self.waits) if self.waits else np.zeros(1)
        return {
            "guarantee": self.guarantee,
            "submitted": self.submitted,
            "admitted": self.admitted,
            "waiting_at_end": self.waiting_at_end,
            "wait_p50_s": round(float(np.percentile(waits, 50)), 3),
            "wait_p99_s": round(float(np.percentile(waits, 99)), 3),
            "evictions": self.evictions,
            "lost_device_hours": round(self.lost_device_seconds / 3600.0, 3),
            "guarantee_violations": self.violations,
            "borrowed_share_mean": round(self.borrowed_integral / horizon, 4) if horizon > 0 else 0.0,
            "borrowed_share_max": round(self.borrowed_max, 4),
            "usage_share_mean": round(self.usage_integral / horizon, 4) if horizon > 0 else 0.0,
            "device_hours": round(self.device_seconds / 3600.0, 3),
        }


@dataclass
class ReplayReport:
    groups: dict[str, GroupFigures]
    horizon: float
    tick: float
    utilisation: float
    times: list[float]
    usage: dict[str, list[float]]  # group -> device-cores share of the cluster at each of ``times``
    evictions: list[Event]
    decisions_s: list[float]
    wall_s: float
    counters: dict[str, int]
    refused: dict[str, int] = field(default_factory=dict)  # queue -> arrivals a closed or draining queue refused

    def decision_ms(self, q: float) -> float:
        return float(np.percentile(np.array(self.decisions_s) * 1000.0, q)) if self.decisions_s else 0.0

    def to_dict(self, *, series: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "horizon_s": self.horizon,
            "tick_s": self.tick,
            "utilisation": round(self.utilisation, 4),
            "evictions": len(self.evictions),
            "lost_device_hours": round(
                sum(float(e.data.get("lost_device_seconds", 0.0)) for e in self.evictions) / 3600, 3
            ),
            "guarantee_violations": sum(g.violations for g in self.groups.values()),
            "decisions": len(self.decisions_s),
            "decision_p50_ms": round(self.decision_ms(50), 3),
            "decision_p99_ms": round(self.decision_ms(99), 3),
            "wall_s": round(self.wall_s, 2),
            "counters": self.counters,
            "refused_submissions": self.refused,
            "queues": {name: g.to_dict(self.horizon) for name, g in self.groups.items()},
        }
        if series:
            out["series"] = {"times": self.times, "usage": self.usage}
        return out


class _Waiting:
    """One group's waiting tasks in queue order, with their charge on the guaranteed resources."""

    def __init__(self, guarded: np.ndarray) -> None:
        self.guarded = np.flatnonzero(guarded)
        self.keys: list[tuple[int, float, int]] = []  # sorted; may hold keys of tasks gone since
        self.items: dict[tuple[int, float, int], tuple[Task, tuple[float, ...]]] = {}

    def __bool__(self) -> bool:
        return bool(self.items)

    def add(self, task: Task) -> None:
        key = task.order_key()
        bisect.insort(self.keys, key)
        self.items[key] = (task, tuple(float(task.estimate[i]) for i in self.guarded))

    def discard(self, task: Task) -> None:
        self.items.pop(task.order_key(), None)
        if len(self.keys) > 64 and len(self.keys) > 2 * len(self.items):
            self.keys = sorted(self.items)

    def within(self, room: tuple[float, ...]) -> list[Task]:
        """The waiting tasks that fit within ``room``, taken in order (one that does not fit is passed over)."""
        left = list(room)
        out: list[Task] = []
        for key in self.keys:
            item = self.items.get(key)
            if item is None:
                continue
            task, amount = item
            if any(a > 0 for a in amount) and all(a <= r + 1e-9 for a, r in zip(amount, left, strict=True)):
                left = [r - a for a, r in zip(amount, left, strict=True)]
                out.append(task)
                if all(r <= 1e-9 for r in left):
                    break
        return out


def replay(
    loop: AdmissionLoop,
    workload: Sequence[TimedTask],
    *,
    tick: float = 10.0,
    horizon: float | None = None,
    group_of: Callable[[Task], str] | None = None,
    guarantees: Mapping[str, Mapping[str, int]] | None = None,
    progress: bool = False,
    samples: int = 2000,
) -> ReplayReport:
    """Run ``workload`` through ``loop`` until ``horizon`` (default: one tick after the last arrival)."""
    if tick <= 0:
        raise ValueError("tick must be > 0")
    tasks = by_arrival(workload)
    end = horizon if horizon is not None else (tasks[-1].arrival + tick if tasks else 0.0)
    tree, res = loop.tree, loop.resources
    if group_of is None:

        def group_of(task: Task) -> str:
            return tree.nodes[task.queue].name

    if guarantees is None:
        guarantees = {n.name: dict(n.spec.guarantee) for n in tree if n.leaf}
    base = len(BASE_RESOURCES)
    g_vec = {name: np.array([float(g.get(k, 0)) for k in BASE_RESOURCES]) for name, g in guarantees.items()}
    g_mask = {name: np.array([k in g for k in BASE_RESOURCES]) for name, g in guarantees.items()}
    groups: dict[str, GroupFigures] = {}
    usage: dict[str, np.ndarray] = {}
    capacity = res.capacity()[CORES]

    def figures(name: str) -> GroupFigures:
        if name not in groups:
            groups[name] = GroupFigures(name, {k: int(v) for k, v in guarantees.get(name, {}).items()})
            usage[name] = np.zeros(base)
        return groups[name]

    durations = {t.name: t.duration for t in tasks}
    waiting: dict[str, _Waiting] = {}  # group -> its waiting tasks
    violated: set[str] = set()
    evictions: list[Event] = []
    timeline = Timeline(tasks)
    refused: dict[str, int] = {}

    def on_event(event: Event) -> None:
        # Usage follows the loop's decisions; finishes are the replay's own (below).
        task = loop.tasks.get(event.task)
        if task is None:
            return
        name = group_of(task)
        fig = figures(name)
        if event.kind == EventKind.ADMITTED:
            if name in waiting:
                waiting[name].discard(task)
            usage[name] += task.charge[:base]
            duration = durations.get(task.name)
            if duration is not None:
                timeline.leave(event.time + duration, (task.name, event.time))
        elif event.kind == EventKind.REQUEUED and name in waiting:
            waiting[name].add(task)
        elif event.kind == EventKind.EVICTED:
            usage[name] -= task.charge[:base]
            fig.evictions += 1
            fig.lost_device_seconds += float(event.data.get("lost_device_seconds", 0.0))
            evictions.append(event)

    def advance(before: float, now: float) -> None:
        span = now - before
        used = 0.0
        for name, fig in groups.items():
            cores = usage[name][CORES]
            used += cores
            fig.usage_integral += span * cores / capacity
            fig.device_seconds += span * cores / 100.0
            borrowed = max(cores - g_vec.get(name, np.zeros(base))[CORES], 0.0) / capacity
            fig.borrowed_integral += span * borrowed
            fig.borrowed_max = max(fig.borrowed_max, borrowed)
        totals["utilisation"] += span * used / capacity

    def depart(payload: tuple[str, float], now: float) -> None:
        name, stamp = payload
        task = loop.tasks[name]
        if task.state == "running" and task.started_at == stamp:  # not evicted (and restarted) since
            usage[group_of(task)] -= task.charge[:base]
            loop.finish(name, now=now)

    def arrive(timed: TimedTask, now: float) -> None:
        if tree.switches.refuses(tree.leaf(timed.request.queue).index) is not None:  # closed or draining
            refused[timed.request.queue] = refused.get(timed.request.queue, 0) + 1
            if bar is not None:
                bar.update(1)
            return
        task = loop.submit(timed.request, now=now)
        gname = group_of(task)
        figures(gname).submitted += 1
        if gname in g_vec:
            if gname not in waiting:
                waiting[gname] = _Waiting(g_mask[gname])
            waiting[gname].add(task)
        if bar is not None:
            bar.update(1)

    def tick_now(now: float) -> None:
        loop.tick(now)
        for gname, tasks_waiting in waiting.items():
            if tasks_waiting:
                mask = g_mask[gname]
                room = tuple((g_vec[gname][mask] - usage[gname][mask]).tolist())
                for task in tasks_waiting.within(room):
                    if task.name not in violated:
                        violated.add(task.name)
                        groups[gname].violations += 1

    def sample(now: float) -> None:
        recorded.record(now, {name: float(usage[name][CORES] / capacity) for name in groups})

    unsubscribe = loop.subscribe(on_event)
    recorded = Samples()
    totals = {"utilisation": 0.0}
    started = time.perf_counter()
    timeline.every(tick, tick_now, before_arrivals=False)
    timeline.every(max(end / samples, tick) if end > 0 else tick, sample, before_arrivals=False, driving=False)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), unit="task", desc="replay", leave=False)
    try:
        timeline.run(end, arrive, depart, advance)
    finally:
        unsubscribe()
        if bar is not None:
            bar.close()
    for task in loop.tasks.values():
        fig = figures(group_of(task))
        if task.first_started_at is not None:
            fig.admitted += 1
            fig.waits.append(task.first_started_at - task.submitted_at)
        elif task.state == "pending":
            fig.waiting_at_end += 1
            fig.waits.append(end - task.submitted_at)  # still waiting: counted at its wait so far
    return ReplayReport(
        groups=groups,
        horizon=end,
        tick=tick,
        utilisation=totals["utilisation"] / end if end > 0 else 0.0,
        times=recorded.times,
        usage=recorded.padded(),  # series start when a group first appears
        evictions=evictions,
        decisions_s=list(loop.timings or []),
        wall_s=time.perf_counter() - started,
        counters=dict(vars(loop.counters)),
        refused=refused,
    )
