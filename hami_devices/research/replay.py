"""Replay one trace with one policy and seed, per the openb protocol, through the scoring engine.

The trace's nodes become a ``ClusterState`` and its tasks ``ResourceRequest``s
(``simulate.openb``); each arrival, in
:func:`~hami_devices.simulate.protocol.arrival_order`, is placed by
``Engine.try_place`` with the policy by name and booked, exactly as
``hami-devices schedule`` and ``hd.allocate`` place work.  A task that fits
nowhere is dropped (its request still counts as arrived); nothing departs.
After every arrival the allocated share of the cluster's GPUs is recorded;
the headline metric is the unallocated percentage at the first arrival where
the arrived GPU requests reach 100% of capacity.

The fragmentation-aware policy learns its workload mix online from the
arrivals (``mix="online"``, the default); ``mix="declared"`` gives it FGD's
target workload instead, the typical shapes of the whole original task list,
which reads the trace ahead of the replay and is reported as such.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from hami_devices.models import ResourceRequest
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.scheduling.mix import OnlineMix
from hami_devices.scheduling.policies import Policy
from hami_devices.simulate.openb import inventory_from_trace, request_for, share_milli
from hami_devices.simulate.protocol import DEFAULT_INFLATION, arrival_order
from hami_devices.simulate.trace import TraceNodes, TracePods

FloatArray = npt.NDArray[np.float64]
MixMode = Literal["online", "declared"]


@dataclass
class ReplayResult:
    policy: str
    seed: int
    mix: str
    arrived: FloatArray  # arrived GPU requests / capacity, after each arrival
    allocated: FloatArray  # allocated GPU share / capacity, after each arrival
    placed: int
    failed: int
    wall_s: float
    decision_ms: FloatArray = field(repr=False)  # one placement decision (try_place), per arrival
    # per arrival: the task's name and the devices it got (its node for a task without devices; () if dropped)
    placements: list[tuple[str, tuple[str, ...]]] = field(default_factory=list, repr=False)
    unallocated_gpu_pct: float = field(init=False)

    def __post_init__(self) -> None:
        self.unallocated_gpu_pct = unallocated_at(self.arrived, self.allocated, 1.0)

    @property
    def decision_p50_ms(self) -> float:
        return float(np.percentile(self.decision_ms, 50)) if self.decision_ms.size else 0.0

    @property
    def decision_p99_ms(self) -> float:
        return float(np.percentile(self.decision_ms, 99)) if self.decision_ms.size else 0.0

    def summary(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "seed": self.seed,
            "mix": self.mix,
            "unallocated_gpu_pct": round(self.unallocated_gpu_pct, 4),
            "placed": self.placed,
            "failed": self.failed,
            "wall_s": round(self.wall_s, 3),
            "decision_p50_ms": round(self.decision_p50_ms, 4),
            "decision_p99_ms": round(self.decision_p99_ms, 4),
        }

    def to_json(self, points: int = 400) -> dict[str, object]:
        """The summary and the curve thinned to about ``points`` samples (always keeping the last)."""
        step = max(1, len(self.arrived) // points)
        idx = np.unique(np.r_[np.arange(0, len(self.arrived), step), len(self.arrived) - 1]).astype(int)
        idx = idx[idx >= 0]
        return {
            **self.summary(),
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


def trace_mix(pods: TracePods, coverage: float = 0.95) -> WorkloadMix:
    """FGD's target workload: the typical shapes of the original task list (reads the whole trace)."""
    learner = OnlineMix(half_life=math.inf, prior_weight=0.0, refresh=2**62, coverage=coverage)
    for i in range(len(pods)):
        learner.observe(request_for(pods, i))
    return learner.derive()


def replay_engine(
    nodes: TraceNodes,
    policy: Policy | str,
    mix: MixMode | WorkloadMix = "online",
    pods: TracePods | None = None,
    user_policies: Mapping[str, Policy] | None = None,
) -> Engine:
    """The engine a replay runs: the trace's cluster, the policy, and the declared mix if asked."""
    cluster = ClusterState.from_inventory(inventory_from_trace(nodes))
    declared: WorkloadMix | None = None
    if isinstance(mix, WorkloadMix):
        declared = mix
    elif mix == "declared":
        if pods is None:
            raise ValueError("a declared mix needs the task list")
        declared = trace_mix(pods)
    return Engine(cluster, policy, mix=declared, user_policies=user_policies)


def replay(
    nodes: TraceNodes,
    pods: TracePods,
    policy: Policy | str,
    seed: int,
    *,
    mix: MixMode | WorkloadMix = "online",
    inflation: float = DEFAULT_INFLATION,
    stop_at: float | None = None,
    progress: Callable[[int], None] | None = None,
    user_policies: Mapping[str, Policy] | None = None,
) -> ReplayResult:
    """Replay ``pods`` on ``nodes``; ``stop_at`` (a fraction of capacity) ends the run early.

    ``progress`` is called with the number of tasks handled since the last call.
    """
    started = time.perf_counter()
    capacity = nodes.gpu_capacity_milli
    order = arrival_order(pods, capacity, seed, inflation)
    engine = replay_engine(nodes, policy, mix, pods, user_policies)
    requests: dict[int, ResourceRequest] = {}
    arrived_milli = allocated_milli = 0
    arrived = np.zeros(len(order))
    allocated = np.zeros(len(order))
    latency = np.zeros(len(order))
    placed = failed = count = 0
    where: list[tuple[str, tuple[str, ...]]] = []
    for k, pod in enumerate(order.tolist()):
        request = requests.get(pod)
        if request is None:
            request = requests[pod] = request_for(pods, pod)
        t0 = time.perf_counter()
        engine.observe(request)  # the replay decides for each arrival: it teaches the mix, placed or not
        placement = engine.try_place(request)
        latency[k] = (time.perf_counter() - t0) * 1e3
        milli = share_milli(request)
        if placement is None:
            failed += 1
            where.append((request.name or "", ()))
        else:
            engine.assume(placement)
            placed += 1
            allocated_milli += milli
            where.append((request.name or "", tuple(g.uuid for g in placement.grants) or (placement.node,)))
        arrived_milli += milli
        arrived[k] = arrived_milli / capacity
        allocated[k] = allocated_milli / capacity
        count = k + 1
        if progress is not None and count % 256 == 0:
            progress(256)
        if stop_at is not None and arrived[k] >= stop_at:
            break
    if progress is not None and count % 256:
        progress(count % 256)
    return ReplayResult(
        policy=policy if isinstance(policy, str) else policy.name,
        seed=seed,
        mix="declared" if isinstance(mix, WorkloadMix) else mix,
        arrived=arrived[:count],
        allocated=allocated[:count],
        placed=placed,
        failed=failed,
        wall_s=time.perf_counter() - started,
        decision_ms=latency[:count],
        placements=where,
    )
