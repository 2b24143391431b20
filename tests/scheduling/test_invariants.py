"""Hypothesis: no placement ever breaks capacity, host CPU/memory, constraints, or all-or-nothing."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_devices.errors import InsufficientResources
from hami_devices.models import RequestPart, ResourceRequest
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine
from tests.scheduling.conftest import devices

MODELS = [("nvidia", "T4"), ("nvidia", "H100"), ("nvidia", "A30"), ("ascend", "910B3")]

parts = st.builds(
    RequestPart,
    count=st.integers(1, 3),
    memory_mib=st.one_of(st.none(), st.integers(1, 40_000)),
    cores=st.sampled_from([0, 10, 30, 50, 100]),
    models=st.sampled_from([[], ["T4"], ["H100", "A30"]]),
    precision=st.sampled_from([None, "fp16", "fp8", "bf16"]),
)
requests = st.builds(
    ResourceRequest,
    task_type=st.sampled_from(["training", "inference", "batch", "interactive"]),
    parts=st.lists(parts, min_size=1, max_size=2),
    same_node=st.booleans(),
    host_cpu_milli=st.integers(0, 40_000),
    host_memory_mib=st.integers(0, 100_000),
    latency_slo_ms=st.one_of(st.none(), st.floats(1, 500)),
)


def _cluster(layout: list[tuple[int, int]]) -> ClusterState:
    cluster = ClusterState()
    for n, (model, count) in enumerate(layout):
        vendor, name = MODELS[model]
        cluster.add_node(f"n{n}", 64_000, 131_072, devices(f"n{n}", vendor, name, count, nvlink_pairs=True))
    return cluster


def _check(cluster: ClusterState) -> None:
    live = cluster.live_rows()
    assert (cluster.mem_used[live] <= cluster.mem_capacity(live)).all()
    assert (cluster.cores_used[live] <= 100).all()
    assert (cluster.sharers[live] <= cluster.split[live]).all()
    assert (cluster.node_cpu_free >= 0).all() and (cluster.node_mem_free >= 0).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layout=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=4),
    stream=st.lists(requests, min_size=1, max_size=12),
    policy=st.sampled_from(["binpack", "spread", "topology-aware", "latency-aware", "fragmentation-aware"]),
)
def test_placements_respect_capacity_and_constraints(
    layout: list[tuple[int, int]], stream: list[ResourceRequest], policy: str
) -> None:
    cluster = _cluster(layout)
    engine = Engine(cluster, policy)
    for request in stream:
        before = (cluster.mem_used.copy(), cluster.cores_used.copy(), cluster.node_cpu_free.copy())
        try:
            placement = engine.schedule(request)
        except InsufficientResources:
            # all or nothing: a rejected request leaves no trace
            assert (cluster.mem_used == before[0]).all() and (cluster.cores_used == before[1]).all()
            assert (cluster.node_cpu_free == before[2]).all()
            continue
        _check(cluster)
        assert len(placement.grants) == request.device_count
        assert len({g.uuid for g in placement.grants}) == len(placement.grants)
        if request.same_node:
            assert len(placement.nodes) == 1
        for g in placement.grants:
            part = request.parts[g.part]
            info = cluster.info(cluster.row(g.uuid))
            if part.models:
                assert info.model in part.models
            if part.precision is not None and info.traits is not None:
                assert info.traits.supports(part.precision)
            assert g.cores == part.cores
    # forgetting everything restores an empty cluster exactly
    for booking_id in list(cluster.bookings):
        cluster.forget(booking_id)
    assert not np.any(cluster.mem_used) and not np.any(cluster.cores_used) and not np.any(cluster.sharers)
