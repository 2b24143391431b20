"""The openb trace in the SDK's own terms: nodes as an inventory, tasks as ``ResourceRequest``s.

So a replay runs the product: ``ClusterState`` + ``Engine`` + a policy by name,
the objects ``hami-devices schedule`` and ``hd.allocate`` use.

* Each GPU gets ``1000 x k`` MiB of memory (``GPU_MEMORY_MIB``), so a thousandth
  of a GPU is a whole number of MiB; a sharing task takes ``gpu_milli``
  thousandths of one GPU's memory *and* cores (``cores = gpu_milli / 10``; the
  trace's shares are multiples of 10), so a device's free share is exact.
* A task of several GPUs takes whole GPUs (``cores: 100``, exclusive).
* ``gpu_spec`` becomes the part's accepted models; CPU and host memory become
  the request's host resources; a task without GPUs is a host-only request.
"""

from __future__ import annotations

from hami_devices.inventory import Inventory, NodeSpec
from hami_devices.models import DeviceInfo, ResourceRequest
from hami_devices.scheduling.fgd import MILLI, thousandths
from hami_devices.simulate.trace import TraceNodes, TracePods

GPU_MEMORY_MIB = {"V100M32": 32_000, "A10": 24_000}
"""Per model; every other model of the trace gets ``DEFAULT_GPU_MEMORY_MIB``."""
DEFAULT_GPU_MEMORY_MIB = 16_000
SPLIT_COUNT = 64  # the smallest share in the trace is 50 thousandths: at most 20 sharers


def gpu_memory_mib(model: str) -> int:
    return GPU_MEMORY_MIB.get(model, DEFAULT_GPU_MEMORY_MIB)


def node_uuid(node: str, index: int) -> str:
    return f"{node}-gpu{index}"


def inventory_from_trace(nodes: TraceNodes) -> Inventory:
    """One inventory node per trace node, its GPUs as NVIDIA devices of the trace's model names."""
    specs = []
    for n, name in enumerate(nodes.names):
        model = nodes.models[int(nodes.model_idx[n])] if nodes.model_idx[n] >= 0 else ""
        devices = [
            DeviceInfo(
                uuid=node_uuid(name, g),
                index=g,
                vendor="nvidia",
                model=model,
                node=name,
                memory_mib=gpu_memory_mib(model),
                split_count=SPLIT_COUNT,
            )
            for g in range(int(nodes.gpus[n]))
        ]
        specs.append(
            NodeSpec(name=name, cpu_milli=int(nodes.cpu_milli[n]), memory_mib=int(nodes.memory_mib[n]), devices=devices)
        )
    return Inventory(nodes=specs, source="openb")


def request_for(pods: TracePods, index: int) -> ResourceRequest:
    """Task ``index`` of the trace as the request a scheduler would get."""
    num, milli = int(pods.num_gpu[index]), int(pods.gpu_milli[index])
    spec = pods.spec[index]
    parts: list[dict[str, object]] = []
    if num == 1 and milli < MILLI:
        part: dict[str, object] = {"count": 1, "cores": milli // 10, "memory_percent": milli / 10}
        parts.append(part)
    elif num > 0:
        parts.append({"count": num, "cores": 100})
    if spec is not None and parts:
        parts[0]["models"] = sorted(spec)
    return ResourceRequest(
        name=pods.names[index],
        host_cpu_milli=int(pods.cpu_milli[index]),
        host_memory_mib=int(pods.memory_mib[index]),
        parts=parts,
        preemptible=pods.qos is not None and pods.qos[index] == "BE",
    )


def share_milli(request: ResourceRequest) -> int:
    """GPU thousandths the request asks for in all (the protocol's arrived/allocated measure).

    A trace task gives its memory as a percentage, so the device's size does not enter.
    """
    return sum(
        p.count * int(thousandths(DEFAULT_GPU_MEMORY_MIB, p.cores * 10, p.memory_mib, p.memory_percent))
        for p in request.parts
    )
