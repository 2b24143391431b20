"""HAMi resource names and annotations -> ResourceRequest; bad input -> InvalidRequest naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_devices.errors import InvalidRequest
from hami_devices.kubernetes.extender.pods import pod_request
from tests.kubernetes.extender.conftest import gpu, pod


def test_nvidia_share_with_annotations() -> None:
    p = pod("a", {**gpu(2, 3000, 30)}, cpu="1500m", annotations={
        "nvidia.com/use-gputype": "T4,A30", "nvidia.com/nouse-gpuuuid": "GPU-x",
        "hami.io/gpu-scheduler-policy": "spread", "hami-devices.io/task-type": "inference"})
    found = pod_request(p)
    assert found is not None and found.policy == "spread"
    (part,) = found.request.parts
    assert (part.count, part.memory_mib, part.cores, part.vendors) == (2, 3000, 30, ["nvidia"])
    assert part.models == ["T4", "A30"] and part.exclude_uuids == ["GPU-x"]
    assert found.request.host_cpu_milli == 1500 and found.request.host_memory_mib == 1024
    assert found.request.task_type == "inference" and found.request.same_node


def test_hami_policy_annotations_become_the_request_policy() -> None:
    found = pod_request(pod("p", gpu(1, 3000), annotations={
        "hami.io/node-scheduler-policy": "spread", "hami.io/gpu-scheduler-policy": "binpack"}))
    assert found is not None and found.request.policy is not None
    assert (found.request.policy.node, found.request.policy.device) == ("spread", "binpack")
    only_device = pod_request(pod("q", gpu(1, 3000), annotations={"hami.io/gpu-scheduler-policy": "spread"}))
    assert only_device is not None and only_device.request.policy is not None
    assert (only_device.request.policy.node, only_device.request.policy.device) == (None, "spread")
    plain = pod_request(pod("r", gpu(1, 3000)))
    assert plain is not None and plain.request.policy is None


def test_memory_forms() -> None:
    def memory(limits: dict[str, Any]) -> tuple[Any, Any]:
        found = pod_request(pod("m", limits))
        assert found is not None
        return found.request.parts[0].memory_mib, found.request.parts[0].memory_percent

    assert memory({"nvidia.com/gpu": 1}) == (None, None)  # the engine's default memory (the whole device)
    # a count of MiB whatever the suffix: Go's client writes 4000 as "4k" (and 8Gi would be 8 Gi MiB, not 8 GiB)
    assert memory({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "4k"}) == (4000, None)
    assert memory({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "16Ki"}) == (16384, None)
    assert memory({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "8Gi"}) == (8 * 2**30, None)
    assert memory({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": "25"}) == (None, 25.0)
    assert memory({"cambricon.com/vmlu": 1, "cambricon.com/mlu.smlu.vmemory": "4"}) == (1024, None)
    assert memory({"huawei.com/Ascend310P": 1, "huawei.com/Ascend310P-memory": "3072"}) == (3072, None)
    assert memory({"huawei.com/Ascend310P": 1, "huawei.com/Ascend310P-memory": "3k"}) == (3000, None)


def test_containers_become_parts_and_init_containers_count_for_host_only() -> None:
    p = pod("multi", containers=[
        {"name": "a", "resources": {"limits": gpu(1, 2000), "requests": {"cpu": "1", "memory": "512Mi"}}},
        {"name": "b", "resources": {"limits": {"huawei.com/Ascend910B3": "1", "cambricon.com/mlu": "1"},
                                    "requests": {"cpu": "2"}}},
    ])
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "4", "memory": "256Mi"}}}]
    found = pod_request(p)
    assert found is not None
    assert [part.vendors for part in found.request.parts] == [["nvidia"], ["cambricon"], ["ascend"]]
    assert found.request.parts[2].models == ["Ascend910B3"]
    assert (found.request.host_cpu_milli, found.request.host_memory_mib) == (4000, 512)


def test_use_gputype_matches_names_and_aliases_like_hami() -> None:
    names = {"nvidia t4": ["T4"], "a100": ["A100-40", "A100-80"]}
    found = pod_request(pod("t", gpu(1), annotations={"nvidia.com/use-gputype": "a100"}),
                        lambda term: names.get(term.lower(), [term]))
    assert found is not None and found.request.parts[0].models == ["A100-40", "A100-80"]


def test_pods_asking_nothing_of_ours_pass_through() -> None:
    assert pod_request(pod("cpu", cpu="2")) is None
    assert pod_request(pod("zero", {"nvidia.com/gpu": "0"})) is None
    assert pod_request(pod("other", {"example.com/fpga": "1"})) is None


@pytest.mark.parametrize(("limits", "field"), [
    ({"nvidia.com/gpu": "x"}, "resources.nvidia.com/gpu"),
    ({"nvidia.com/gpu": "1.5"}, "resources.nvidia.com/gpu"),
    ({"nvidia.com/gpu": "-1"}, "resources.nvidia.com/gpu"),
    ({"nvidia.com/gpumem": "100"}, "resources.nvidia.com/gpumem"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"}, "resources.nvidia.com/gpucores"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1", "nvidia.com/gpumem-percentage": "5"}, "gpumem-percentage"),
    ({"huawei.com/Ascend910B3-memory": "100"}, "Ascend910B3-memory"),
    ({"nvidia.com/gpu": True}, "resources.nvidia.com/gpu"),
])
def test_bad_resources_name_the_field(limits: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        pod_request(pod("bad", limits))
    assert err.value.field.startswith("Pod.spec.containers[0].") and err.value.field.endswith(field)


def test_bad_pod_shapes_name_the_field() -> None:
    for broken, field in [
        ({"metadata": {"name": "x", "uid": "u"}, "spec": {"containers": "nope"}}, "Pod.spec.containers"),
        ({"metadata": {"name": "x"}, "spec": {}}, "Pod.metadata.uid"),
        ({**pod("p", gpu(1)), "spec": {**pod("p", gpu(1))["spec"], "priority": "high"}}, "Pod.spec.priority"),
        ({**pod("p", gpu(1), annotations={"hami-devices.io/preemptible": "maybe"})},
         "Pod.metadata.annotations.hami-devices.io/preemptible"),
    ]:
        with pytest.raises(InvalidRequest) as err:
            pod_request(broken)
        assert err.value.field == field


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "gpu": st.integers(0, 4), "mem": st.none() | st.integers(1, 40000), "cores": st.none() | st.integers(0, 100),
    "mlu": st.integers(0, 2), "npu": st.integers(0, 2),
}), min_size=1, max_size=4))
def test_every_container_asking_devices_is_one_part_per_vendor(containers: list[dict[str, Any]]) -> None:
    specs = []
    for i, c in enumerate(containers):
        limits: dict[str, Any] = {}
        if c["gpu"]:
            limits.update(gpu(c["gpu"], c["mem"], c["cores"]))
        if c["mlu"]:
            limits["cambricon.com/mlu"] = str(c["mlu"])
        if c["npu"]:
            limits["huawei.com/Ascend310P"] = str(c["npu"])
        specs.append({"name": f"c{i}", "resources": {"limits": limits}})
    found = pod_request(pod("h", containers=specs))
    wanted = sum(bool(c["gpu"]) + bool(c["mlu"]) + bool(c["npu"]) for c in containers)
    if wanted == 0:
        assert found is None
        return
    assert found is not None and len(found.request.parts) == wanted
    assert found.request.device_count == sum(c["gpu"] + c["mlu"] + c["npu"] for c in containers)
    nvidia = [p for p in found.request.parts if p.vendors == ["nvidia"]]
    assert [(p.count, p.memory_mib, p.cores) for p in nvidia] == [
        (c["gpu"], c["mem"], c["cores"] or 0) for c in containers if c["gpu"]]


def test_examples_speak_the_names_the_extender_reads() -> None:
    import yaml

    from hami_devices.kubernetes.extender.pods import asks_for_devices
    from tests.conftest import EXAMPLES

    config = yaml.safe_load((EXAMPLES / "extender" / "kube-scheduler-config.yaml").read_text())
    (ext,) = config["extenders"]
    assert ext["nodeCacheCapable"] is True and ext["bindVerb"] == "bind" and ext["urlPrefix"].startswith("http://127.")
    for resource in ext["managedResources"]:
        assert asks_for_devices(pod("m", {resource["name"]: "1"})), resource["name"]
    example = yaml.safe_load((EXAMPLES / "extender" / "pod.yaml").read_text())
    example["metadata"]["uid"] = "u"
    found = pod_request(example)
    assert found is not None and found.policy == "spread"
    (part,) = found.request.parts
    assert (part.count, part.memory_mib, part.cores, part.models) == (1, 4000, 30, ["T4", "L4"])
