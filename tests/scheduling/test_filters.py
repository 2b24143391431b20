"""Hard constraints and their reason codes."""

from __future__ import annotations

import pytest

from hami_devices.errors import InsufficientResources, InvalidConfig, ReasonCode
from hami_devices.models import Health, RequestPart, ResourceRequest
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.policies import load_policies, parse_policies
from hami_devices.scheduling.precision import recommend_precision
from tests.scheduling.conftest import ClusterFactory, devices


def _codes(engine: Engine, request: ResourceRequest) -> set[ReasonCode]:
    with pytest.raises(InsufficientResources) as info:
        engine.place(request)
    return info.value.codes


def test_fp8_filters_out_t4(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("t4", "nvidia", "T4", 1), ("h100", "nvidia", "H100", 1))
    request = ResourceRequest.single(name="q", memory_mib=1000, precision="fp8")
    assert Engine(cluster, "spread").place(request).grants[0].model == "H100"
    t4_only = ResourceRequest.single(name="q", memory_mib=1000, precision="fp8", models=["T4"])
    assert ReasonCode.CARD_PRECISION_UNSUPPORTED in _codes(Engine(cluster), t4_only)


def test_reason_codes_per_node_and_device(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("n1", "nvidia", "T4", 2))
    engine = Engine(cluster)
    assert ReasonCode.CARD_INSUFFICIENT_MEMORY in _codes(engine, ResourceRequest.single(memory_mib=10**6))
    assert ReasonCode.CARD_VENDOR_MISMATCH in _codes(engine, ResourceRequest.single(exclude_vendors=["nvidia"]))
    assert ReasonCode.CARD_TYPE_MISMATCH in _codes(engine, ResourceRequest.single(exclude_models=["T4"]))
    assert _codes(engine, ResourceRequest.single(vendors=["ascend"])) == {ReasonCode.UNKNOWN_VENDOR}
    assert _codes(engine, ResourceRequest.single(models=["H100"])) == {ReasonCode.UNKNOWN_MODEL}
    assert ReasonCode.NODE_INSUFFICIENT_DEVICES in _codes(engine, ResourceRequest.single(count=3))
    assert ReasonCode.NODE_INSUFFICIENT_CPU in _codes(engine, ResourceRequest.single(host_cpu_milli=10**9))
    assert ReasonCode.NODE_INSUFFICIENT_MEMORY in _codes(engine, ResourceRequest.single(host_memory_mib=10**9))
    assert ReasonCode.CARD_NUMA_MISMATCH in _codes(engine, ResourceRequest.single(numa_node=3))
    assert ReasonCode.CARD_PARTITION_UNAVAILABLE in _codes(engine, ResourceRequest.single(partition="1g.10gb"))
    cluster.set_health("n1-T4-0", Health.UNHEALTHY)
    cluster.set_health("n1-T4-1", Health.UNHEALTHY)
    assert ReasonCode.CARD_UNHEALTHY in _codes(engine, ResourceRequest.single())
    reasons = engine.rejections(ResourceRequest.single())
    assert reasons["n1"] == [ReasonCode.NODE_INSUFFICIENT_DEVICES, ReasonCode.CARD_UNHEALTHY]


def test_exclusive_and_split(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("n1", "nvidia", "A100-80GB", 1))
    engine = Engine(cluster)
    engine.schedule(ResourceRequest.single(memory_mib=1000, cores=10))
    assert ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE in _codes(engine, ResourceRequest.single(cores=100))
    for _ in range(9):
        engine.schedule(ResourceRequest.single(memory_mib=1000, cores=1))
    assert ReasonCode.CARD_SPLIT_EXHAUSTED in _codes(engine, ResourceRequest.single(memory_mib=10, cores=1))


def test_topology_required_unsatisfied() -> None:
    from hami_devices.scheduling.cluster import ClusterState

    cluster = ClusterState()
    cluster.add_node("n1", 64_000, 262_144, devices("n1", "nvidia", "A30", 2))  # pairs score 30
    request = ResourceRequest.single(count=2, cores=100, topology="required")
    assert ReasonCode.NODE_TOPOLOGY_UNSATISFIED in _codes(Engine(cluster, "topology-aware"), request)


def test_multi_part_same_node_all_or_nothing(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(("big", "nvidia", "H100", 1), ("small", "nvidia", "T4", 1))
    both = ResourceRequest(parts=[RequestPart(memory_mib=40_000), RequestPart(models=["T4"], memory_mib=1000)])
    _codes(Engine(cluster), both)  # no node has both tiers
    assert not cluster.bookings
    split = both.model_copy(update={"same_node": False})
    placement = Engine(cluster).schedule(split)
    assert sorted(g.model for g in placement.grants) == ["H100", "T4"]


def test_recommend_precision() -> None:
    t4 = devices("n", "nvidia", "T4", 1)[0]  # 15 GiB, no fp8/bf16
    h100 = devices("n", "nvidia", "H100", 1)[0]
    assert recommend_precision(ResourceRequest.single(memory_mib=8000), t4) == "fp32"
    assert recommend_precision(ResourceRequest.single(memory_mib=20_000), t4) == "fp16"
    assert recommend_precision(ResourceRequest.single(memory_mib=40_000), t4) == "int8"
    assert recommend_precision(ResourceRequest.single(memory_mib=25_000, precision="bf16"), t4) == "int8"
    assert recommend_precision(ResourceRequest.single(memory_mib=100_000), t4) is None
    assert recommend_precision(ResourceRequest.single(memory_mib=200_000), h100) == "fp8"


def test_user_policies_yaml(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "p.yaml"
    path.write_text("policies:\n  - name: mine\n    weights: {binpack: 2, locality: 1}\n")
    assert load_policies(path)["mine"].weights == {"binpack": 2, "locality": 1}
    with pytest.raises(InvalidConfig) as info:
        parse_policies({"policies": [{"name": "x", "weights": {"nope": 1}}]}, "f.yaml")
    assert info.value.field == "policies.0.weights.nope" and info.value.source == "f.yaml"
    with pytest.raises(InvalidConfig) as info:
        parse_policies({"policies": [{"name": "x", "weights": {"binpack": -1}}]}, "f.yaml")
    assert info.value.field == "policies.0.weights"
    repo = Path(__file__).resolve().parents[2]
    for example in (repo / "examples" / "policies").glob("*.yaml"):
        assert load_policies(example)
