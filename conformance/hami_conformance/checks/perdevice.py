"""Readings per device on identical devices: each carries a different, known load, and each device's
monitor() must be its own - its grants, and the readings an independent source (Profile.facts: the
library's state files, a fake library's fixture) gives for it.

A reading taken by model, or from the first device of a model, is right on a node with one device of
each model, or with identical devices carrying the same load; only here does it show.
"""

from __future__ import annotations

from typing import Any

from hami_conformance.bench import Bench, capacity, expect, share
from hami_conformance.checks import check
from hami_conformance.facts import monitor_problems
from hami_devices.device import Device
from hami_devices.errors import InsufficientResources
from hami_devices.models import DeviceHandle


def identical_devices(bench: Bench) -> list[Device]:
    """The largest set of healthy devices of one model on one node (at most 3); fails the check under 2."""
    groups: dict[tuple[str, str], list[Device]] = {}
    for device in bench.healthy():
        groups.setdefault((device.info.node, device.info.model), []).append(device)
    group = max(groups.values(), key=len, default=[])
    expect(
        len(group) >= 2,
        f"this check needs two healthy devices of one model on one node, the back end has {len(group)} "
        "(run on an inventory with more: --hami-inventory)",
    )
    return group[:3]


def _load(bench: Bench, group: list[Device]) -> list[DeviceHandle]:
    """Device k gets k + 1 shares of sizes no other device holds."""
    handles: list[DeviceHandle] = []
    for k, device in enumerate(group):
        for j in range(k + 1):
            memory = max(1, capacity(device).memory_mib // (16 * (k + 1) + 2 * j + 1))
            try:
                handles.append(bench.recorded(bench.allocate_on(device, share(memory, 5 * (k + 1)))))
            except InsufficientResources:
                break
    return handles


def _fact_problems(bench: Bench, device: Device) -> list[str]:
    reader = bench.target.profile.facts
    facts = reader(device) if reader is not None else None
    if not facts:
        return []
    metrics = device.monitor()
    said: dict[str, Any] = {key: getattr(metrics, key, None) for key in facts}
    wrong = {k: v for k, v in said.items() if v != facts[k]}
    if not wrong:
        return []
    return [f"{device.uuid}: monitor() reads {wrong}, the library's state says {({k: facts[k] for k in wrong})}"]


@check("monitor.per-device")
def per_device(bench: Bench) -> None:
    group = identical_devices(bench)
    live = _load(bench, group)
    loads = [sorted(g.memory_mib for h in live for g in h.grants if g.uuid == d.uuid) for d in group]
    expect(len({tuple(x) for x in loads}) == len(group), f"the devices could not be given different loads: {loads}")
    problems: list[str] = []
    for device in group:
        metrics = device.monitor()
        if (metrics.uuid, metrics.memory_total_mib) != (device.uuid, device.info.memory_mib):
            problems.append(f"{device.uuid}: monitor() is for {metrics.uuid} with {metrics.memory_total_mib} MiB")
        problems += monitor_problems(device, live) + _fact_problems(bench, device)
    expect(not problems, f"identical devices holding loads {loads}: {'; '.join(problems[:4])}")
    for handle in live:
        bench.release(handle)
    for device in group:
        problems += monitor_problems(device, []) + _fact_problems(bench, device)
    expect(not problems, f"after releasing the loads: {'; '.join(problems[:4])}")
