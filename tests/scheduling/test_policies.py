"""Each policy's preference on small hand-built clusters."""

from __future__ import annotations

from hami_devices.models import ResourceRequest
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine
from tests.scheduling.conftest import ClusterFactory, devices


def _share(name: str, memory: int = 4096, cores: int = 20, **top: object) -> ResourceRequest:
    return ResourceRequest.single(name=name, memory_mib=memory, cores=cores, **top)


def test_binpack_fills_the_fuller_card(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("n1", "nvidia", "A100-80GB", 2))
    engine = Engine(cluster, "binpack")
    first = engine.schedule(_share("a", 20_000, 40))
    second = engine.place(_share("b"))
    assert second.grants[0].uuid == first.grants[0].uuid


def test_spread_takes_the_emptier_card(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("n1", "nvidia", "A100-80GB", 2))
    first = Engine(cluster, "binpack").schedule(_share("a", 20_000, 40))
    second = Engine(cluster, "spread").place(_share("b"))
    assert second.grants[0].uuid != first.grants[0].uuid


def test_training_prefers_h100_over_t4(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("t4", "nvidia", "T4", 1), ("h100", "nvidia", "H100", 1))
    request = ResourceRequest.single(name="train", task_type="training", memory_mib=8000, cores=50)
    for policy in ("binpack", "latency-aware", "spread"):
        assert Engine(cluster, policy).place(request).grants[0].model == "H100", policy


def test_inference_under_loose_slo_takes_the_cheaper_card(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("t4", "nvidia", "T4", 1), ("h100", "nvidia", "H100", 1))
    loose = ResourceRequest.single(name="serve", task_type="inference", latency_slo_ms=500, memory_mib=8000, cores=30)
    placement = Engine(cluster, "latency-aware").place(loose)
    assert placement.grants[0].model == "T4"
    assert placement.breakdown["trait-affinity"] == 100.0
    tight = loose.model_copy(update={"latency_slo_ms": 5.0})
    assert Engine(cluster, "latency-aware").place(tight).grants[0].model == "H100"


def test_two_gpu_topology_aware_task_takes_the_nvlink_pair() -> None:
    cluster = ClusterState()
    devs = devices("n1", "nvidia", "H100", 8, nvlink_pairs=True)
    cluster.add_node("n1", 128_000, 1_048_576, devs)
    # Occupy one device of each of the first three pairs: only pair (6, 7) is a whole NVLink pair.
    engine = Engine(cluster, "topology-aware")
    for i in (0, 2, 4):
        engine.schedule(ResourceRequest.single(name=f"x{i}", uuids=[devs[i].uuid], cores=100))
    request = ResourceRequest.single(name="pair", count=2, cores=100, task_type="training", topology="preferred")
    placement = engine.place(request)
    assert {g.index for g in placement.grants} == {6, 7}
    assert placement.breakdown["topology"] == 100.0


def test_every_placement_carries_its_breakdown(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("n1", "nvidia", "L4", 2))
    engine = Engine(cluster, "fragmentation-aware")
    placement = engine.place(_share("a"))
    assert set(placement.breakdown) == set(engine.weights)
    assert all(0.0 <= v <= 100.0 for v in placement.breakdown.values())
    expected = sum(engine.weights[k] * v for k, v in placement.breakdown.items()) / sum(engine.weights.values())
    assert abs(placement.score - expected) < 1e-6


def test_ties_break_deterministically(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("b", "nvidia", "L4", 2), ("a", "nvidia", "L4", 2))
    placements = [Engine(cluster, "binpack").place(_share("x")) for _ in range(3)]
    assert {p.node for p in placements} == {"a"}
    assert placements[0].grants[0].index == 0
