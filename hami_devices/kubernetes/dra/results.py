"""What a committed DRA allocation result stands for: its grants, its partition rows and its node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.kubernetes import quantity as q
from hami_devices.kubernetes.dra import names
from hami_devices.kubernetes.dra.catalog import Catalog, device_info
from hami_devices.models import Grant

FULL_CORES = 100


def grants_of(
    catalog: Catalog, allocation: Mapping[str, Any], uuid_row: Mapping[str, int]
) -> tuple[list[Grant], list[int], str]:
    """The grants an allocation result stands for (request order = part order), its partition rows, its node."""
    results = [r for r in (allocation.get("devices") or {}).get("results") or [] if r.get("driver") == names.DRIVER]
    if not results:
        raise InvalidRequest("status.allocation.devices.results", f"no device of driver {names.DRIVER}")
    parts: dict[str, int] = {}
    grants: list[Grant] = []
    rows: list[int] = []
    for i, r in enumerate(results):
        row = catalog.index.get((r["driver"], r["pool"], r["device"]))
        if row is None:
            raise InvalidRequest(f"status.allocation.devices.results[{i}].device",
                                 f"{r['pool']}/{r['device']} is not published")
        device = catalog.devices[row]
        part = parts.setdefault(r["request"].split("/", 1)[0], len(parts))
        info = device_info(catalog.devices[uuid_row[str(device.own("uuid"))]], None)
        if device.kind == names.KIND_PARTITION:
            caps = device.capacity[names.DOMAIN]
            grants.append(Grant.on(info, part, int(caps["memory"] / q.MIB), int(caps["cores"]),
                                   partition=str(device.own("partition"))))
            rows.append(row)
        else:
            used = r.get("consumedCapacity") or {}
            memory = q.to_mib(used.get("memory", "0"), f"results[{i}].consumedCapacity.memory")
            cores = q.to_int(used.get("cores", str(FULL_CORES)), f"results[{i}].consumedCapacity.cores")
            grants.append(Grant.on(info, part, memory, cores, exclusive=cores >= FULL_CORES))
    return grants, rows, grants[0].node
