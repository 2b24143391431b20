"""A pod's compute policy: ``hami-devices.io/core-policy`` and HAMi's ``GPU_CORE_UTILIZATION_POLICY`` (what HAMi's
webhook sets from ``gpuCorePolicy``), mapped as issue 36 defines them: default is share, force is cap, disable is
no compute limit (``unlimited``); the allocation the extender commits for the pod carries it to the workload."""

from __future__ import annotations

from typing import Any

import pytest

import hami_devices as hd
from hami_devices.errors import InvalidRequest
from hami_devices.inventory import parse_inventory
from hami_devices.kubernetes.extender.pods import pod_request
from hami_devices.ledger import MemoryLedger
from tests.kubernetes.extender.conftest import gpu, pod

HAMI_MODES = {"default": "share", "force": "cap", "disable": "unlimited"}  # issue 36, item 3


def container(name: str, limits: dict[str, Any], env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "busybox", "resources": {"limits": limits}}
    if env is not None:
        body["env"] = env
    return body


def hami_env(value: str) -> list[dict[str, Any]]:
    return [{"name": "OTHER", "value": "x"}, {"name": "GPU_CORE_UTILIZATION_POLICY", "value": value}]


def policies(p: dict[str, Any]) -> list[str | None]:
    found = pod_request(p)
    assert found is not None
    return [part.core_policy for part in found.request.parts]


def test_hami_gpu_core_policy_values_map_to_the_modes() -> None:
    for value, mode in HAMI_MODES.items():
        for spelled in (value, value.upper()):  # HAMi-core compares without case
            assert policies(pod("p", containers=[container("c", gpu(1, 1000, 30), hami_env(spelled))])) == [mode]


def test_the_annotation_takes_our_names_and_hamis() -> None:
    for value, mode in [("cap", "cap"), ("share", "share"), ("unlimited", "unlimited"), *HAMI_MODES.items()]:
        annotated = pod("p", gpu(1, 1000, 30), annotations={"hami-devices.io/core-policy": value})
        assert policies(annotated) == [mode]
    assert policies(pod("p", gpu(1, 1000, 30))) == [None]  # the configuration decides


def test_a_containers_variable_wins_over_the_pods_annotation_for_its_own_parts() -> None:
    p = pod("p", annotations={"hami-devices.io/core-policy": "cap"}, containers=[
        container("a", gpu(1, 1000, 30), hami_env("default")),
        container("b", gpu(1, 1000, 30)),
        container("c", gpu(1, 1000, 30), [{"name": "GPU_CORE_UTILIZATION_POLICY",
                                           "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}}]),
    ])
    assert policies(p) == ["share", "cap", "cap"]  # a valueFrom is the shim's to read at run time


def test_bad_values_name_the_field() -> None:
    with pytest.raises(InvalidRequest) as err:
        pod_request(pod("p", containers=[container("c", gpu(1, 1000, 30), hami_env("sometimes"))]))
    assert err.value.field == "Pod.spec.containers[0].env[1].value"
    assert "default, force or disable" in err.value.message
    with pytest.raises(InvalidRequest) as err:
        pod_request(pod("p", gpu(1, 1000, 30), annotations={"hami-devices.io/core-policy": "half"}))
    assert err.value.field == "Pod.metadata.annotations.hami-devices.io/core-policy"
    with pytest.raises(InvalidRequest) as err:
        pod_request(pod("p", containers=[{**container("c", gpu(1, 1000, 30)), "env": "x"}]))
    assert err.value.field == "Pod.spec.containers[0].env"
    sidecar = container("log", {"cpu": "1"}, hami_env("whatever its own tools read"))
    assert policies(pod("p", containers=[sidecar, container("c", gpu(1, 1000, 30))])) == [None]  # not ours to read


def test_the_pods_allocation_hands_the_workload_its_policy() -> None:
    t4s = {"vendor": "nvidia", "model": "T4", "count": 3}
    devices = hd.discover(parse_inventory({"nodes": [{"name": "n", "devices": [t4s]}]}), ledger=MemoryLedger())
    p = pod("p", containers=[
        container("a", gpu(1, 1000, 30), hami_env("default")),
        container("b", gpu(1, 1000, 40), hami_env("force")),
        container("c", gpu(1, 1000, 50), hami_env("disable")),
    ])
    found = pod_request(p)
    assert found is not None
    handle = hd.allocate(devices, found.request)
    env = handle.env
    assert [g.core_policy for g in handle.grants] == ["share", "cap", "unlimited"]
    assert [env[f"HAMI_DEVICE_CORE_LIMIT_{i}"] for i in range(3)] == ["30", "40", "0"]  # disable: booked, not paced
    assert {k: v for k, v in env.items() if k.startswith("HAMI_DEVICE_CORE_POLICY")} == {
        "HAMI_DEVICE_CORE_POLICY_0": "share", "HAMI_DEVICE_CORE_POLICY_1": "cap"}
    booked = {d.uuid: d.monitor().allocated_cores for d in devices}
    assert sorted(booked.values()) == [30, 40, 50]
