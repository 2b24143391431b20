"""A Pod (Kubernetes API JSON) -> the ``ResourceRequest`` it makes of our devices, or None.

HAMi-compatible resource names (a container's ``limits``, else its ``requests``):

| Resource | Meaning |
|---|---|
| ``nvidia.com/gpu`` | NVIDIA devices (count) |
| ``nvidia.com/gpumem`` | memory per device, a count of MiB (HAMi's unit) |
| ``nvidia.com/gpumem-percentage`` | memory per device in percent of the device |
| ``nvidia.com/gpucores`` | compute per device in percent (100 = the device alone) |
| ``huawei.com/Ascend<MODEL>`` | Ascend devices of that model (``Ascend910B3``, ``Ascend310P`` ...), count |
| ``huawei.com/Ascend<MODEL>-memory`` | memory per device, MiB (rounded up to a vNPU template by the adapter) |
| ``cambricon.com/mlu``, ``cambricon.com/vmlu`` | Cambricon devices (count) |
| ``cambricon.com/mlu.smlu.vmemory`` | memory per device in 256 MiB units (HAMi's unit) |
| ``cambricon.com/mlu.smlu.vcore`` | compute per device in percent |

Every device resource is a count of its unit, whatever suffix carries the number
(``quantity.count``): Go's client writes 4000 as ``"4k"``, which is 4000 MiB of
``gpumem``, never 4000 bytes.  Only the container's ``memory`` is bytes.
A device count without memory or cores takes ``scheduler.default-memory`` and
``scheduler.default-cores`` (by default the whole memory of each device and no core
share, HAMi's ``defaultMem`` 0 and ``defaultCores`` 0).
Each container that asks for devices becomes one part per vendor; the parts of a pod
are placed together on one node, on distinct devices.  Host CPU and memory are the
pod's effective requests (the containers' sum, or the largest init container, plus
``spec.overhead``).

Annotations: ``nvidia.com/use-gputype`` / ``nouse-gputype`` and
``cambricon.com/use-mlutype`` / ``nouse-mlutype`` (comma lists; as in HAMi an entry
matches every model whose name or alias contains it, case-insensitively),
``nvidia.com/use-gpuuuid`` / ``nouse-gpuuuid`` (device uuids),
``hami.io/node-scheduler-policy`` and ``hami.io/gpu-scheduler-policy`` (this pod's node and
device policies, ``binpack``, ``spread`` or any configured policy: ``ResourceRequest.policy``), and ours:
``hami-devices.io/task-type``, ``hami-devices.io/preemptible`` (``"true"``: lower-priority
pods' victim search may evict it), ``hami-devices.io/topology`` (none, preferred,
required), ``hami-devices.io/precision``, ``hami-devices.io/queue``,
``hami-devices.io/core-policy`` (how every part's cores are kept: ``cap``, ``share`` or
``unlimited``, or HAMi's ``default``, ``force``, ``disable``).  The pod's priority is
``spec.priority``.

A container's ``GPU_CORE_UTILIZATION_POLICY`` (an ``env`` value: HAMi's ``gpuCorePolicy``, which
HAMi's webhook puts there) sets the core policy of that container's parts, over the annotation:
``default`` is ``share``, ``force`` is ``cap``, ``disable`` is ``unlimited`` (booked, not paced;
see ``hami_devices.kubernetes.policies.HAMI_CORE_POLICIES``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.kubernetes import quantity as q
from hami_devices.kubernetes.policies import (
    DEVICE_POLICY,
    HAMI_CORE_POLICY_VARIABLE,
    NODE_POLICY,
    annotated_core_policy,
    annotated_policy,
    hami_core_policy,
)
from hami_devices.models import CorePolicy, RequestPart, ResourceRequest

NVIDIA_COUNT = "nvidia.com/gpu"
NVIDIA_MEMORY = "nvidia.com/gpumem"
NVIDIA_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
NVIDIA_CORES = "nvidia.com/gpucores"
MLU_COUNTS = ("cambricon.com/mlu", "cambricon.com/vmlu")
MLU_MEMORY = "cambricon.com/mlu.smlu.vmemory"
MLU_CORES = "cambricon.com/mlu.smlu.vcore"
MLU_MEMORY_UNIT_MIB = 256
ASCEND = re.compile(r"^huawei\.com/(Ascend[0-9A-Za-z]+(?:-[0-9]+)?)(-memory)?$")

POLICY_ANNOTATIONS = (DEVICE_POLICY, NODE_POLICY)
OURS = "hami-devices.io/"
_PREFIXES = ("nvidia.com/", "huawei.com/Ascend", "cambricon.com/")

ModelLookup = Callable[[str], list[str]]
"""A use-/nouse- type entry -> the model names it stands for in the cluster."""


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class PodRequest:
    """What a pod asks of our devices: the request (its ``policy`` from the HAMi annotations), a policy it
    names (the device policy, else the node policy, else None), and who it is."""

    pod: PodRef
    request: ResourceRequest
    policy: str | None


def pod_ref(pod: Mapping[str, Any], field: str = "Pod") -> PodRef:
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        raise InvalidRequest(f"{field}.metadata", "must be an object")
    out = []
    for name in ("namespace", "name", "uid"):
        value = meta.get(name, "default" if name == "namespace" else None)
        if not isinstance(value, str) or not value:
            raise InvalidRequest(f"{field}.metadata.{name}", "must be a non-empty string")
        out.append(value)
    return PodRef(*out)


def asks_for_devices(pod: Mapping[str, Any]) -> bool:
    """Whether any container names one of our resources (cheap: no parsing of values)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return False
    for container in spec.get("containers") or []:
        resources = container.get("resources") if isinstance(container, dict) else None
        if not isinstance(resources, dict):
            continue
        for section in ("limits", "requests"):
            values = resources.get(section)
            if isinstance(values, dict) and any(str(k).startswith(_PREFIXES) for k in values):
                return True
    return False


