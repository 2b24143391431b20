"""Incremental cluster state: nodes, health, assumed/confirmed/forgotten placements; fragmentation."""

from __future__ import annotations

import pytest

from hami_devices.errors import InsufficientResources, UnknownAllocation
from hami_devices.models import Health, ResourceRequest
from hami_devices.scheduling.cluster import ClusterState, PlacementState
from hami_devices.scheduling.defrag.controller import Defragmenter, DefragOptions
from hami_devices.scheduling.defrag.forecast import DemandForecast
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.fgd import Shape, WorkloadMix
from hami_devices.scheduling.fragmentation import fragmentation
from tests.scheduling.conftest import ClusterFactory, devices


def test_incremental_events(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("n1", "nvidia", "L4", 1))
    engine = Engine(cluster)
    request = ResourceRequest.single(memory_mib=20_000, cores=100, host_cpu_milli=1000)
    first = engine.schedule(request)
    with pytest.raises(InsufficientResources):
        engine.place(request)
    cluster.add_node("n2", 8000, 65_536, devices("n2", "nvidia", "L4", 1))  # a node joins
    second = engine.schedule(request)
    assert second.node == "n2"
    assert cluster.confirm(second.booking_id or "").state == PlacementState.CONFIRMED
    cluster.set_health("n2-L4-0", Health.UNHEALTHY)
    cluster.forget(second.booking_id or "")
    with pytest.raises(InsufficientResources):  # n2's card is unhealthy now
        engine.place(request)
    cluster.set_health("n2-L4-0", Health.HEALTHY)
    assert engine.place(request).node == "n2"
    dropped = cluster.remove_node("n1")
    assert [b.id for b in dropped] == [first.booking_id]
    cluster.add_node("n3", 8000, 65_536, devices("n3", "nvidia", "L4", 1))  # reuses the freed row
    assert cluster.size == 2
    with pytest.raises(UnknownAllocation):
        cluster.forget(first.booking_id or "")


def test_fragmentation_rate_and_defragmentation() -> None:
    cluster = ClusterState()
    for n in ("a", "b"):
        cluster.add_node(n, 64_000, 262_144, devices(n, "nvidia", "A100-80GB", 2))
    mix = WorkloadMix((Shape(0, 1000, 1, None, 1.0),))  # only whole-device tasks
    assert fragmentation(cluster, mix) == 0.0
    engine = Engine(cluster, "spread")
    small = ResourceRequest.single(memory_mib=8000, cores=10, preemptible=True)
    for _ in range(2):
        engine.schedule(small)  # spread: two devices a tenth used, a-0 and b-0
    rate = fragmentation(cluster, mix)
    assert 0.0 < rate < 1.0
    before = {g.uuid for b in cluster.bookings.values() for g in b.grants}
    defrag = Defragmenter(cluster, DemandForecast(), DefragOptions(threshold=0.0, share_per_hour=1.0))
    moved = defrag.check(0.0, rate)
    after = {g.uuid for b in cluster.bookings.values() for g in b.grants}
    assert len(moved) == 1 and len(before) == 2 and len(after) == 1  # one task joined the other: 3 whole free
    assert after < before
