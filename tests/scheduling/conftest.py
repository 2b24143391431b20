"""Small hand-built clusters for the engine tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hami_devices.models import DeviceInfo
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.traits import lookup


def devices(node: str, vendor: str, model: str, count: int, *, nvlink_pairs: bool = False) -> list[DeviceInfo]:
    traits = lookup(vendor, model)
    uuids = [f"{node}-{model}-{i}" for i in range(count)]
    out = []
    for i, uuid in enumerate(uuids):
        topo = {}
        for j, other in enumerate(uuids):
            if j != i:
                topo[other] = 100 if nvlink_pairs and i // 2 == j // 2 else 30
        out.append(
            DeviceInfo(
                uuid=uuid,
                index=i,
                vendor=vendor,
                model=model,
                node=node,
                memory_mib=traits.memory_mib,
                numa_node=i // 4,
                traits=traits,
                topology=topo,
            )
        )
    return out


ClusterFactory = Callable[..., ClusterState]


@pytest.fixture
def make_cluster() -> ClusterFactory:
    def make(*nodes: tuple[str, str, str, int], cpu: int = 64_000, mem: int = 262_144) -> ClusterState:
        cluster = ClusterState()
        for name, vendor, model, count in nodes:
            cluster.add_node(name, cpu, mem, devices(name, vendor, model, count))
        return cluster

    return make