def pod_request(pod: Mapping[str, Any], models_matching: ModelLookup | None = None) -> PodRequest | None:
    """The pod's request of our devices, or None when it asks for none (it then passes through untouched)."""
    ref = pod_ref(pod)
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise InvalidRequest("Pod.spec", "must be an object")
    containers = _list(spec.get("containers"), "Pod.spec.containers")
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if not isinstance(annotations, dict):
        raise InvalidRequest("Pod.metadata.annotations", "must be an object")
    lookup = models_matching or (lambda term: [term])
    pod_policy = annotated_core_policy(annotations, "Pod.metadata.annotations")
    parts: list[RequestPart] = []
    for i, container in enumerate(containers):
        where = f"Pod.spec.containers[{i}].resources"
        res = _resources(container, where)
        core_policy = pod_policy
        if any(str(name).startswith(_PREFIXES) for name in res):  # a container without devices keeps its env
            core_policy = _container_core_policy(container, f"Pod.spec.containers[{i}].env") or pod_policy
        parts.extend(_container_parts(res, annotations, where, lookup, core_policy))
    if not parts:
        return None
    cpu, memory = _host(spec)
    request = ResourceRequest(
        name=ref.label,
        task_type=_annotation(annotations, OURS + "task-type") or "batch",
        host_cpu_milli=cpu,
        host_memory_mib=memory,
        parts=parts,
        same_node=True,
        topology=_annotation(annotations, OURS + "topology") or "none",
        priority=_priority(spec),
        preemptible=_flag(annotations, OURS + "preemptible"),
        queue=_annotation(annotations, OURS + "queue") or "default",
        labels={OURS + "pod-uid": ref.uid, OURS + "pod-namespace": ref.namespace, OURS + "pod-name": ref.name},
        policy=annotated_policy(annotations, "Pod.metadata.annotations"),
    )
    policy = next((str(annotations[k]) for k in POLICY_ANNOTATIONS if annotations.get(k)), None)
    return PodRequest(ref, request, policy)


