"""The defragmenter: when fragmentation crosses a threshold, or a task finds no room, a planned round of moves.

``Defragmenter(cluster, forecast, options, ...)`` is told what happens:

* ``check(now, rate)``: the FGD fragmentation rate now (the caller measures
  it); above ``options.threshold`` a round plans the moves that lower the
  planning mix's fragmentation most, within the budget;
* ``make_room(request, now)``: a task found no room; a round plans the fewest
  moves that empty a device it fits on (then the caller places it again).

A round builds the reduced instance (``instance``), solves it (``plan.planner``: the ``milp`` one, HiGHS
within ``time_limit_s`` from the ``[research]`` extra, the greedy plan when it runs out of time, or always
with ``solver="greedy"``), and carries the moves out (``moves``) through the
engine.  Only tasks that ``movable`` allows are moved (preemptible ones, and
the caller's queue rule: a move must not take a queue below its guarantee),
and never more than the ``MoveBudget`` allows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from hami_devices.errors import InvalidConfig
from hami_devices.models import ResourceRequest
from hami_devices.scheduling.cluster import Booking, ClusterState
from hami_devices.scheduling.defrag.budget import MoveBudget
from hami_devices.scheduling.defrag.forecast import DemandForecast
from hami_devices.scheduling.defrag.instance import build_instance
from hami_devices.scheduling.defrag.moves import Listener, Moved, carry_out
from hami_devices.scheduling.defrag.plan import PLANNER_NAMES, planner
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.fragindex import FragmentationIndex


@dataclass
class DefragOptions:
    threshold: float = 0.10  # FGD fragmentation rate above which a round runs
    share_per_hour: float = 0.05  # moves per hour, as a share of the running tasks
    max_per_hour: int | None = None
    time_limit_s: float = 1.0  # the solver's, per round
    solver: Literal["milp", "greedy"] = "milp"
    max_sources: int = 24
    dests_per_task: int = 8
    on_refusal: bool = True  # plan room for a task that found none
    on_threshold: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise InvalidConfig("threshold", f"a fragmentation rate within 0..1, not {self.threshold}")
        if self.time_limit_s <= 0:
            raise InvalidConfig("time_limit_s", "must be > 0")
        if self.solver not in PLANNER_NAMES:
            raise InvalidConfig("solver", f"'milp' or 'greedy', not {self.solver!r}")


@dataclass
class DefragStats:
    rounds: int = 0
    refusal_rounds: int = 0
    rooms_made: int = 0
    moves: list[Moved] = field(default_factory=list)
    solver_s: float = 0.0
    milp: int = 0
    greedy: int = 0
    timeouts: int = 0


def _never(_: str) -> bool:
    return False


def _no_runtime(_: str) -> float:
    return 0.0


def _preemptible(booking: Booking) -> bool:
    return booking.preemptible


class Defragmenter:
    def __init__(
        self,
        cluster: ClusterState,
        forecast: DemandForecast,
        options: DefragOptions | None = None,
        *,
        movable: Callable[[Booking], bool] = _preemptible,
        runtime_of: Callable[[str], float] = _no_runtime,
        checkpointable: Callable[[str], bool] = _never,
        emit: Listener | None = None,
    ) -> None:
        self.cluster = cluster
        self.forecast = forecast
        self.options = options or DefragOptions()
        self.budget = MoveBudget(self.options.share_per_hour, self.options.max_per_hour)
        # moves go to one device the plan names: the policy only breaks ties that cannot arise
        self.engine = Engine(cluster, "binpack")
        self.movable = movable
        self.runtime_of = runtime_of
        self.checkpointable = checkpointable
        self.emit = emit
        self.stats = DefragStats()
        self._index: FragmentationIndex | None = None
        self._mix_version = -1

    def _planning_index(self) -> FragmentationIndex:
        learner = self.forecast.learner
        if self._index is None or learner.version != self._mix_version:
            self._index = FragmentationIndex(self.cluster, learner.mix)
            self._mix_version = learner.version
        return self._index

    def planning_rate(self) -> float:
        """The FGD fragmentation rate for the mix learned so far (what ``check`` compares to the threshold)."""
        index = self._planning_index()
        index.sync()
        return index.fragmentation_rate()

    def check(self, now: float, rate: float) -> list[Moved]:
        if not self.options.on_threshold or rate <= self.options.threshold:
            return []
        return self._round(now, None)

    def make_room(self, request: ResourceRequest, now: float) -> bool:
        """Moves that empty a device ``request`` fits on; True when they were made."""
        if not self.options.on_refusal:
            return False
        self.stats.refusal_rounds += 1
        made = self._round(now, request)
        if made:
            self.stats.rooms_made += 1
        return bool(made)

    def _round(self, now: float, pending: ResourceRequest | None) -> list[Moved]:
        running = len(self.cluster.bookings)
        allowed = self.budget.allowed(now, running)
        if allowed <= 0:
            return []
        self.stats.rounds += 1
        inst = build_instance(
            self.cluster,
            self._planning_index(),
            self.movable,
            pending=pending,
            max_sources=self.options.max_sources,
            dests_per_task=self.options.dests_per_task,
        )
        plan = planner(self.options.solver, self.options.time_limit_s)(inst, allowed, pending=pending is not None)
        self.stats.solver_s += plan.solve_s
        self.stats.milp += plan.method == "milp"
        self.stats.greedy += plan.method == "greedy"
        self.stats.timeouts += plan.method == "greedy" and self.options.solver == "milp"
        if pending is not None and plan.pending_on is None:
            return []
        if pending is not None:  # only the device the pending task goes on: the rest waits for a threshold round
            plan.emptied = [plan.pending_on] if plan.pending_on is not None else []
        made = carry_out(
            self.engine,
            inst,
            plan,
            now,
            runtime_of=self.runtime_of,
            checkpointable=self.checkpointable,
            emit=self.emit,
        )
        self.budget.spend(now, len(made), running)
        self.stats.moves.extend(made)
        return made
