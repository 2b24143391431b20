"""Host-only requests, host resources charged once per node, and refusals a program can act on."""

from __future__ import annotations

import pytest

from hami_devices.errors import InsufficientResources, InvalidRequest, ReasonCode
from hami_devices.models import ResourceRequest
from hami_devices.scheduling import Engine

from .conftest import ClusterFactory, devices


def test_a_request_without_devices_is_placed_on_host_resources(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("a", "nvidia", "T4", 1), ("b", "nvidia", "T4", 1), cpu=16_000, mem=65_536)
    etl = ResourceRequest(name="etl", host_cpu_milli=6_000, host_memory_mib=8_192)
    first = Engine(cluster, "binpack").schedule(etl)
    assert first.grants == [] and first.node == "a"
    assert Engine(cluster, "binpack").place(etl).node == "a"  # binpack fills the node already in use
    assert Engine(cluster, "spread").place(etl).node == "b"
    row = cluster.node_row("a")
    assert (cluster.node_cpu_free[row], cluster.node_mem_free[row]) == (10_000, 65_536 - 8_192)
    cluster.forget(first.booking_id or "")
    assert cluster.node_cpu_free[row] == 16_000
    with pytest.raises(InsufficientResources) as info:
        Engine(cluster).place(ResourceRequest(host_cpu_milli=32_000))
    assert info.value.codes == {ReasonCode.NODE_INSUFFICIENT_CPU} and info.value.permanent is True


def test_a_request_asks_for_something() -> None:
    with pytest.raises(InvalidRequest) as info:
        ResourceRequest(parts=[])
    assert info.value.field == "parts"


def test_host_resources_are_charged_once_on_each_node_of_a_split_placement(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("a", "nvidia", "T4", 1), ("b", "nvidia", "T4", 1), cpu=16_000, mem=65_536)
    request = ResourceRequest(
        same_node=False,
        host_cpu_milli=4_000,
        parts=[{"memory_mib": 1_000}, {"memory_mib": 1_000}],
    )
    placement = Engine(cluster).schedule(request)
    assert placement.nodes == ["a", "b"]
    assert [int(cluster.node_cpu_free[cluster.node_row(n)]) for n in "ab"] == [12_000, 12_000]
    cluster.forget(placement.booking_id or "")
    assert [int(cluster.node_cpu_free[cluster.node_row(n)]) for n in "ab"] == [16_000, 16_000]


def test_a_split_part_never_lands_on_a_node_without_the_host_resources(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("a", "nvidia", "T4", 2), cpu=16_000)
    cluster.add_node("tiny", 1_000, 65_536, devices("tiny", "nvidia", "T4", 1))
    request = ResourceRequest(same_node=False, host_cpu_milli=4_000, parts=[{"memory_mib": 10}, {"memory_mib": 10}])
    assert Engine(cluster, "spread").place(request).nodes == ["a"]


def test_permanent_and_transient_refusals(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("a", "nvidia", "T4", 2))
    engine = Engine(cluster)
    with pytest.raises(InsufficientResources) as info:
        engine.place(ResourceRequest.single(memory_mib=20_000))  # bigger than any T4
    assert info.value.permanent is True
    with pytest.raises(InsufficientResources) as info:
        engine.place(ResourceRequest.single(count=3, memory_mib=1_000))  # more T4s than any node has
    assert info.value.permanent is True
    for _ in range(2):
        engine.schedule(ResourceRequest.single(cores=100))
    with pytest.raises(InsufficientResources) as info:
        engine.place(ResourceRequest.single(memory_mib=1_000))
    assert info.value.permanent is False
    assert info.value.codes == {ReasonCode.NODE_INSUFFICIENT_DEVICES, ReasonCode.CARD_EXCLUSIVELY_HELD}


def test_an_unhealthy_device_is_a_transient_reason(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("a", "nvidia", "T4", 1))
    cluster.set_health("a-T4-0", "unhealthy")
    with pytest.raises(InsufficientResources) as info:
        Engine(cluster).place(ResourceRequest.single(memory_mib=1_000))
    assert info.value.permanent is False


def test_the_message_stays_short_and_the_detail_is_data(make_cluster: ClusterFactory) -> None:
    nodes = [(f"n{i:04d}", "nvidia", "T4", 4) for i in range(1_000)]
    cluster = make_cluster(*nodes)
    engine = Engine(cluster)
    for i in range(999):
        engine.schedule(ResourceRequest.single(count=4, cores=100, uuids=[f"n{i:04d}-T4-{k}" for k in range(4)]))
    engine.schedule(ResourceRequest.single(count=2, cores=100, uuids=["n0999-T4-0", "n0999-T4-1"]))
    with pytest.raises(InsufficientResources) as info:
        engine.place(ResourceRequest.single(count=4, memory_mib=8_000))
    err = info.value
    assert len(str(err)) < 400
    assert err.counts[ReasonCode.NODE_INSUFFICIENT_DEVICES] == 1_000
    assert len(err.reasons) == 1_000 * 5 - 2  # every node and every rejected device, as data
    assert err.nearest and err.nearest[0].startswith("n0999")
    assert err.permanent is False
    assert err.to_dict()["counts"]["NodeInsufficientDevices"] == 1_000
    assert "n0999 (2/4 devices)" in str(err)


def test_removing_a_node_drops_the_split_placements_that_use_it(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("a", "nvidia", "T4", 1), ("b", "nvidia", "T4", 1), cpu=16_000)
    request = ResourceRequest(same_node=False, host_cpu_milli=4_000, parts=[{"memory_mib": 10}, {"memory_mib": 10}])
    placement = Engine(cluster).schedule(request)
    other = "b" if placement.node == "a" else "a"
    assert [b.id for b in cluster.remove_node(other)] == [placement.booking_id]
    row = cluster.node_row(placement.node)
    assert cluster.node_cpu_free[row] == 16_000 and int(cluster.sharers[cluster.rows_of(placement.node)[0]]) == 0
