"""Small clusters and loops for the queueing tests."""

from __future__ import annotations

from typing import Any

from hami_devices.models import DeviceInfo, ResourceRequest
from hami_devices.queueing import AdmissionLoop, parse_queues
from hami_devices.queueing.events import Event
from hami_devices.scheduling import ClusterState, Engine


def cluster(
    *nodes: tuple[str, str, int], memory_mib: int = 40_000, cpu: int = 64_000, mem: int = 256_000
) -> ClusterState:
    """``nodes``: (name, model, device count); every device nvidia with ``memory_mib``."""
    state = ClusterState()
    for name, model, count in nodes:
        devices = [
            DeviceInfo(uuid=f"{name}-{i}", index=i, vendor="nvidia", model=model, node=name, memory_mib=memory_mib)
            for i in range(count)
        ]
        state.add_node(name, cpu, mem, devices)
    return state


def make_loop(state: ClusterState, queues: dict[str, Any], **options: Any) -> tuple[AdmissionLoop, list[Event]]:
    loop = AdmissionLoop(Engine(state, "binpack"), parse_queues(queues), **options)
    log: list[Event] = []
    loop.subscribe(log.append)
    return loop, log


def gpu(name: str, queue: str, cores: int = 100, **top: Any) -> ResourceRequest:
    """One device share: ``cores`` percent and the same share of its memory."""
    part: dict[str, Any] = {"count": 1, "cores": cores}
    if cores < 100:
        part["memory_percent"] = cores
    for key in ("models", "vendors"):
        if key in top:
            part[key] = top.pop(key)
    return ResourceRequest(name=name, queue=queue, parts=[part], **top)


def kinds(log: list[Event], kind: str) -> list[Event]:
    return [e for e in log if e.kind == kind]
