"""Holding an offline placement to the trace, from the trace's own rows (nothing of the bound's model).

A placement maps arrival positions to ``(node row, ((device, thousandths), ...))``.
Each placed task must have arrived, get what it asked on a node of a model it
accepts: a sharing task (one device, under 1000 thousandths) its share on one
device, any other task 1000 on each of ``num_gpu`` distinct devices; on every
node the summed host CPU and memory must fit, a device given whole holds
nothing else, and a device's shares sum to at most 1000.  The first breach
raises ``InvalidRequest`` naming the arrival; otherwise the granted GPU
thousandths are returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hami_devices.errors import InvalidRequest
from hami_devices.simulate.trace import TraceNodes, TracePods

FULL = 1000


def granted_milli(
    nodes: TraceNodes,
    pods: TracePods,
    arrivals: Sequence[int],
    placed: Mapping[int, tuple[int, tuple[tuple[int, int], ...]]],
) -> int:
    cpu: dict[int, int] = {}
    mem: dict[int, int] = {}
    share: dict[tuple[int, int], int] = {}
    whole: set[tuple[int, int]] = set()
    total = 0
    for position, (row, grants) in placed.items():
        where = f"arrival {position}"
        if not 0 <= position < len(arrivals):
            raise InvalidRequest("placed", f"{where}: no such arrival")
        pod = arrivals[position]
        num, milli = int(pods.num_gpu[pod]), int(pods.gpu_milli[pod])
        if not 0 <= row < len(nodes):
            raise InvalidRequest("placed", f"{where}: no node row {row}")
        model = nodes.models[int(nodes.model_idx[row])] if nodes.model_idx[row] >= 0 else ""
        accepted = pods.spec[pod]
        if num > 0 and accepted is not None and model not in accepted:
            raise InvalidRequest("placed", f"{where}: model {model!r} not in {sorted(accepted)}")
        devices = [g for g, _ in grants]
        if len(set(devices)) != len(devices) or any(not 0 <= g < int(nodes.gpus[row]) for g in devices):
            raise InvalidRequest("placed", f"{where}: devices {devices} on a node of {int(nodes.gpus[row])}")
        sharing = num == 1 and milli < FULL
        wanted = [milli] if sharing else [FULL] * max(num, 0)
        if sorted(m for _, m in grants) != wanted:
            raise InvalidRequest("placed", f"{where}: granted {list(grants)}, asked {num} x {milli}")
        cpu[row] = cpu.get(row, 0) + int(pods.cpu_milli[pod])
        mem[row] = mem.get(row, 0) + int(pods.memory_mib[pod])
        if cpu[row] > int(nodes.cpu_milli[row]) or mem[row] > int(nodes.memory_mib[row]):
            raise InvalidRequest("placed", f"{where}: node {row} out of host CPU or memory")
        for g, m in grants:
            key = (row, g)
            if key in whole or (not sharing and key in share):
                raise InvalidRequest("placed", f"{where}: device {g} of node {row} is not free")
            if sharing:
                share[key] = share.get(key, 0) + m
                if share[key] > FULL:
                    raise InvalidRequest("placed", f"{where}: device {g} of node {row} over 1000 thousandths")
            else:
                whole.add(key)
            total += m
    return total