# ---------------------------------------------------------------------- containers
def _container_parts(
    res: dict[str, Any], annotations: Mapping[str, Any], where: str, lookup: ModelLookup,
    core_policy: CorePolicy | None = None,
) -> list[RequestPart]:
    parts: list[RequestPart] = []
    precision = _annotation(annotations, OURS + "precision")
    extra: dict[str, Any] = {"precision": precision} if precision else {}
    if core_policy is not None:
        extra["core_policy"] = core_policy
    count = _count(res, NVIDIA_COUNT, where)
    if count:
        memory = res.get(NVIDIA_MEMORY)
        percent = res.get(NVIDIA_MEMORY_PERCENT)
        if memory is not None and percent is not None:
            raise InvalidRequest(f"{where}.{NVIDIA_MEMORY_PERCENT}", f"give {NVIDIA_MEMORY} or this, not both")
        parts.append(
            RequestPart(
                count=count,
                vendors=["nvidia"],
                models=_models(annotations, "nvidia.com/use-gputype", lookup),
                exclude_models=_models(annotations, "nvidia.com/nouse-gputype", lookup),
                uuids=_split(annotations.get("nvidia.com/use-gpuuuid")),
                exclude_uuids=_split(annotations.get("nvidia.com/nouse-gpuuuid")),
                **_cores(res.get(NVIDIA_CORES), f"{where}.{NVIDIA_CORES}"),
                **_memory(memory, percent, f"{where}.{NVIDIA_MEMORY}", f"{where}.{NVIDIA_MEMORY_PERCENT}"),
                **extra,
            )
        )
    else:
        _orphans(res, (NVIDIA_MEMORY, NVIDIA_MEMORY_PERCENT, NVIDIA_CORES), NVIDIA_COUNT, where)
    mlu = sum(_count(res, name, where) for name in MLU_COUNTS)
    if mlu:
        units = res.get(MLU_MEMORY)
        memory_mib = None if units is None else _whole(units, f"{where}.{MLU_MEMORY}") * MLU_MEMORY_UNIT_MIB
        parts.append(
            RequestPart(
                count=mlu,
                vendors=["cambricon"],
                models=_models(annotations, "cambricon.com/use-mlutype", lookup),
                exclude_models=_models(annotations, "cambricon.com/nouse-mlutype", lookup),
                **_cores(res.get(MLU_CORES), f"{where}.{MLU_CORES}"),
                **({"memory_mib": memory_mib} if memory_mib else {}),
                **extra,
            )
        )
    else:
        _orphans(res, (MLU_MEMORY, MLU_CORES), MLU_COUNTS[0], where)
    ascend: dict[str, dict[str, Any]] = {}
    for name, value in res.items():
        match = ASCEND.match(name)
        if match:
            ascend.setdefault(match.group(1), {})["memory" if match.group(2) else "count"] = (name, value)
    for model, got in sorted(ascend.items()):
        if "count" not in got:
            raise InvalidRequest(f"{where}.{got['memory'][0]}", f"given without huawei.com/{model}")
        n = _whole(got["count"][1], f"{where}.{got['count'][0]}")
        if not n:
            continue
        memory_mib = _whole(got["memory"][1], f"{where}.{got['memory'][0]}") if "memory" in got else None
        parts.append(
            RequestPart(
                count=n,
                vendors=["ascend"],
                models=[model],
                **({"memory_mib": memory_mib} if memory_mib else {}),
                **extra,
            )
        )
    return parts


def _resources(container: Any, where: str) -> dict[str, Any]:
    """The container's resources: ``limits`` first (HAMi's reading), ``requests`` where a limit is absent."""
    if not isinstance(container, dict):
        raise InvalidRequest(where.rsplit(".", 1)[0], "must be an object")
    resources = container.get("resources") or {}
    if not isinstance(resources, dict):
        raise InvalidRequest(where, "must be an object")
    merged: dict[str, Any] = {}
    for section in ("requests", "limits"):
        values = resources.get(section) or {}
        if not isinstance(values, dict):
            raise InvalidRequest(f"{where}.{section}", "must be an object")
        merged.update(values)
    return merged


def _container_core_policy(container: Mapping[str, Any], where: str) -> CorePolicy | None:
    """HAMi's ``GPU_CORE_UTILIZATION_POLICY`` among the container's ``env`` values, as a core policy; None
    where it is not given by value (one from ``valueFrom`` is for the shim to read when the container runs).
    A name given twice: the last one, as the container runtime sets it."""
    found: CorePolicy | None = None
    for i, var in enumerate(_list(container.get("env"), where)):
        if isinstance(var, dict) and var.get("name") == HAMI_CORE_POLICY_VARIABLE and var.get("value") is not None:
            found = hami_core_policy(var["value"], f"{where}[{i}].value")
    return found


def _count(res: Mapping[str, Any], name: str, where: str) -> int:
    value = res.get(name)
    return 0 if value is None else _whole(value, f"{where}.{name}")


