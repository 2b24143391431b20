"""Replay one trace with one policy and seed, per the openb protocol.

Tasks arrive one at a time in :func:`~hami_devices.simulate.protocol.arrival_order`;
each is placed on a feasible node or dropped (its request still counts as
arrived); nothing departs.  After every arrival the allocated share of the
cluster's GPUs is recorded; the headline metric is the unallocated percentage
at the first arrival where the arrived GPU requests reach 100% of capacity.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.simulate.policies import PolicyContext, make_policy
from hami_devices.simulate.protocol import DEFAULT_INFLATION, arrival_order
from hami_devices.simulate.state import ReplayState, make_tasks
from hami_devices.simulate.trace import TraceNodes, TracePods

FloatArray = npt.NDArray[np.float64]


@dataclass
class ReplayResult:
    policy: str
    seed: int
    arrived: FloatArray  # arrived GPU requests / capacity, after each arrival
    allocated: FloatArray  # allocated GPU share / capacity, after each arrival
    placed: int
    failed: int
    wall_s: float
    unallocated_gpu_pct: float = field(init=False)

    def __post_init__(self) -> None:
        self.unallocated_gpu_pct = unallocated_at(self.arrived, self.allocated, 1.0)

    def to_json(self, points: int = 400) -> dict[str, object]:
        """The curve thinned to about ``points`` samples (always keeping the last)."""
        step = max(1, len(self.arrived) // points)
        idx = np.unique(np.r_[np.arange(0, len(self.arrived), step), len(self.arrived) - 1]).astype(int)
        idx = idx[idx >= 0]
        return {
            "policy": self.policy,
            "seed": self.seed,
            "unallocated_gpu_pct": round(self.unallocated_gpu_pct, 4),
            "placed": self.placed,
            "failed": self.failed,
            "wall_s": round(self.wall_s, 3),
            "arrived": [round(float(x), 5) for x in self.arrived[idx]],
            "allocated": [round(float(x), 5) for x in self.allocated[idx]],
        }


def unallocated_at(arrived: FloatArray, allocated: FloatArray, mark: float) -> float:
    """100 - allocated %, at the first arrival with arrived >= ``mark`` (the last one if never)."""
    if len(arrived) == 0:
        return 100.0
    hit = np.flatnonzero(arrived >= mark - 1e-12)
    i = int(hit[0]) if hit.size else len(arrived) - 1
    return float(100.0 * (1.0 - allocated[i]))


def typical_mix(pods: TracePods, coverage: float = 0.95) -> WorkloadMix:
    """FGD's typical shapes of the original (uninflated) task list.

    Each shape also carries the median host memory of its tasks (``Shape.mem_mib``),
    which only memory-aware policies look at.
    """
    keys = [
        (int(pods.cpu_milli[i]), int(pods.gpu_milli[i]), int(pods.num_gpu[i]), pods.spec[i]) for i in range(len(pods))
    ]
    mix = WorkloadMix.typical(keys, coverage)
    mems: dict[tuple[int, int, int, frozenset[str] | None], list[int]] = {}
    for key, mem in zip(keys, pods.memory_mib, strict=True):
        mems.setdefault(key, []).append(int(mem))
    shapes = tuple(
        replace(s, mem_mib=int(np.median(mems[(s.cpu_milli, s.gpu_milli, s.num_gpu, s.models)]))) for s in mix.shapes
    )
    return replace(mix, shapes=shapes)


def replay(
    nodes: TraceNodes,
    pods: TracePods,
    policy: str,
    seed: int,
    *,
    inflation: float = DEFAULT_INFLATION,
    stop_at: float | None = None,
    progress: Callable[[int], None] | None = None,
) -> ReplayResult:
    """Replay ``pods`` on ``nodes``; ``stop_at`` (a fraction of capacity) ends the run early.

    ``progress`` is called with the number of tasks handled since the last call.
    """
    started = time.perf_counter()
    capacity = nodes.gpu_capacity_milli
    order = arrival_order(pods, capacity, seed, inflation)
    tasks = make_tasks(pods, nodes.models)
    state = ReplayState(nodes)
    chooser = make_policy(policy)
    chooser.prepare(state, PolicyContext(seed=seed, mix=typical_mix(pods)))
    arrived_milli = 0
    arrived = np.zeros(len(order))
    allocated = np.zeros(len(order))
    placed = failed = 0
    count = 0
    for k, pod in enumerate(order):
        task = tasks[int(pod)]
        feasible = state.feasible(task)
        choice = chooser.choose(state, task, feasible) if feasible.any() else None
        if choice is None:
            failed += 1
        else:
            state.apply(choice[0], choice[1], task)
            placed += 1
        arrived_milli += task.request_milli
        arrived[k] = arrived_milli / capacity
        allocated[k] = state.allocated_milli / capacity
        count = k + 1
        if progress is not None and count % 256 == 0:
            progress(256)
        if stop_at is not None and arrived[k] >= stop_at:
            break
    if progress is not None and count % 256:
        progress(count % 256)
    return ReplayResult(
        policy=policy,
        seed=seed,
        arrived=arrived[:count],
        allocated=allocated[:count],
        placed=placed,
        failed=failed,
        wall_s=time.perf_counter() - started,
    )
