"""The one timed replay of the openb trace: its tasks in time, its clock, and its figures over time.

Two replays drive it: ``research.timed`` places each arrival with the engine,
and ``queueing.replay`` submits each to an ``AdmissionLoop``.  What they share
is here, so both read the trace and order events the same way:

* **Tasks** (:func:`trace_tasks`): each row of a pod list with creation and
  deletion times becomes a ``TimedTask`` (the request ``simulate.openb`` makes
  of it) arriving at its ``creation`` and running ``stretch`` x its lifetime;
  given a ``window``, only the tasks alive in it, times counted from its start,
  a task alive at the start arriving at 0 with what was left of its run.
  Ties in arrival keep trace order.
* **Nodes** (:func:`sample_nodes`): ``scale`` of each GPU model's nodes, the
  first ones or, given a seed, a seeded choice.
* **The clock** (:class:`Timeline`): time jumps from event to event; at one
  instant departures go first, then the timers that run before arrivals (a
  sample or a defragmentation round sees the cluster as the arrivals find it),
  then the arrivals, then the timers that run after them (an admission loop's
  tick considers what just arrived).  A *driving* timer fires at its exact
  times; a *lazy* one at the first event at or after its time.
* **Figures** (:class:`Samples`): named series sampled at the same times.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hami_devices.simulate.openb import request_for
from hami_devices.simulate.trace import TraceNodes, TracePods
from hami_devices.workload import TimedTask

INF = float("inf")


def sample_nodes(nodes: TraceNodes, scale: float, seed: int | None = None) -> TraceNodes:
    """``scale`` of each GPU model's nodes (at least one each): the first ones, or a choice made with ``seed``."""
    if scale >= 1.0 and seed is None:
        return nodes
    rng = np.random.default_rng([seed, 1337]) if seed is not None else None
    keep: list[int] = []
    for model in np.unique(nodes.model_idx):
        members = np.flatnonzero(nodes.model_idx == model)
        count = max(1, round(scale * members.size))
        chosen = members[:count] if rng is None else rng.choice(members, size=count, replace=False)
        keep.extend(int(i) for i in chosen)
    keep.sort()
    idx = np.array(keep, dtype=np.int64)
    return TraceNodes(
        names=tuple(nodes.names[i] for i in keep),
        cpu_milli=nodes.cpu_milli[idx],
        memory_mib=nodes.memory_mib[idx],
        gpus=nodes.gpus[idx],
        model_idx=nodes.model_idx[idx],
        models=nodes.models,
    )


@dataclass(frozen=True)
class TraceTask(TimedTask):
    """A task of the trace: ``index`` is its row, ``alive`` that it was running when the window opened."""

    index: int = -1
    alive: bool = False


def trace_tasks(
    pods: TracePods,
    *,
    stretch: float = 1.0,
    window: tuple[float, float] | None = None,
    min_duration: float = 0.0,
) -> list[TraceTask]:
    """The timed tasks of ``pods`` in trace order (sort them by arrival, stably, to replay them)."""
    if pods.creation is None or pods.deletion is None:
        raise ValueError("the task list has no creation/deletion times (the multigpu variants have none)")
    start, end = window if window is not None else (-INF, INF)
    offset = start if window is not None else 0.0
    out: list[TraceTask] = []
    for i in range(len(pods)):
        created, deleted = float(pods.creation[i]), float(pods.deletion[i])
        if deleted <= start or created >= end:
            continue
        alive = created < start
        lifetime = deleted - max(created, start)
        out.append(
            TraceTask(
                request_for(pods, i),
                0.0 if alive else created - offset,
                max(stretch * lifetime, min_duration),
                index=i,
                alive=alive,
            )
        )
    return out


def by_arrival(tasks: Iterable[TimedTask]) -> list[TimedTask]:
    """Tasks in arrival order; ties keep the order given."""
    return sorted(tasks, key=lambda t: t.arrival)


@dataclass
class Timer:
    period: float
    action: Callable[[float], None]
    next_at: float
    before_arrivals: bool
    driving: bool


class Timeline:
    """Arrivals, departures and timers in one order (see the module doc); the drivers say what each does."""

    def __init__(self, arrivals: Sequence[TimedTask], start: float = 0.0) -> None:
        self.arrivals = list(arrivals)
        self.now = start
        self._next = 0
        self._departures: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()
        self._timers: list[Timer] = []

    def leave(self, at: float, payload: Any) -> None:
        """``payload`` departs at ``at`` (ties in time: first scheduled, first gone)."""
        heapq.heappush(self._departures, (at, next(self._seq), payload))

    def every(
        self,
        period: float,
        action: Callable[[float], None],
        *,
        first: float | None = None,
        before_arrivals: bool = True,
        driving: bool = True,
    ) -> None:
        """Call ``action(now)`` every ``period`` seconds from ``first`` (default: now)."""
        if period <= 0:
            raise ValueError("a timer's period must be > 0")
        self._timers.append(Timer(period, action, self.now if first is None else first, before_arrivals, driving))

    @property
    def pending_arrivals(self) -> int:
        return len(self.arrivals) - self._next

    def _next_time(self) -> float:
        t = self.arrivals[self._next].arrival if self._next < len(self.arrivals) else INF
        if self._departures:
            t = min(t, self._departures[0][0])
        for timer in self._timers:
            if timer.driving:
                t = min(t, timer.next_at)
        return t

    def _fire(self, before_arrivals: bool, driving: bool) -> None:
        for timer in self._timers:
            if timer.before_arrivals == before_arrivals and timer.driving == driving and timer.next_at <= self.now:
                timer.action(self.now)
                # a driving timer fires at its times; a lazy one counts its period from when it fired
                timer.next_at = (timer.next_at if driving else self.now) + timer.period

    def run(
        self,
        until: float,
        on_arrival: Callable[[TimedTask, float], None],
        on_departure: Callable[[Any, float], None],
        on_advance: Callable[[float, float], None] | None = None,
    ) -> None:
        """Replay every event up to ``until`` (inclusive for arrivals); ``on_advance(from, to)`` sees time pass."""
        while True:
            t_next = self._next_time()
            if t_next > until:
                t_next = until
            if on_advance is not None and t_next > self.now:
                on_advance(self.now, t_next)
            self.now = t_next
            arriving = self._next < len(self.arrivals) and self.arrivals[self._next].arrival <= until
            if self.now >= until and not arriving:
                return
            while self._departures and self._departures[0][0] <= self.now:
                _, _, payload = heapq.heappop(self._departures)
                on_departure(payload, self.now)
            self._fire(before_arrivals=True, driving=True)
            while self._next < len(self.arrivals) and self.arrivals[self._next].arrival <= self.now:
                on_arrival(self.arrivals[self._next], self.now)
                self._next += 1
            self._fire(before_arrivals=False, driving=True)
            self._fire(before_arrivals=False, driving=False)


@dataclass
class Samples:
    """Named series sampled at the same times; a series that starts late is padded with zeros in front."""

    times: list[float] = field(default_factory=list)
    series: dict[str, list[float]] = field(default_factory=dict)

    def record(self, when: float, values: dict[str, float]) -> None:
        self.times.append(when)
        for name, value in values.items():
            self.series.setdefault(name, []).append(float(value))

    def padded(self) -> dict[str, list[float]]:
        return {name: [0.0] * (len(self.times) - len(v)) + v for name, v in self.series.items()}