def _orphans(res: Mapping[str, Any], names: tuple[str, ...], count_name: str, where: str) -> None:
    for name in names:
        if res.get(name) is not None:
            raise InvalidRequest(f"{where}.{name}", f"given without {count_name}")


def _whole(value: Any, field: str) -> int:
    return q.count(value, field)


def _milli(value: Any, field: str) -> int:
    amount = q.parse(value, field)
    if amount < 0:
        raise InvalidRequest(field, f"must not be negative: {value!r}")
    return math.ceil(amount * 1000)


def _cores(value: Any, field: str) -> dict[str, int]:
    """The part's cores where the pod gives them; none: the engine's default (``scheduler.default-cores``)."""
    if value is None:
        return {}
    amount = _whole(value, field)
    if amount > 100:
        raise InvalidRequest(field, f"a percentage of one device, at most 100: {value!r}")
    return {"cores": amount}


def _memory(memory: Any, percent: Any, memory_field: str, percent_field: str) -> dict[str, Any]:
    if memory is not None:
        mib = _whole(memory, memory_field)  # HAMi's unit: a count of MiB, whatever its suffix
        if mib <= 0:
            raise InvalidRequest(memory_field, "must be positive")
        return {"memory_mib": mib}
    if percent is not None:
        value = _whole(percent, percent_field)
        if not 0 < value <= 100:
            raise InvalidRequest(percent_field, f"must be 1..100, got {percent!r}")
        return {"memory_percent": float(value)}
    return {}  # the engine's default memory (scheduler.default-memory; 0, HAMi's default: the whole device)


def _host(spec: Mapping[str, Any]) -> tuple[int, int]:
    """The pod's effective CPU (milli) and memory (MiB) requests, as the kube-scheduler counts them."""

    def total(containers: list[Any], field: str) -> list[tuple[int, int]]:
        out = []
        for i, c in enumerate(containers):
            requests = ((c or {}).get("resources") or {}).get("requests") or {}
            if not isinstance(requests, dict):
                raise InvalidRequest(f"{field}[{i}].resources.requests", "must be an object")
            cpu = requests.get("cpu")
            mem = requests.get("memory")
            out.append((
                0 if cpu is None else _milli(cpu, f"{field}[{i}].resources.requests.cpu"),
                0 if mem is None else q.to_mib(mem, f"{field}[{i}].resources.requests.memory"),
            ))
        return out

    main = total(_list(spec.get("containers"), "Pod.spec.containers"), "Pod.spec.containers")
    init = total(_list(spec.get("initContainers") or [], "Pod.spec.initContainers"), "Pod.spec.initContainers")
    cpu = max([sum(c for c, _ in main), *(c for c, _ in init)])
    memory = max([sum(m for _, m in main), *(m for _, m in init)])
    overhead = spec.get("overhead") or {}
    if isinstance(overhead, dict):
        if overhead.get("cpu") is not None:
            cpu += _milli(overhead["cpu"], "Pod.spec.overhead.cpu")
        if overhead.get("memory") is not None:
            memory += q.to_mib(overhead["memory"], "Pod.spec.overhead.memory")
    return cpu, memory


# ---------------------------------------------------------------------- annotations
def _annotation(annotations: Mapping[str, Any], name: str) -> str | None:
    value = annotations.get(name)
    return None if value in (None, "") else str(value)


def _flag(annotations: Mapping[str, Any], name: str) -> bool:
    value = _annotation(annotations, name)
    if value is None:
        return False
    if value.lower() not in ("true", "false"):
        raise InvalidRequest(f"Pod.metadata.annotations.{name}", f"must be \"true\" or \"false\", got {value!r}")
    return value.lower() == "true"


def _split(value: Any) -> list[str]:
    if value in (None, ""):
        return []
    return [v.strip() for v in str(value).split(",") if v.strip()]


def _models(annotations: Mapping[str, Any], name: str, lookup: ModelLookup) -> list[str]:
    out: list[str] = []
    for term in _split(annotations.get(name)):
        out.extend(m for m in lookup(term) if m not in out)
    return out


def _priority(spec: Mapping[str, Any]) -> int:
    value = spec.get("priority", 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest("Pod.spec.priority", f"must be an integer, got {value!r}")
    return value


def _list(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidRequest(field, "must be a list")
    return value
