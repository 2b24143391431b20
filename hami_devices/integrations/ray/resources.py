"""Ray custom resources in the SDK's units, so Ray's scheduler counts what the ledger grants.

Each node offers, per vendor and per (vendor, model), the device memory it may grant
(MiB: total x the memory factor of the configuration) and the compute share
(``cores``: the core capacity of each device, 100 per device by default), less what
live allocations already hold.  A share that names one model takes from both levels;
one that names only a vendor takes from the vendor level, which is then the only
level that sees it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from hami_devices.accounting import device_core_capacity, device_memory_capacity
from hami_devices.device import Device
from hami_devices.errors import InvalidRequest
from hami_devices.integrations.ray.spec import FIELD, ShareSpec
from hami_devices.traits import find, vendors

MEMORY = "memory_mib"
CORES = "cores"


def resource_name(vendor: str, model: str | None, unit: str) -> str:
    """``hami/nvidia/T4/memory_mib``, or ``hami/nvidia/cores`` at the vendor level."""
    return "/".join([FIELD, vendor, *([model] if model else []), unit])


def model_key(vendor: str, model: str) -> str:
    """The catalog's name for a model (so "Tesla T4", "t4" and "T4" are one resource), else the name as given."""
    traits = find(vendor, model)
    return traits.model if traits is not None else model


def node_resources(devices: Iterable[Device]) -> dict[str, float]:
    """What these devices have free for Ray, as custom resources (unhealthy devices offer nothing)."""
    free: dict[str, float] = defaultdict(float)
    for device in devices:
        info = device.info
        if not info.healthy:
            continue
        usage = device.usage()
        memory = max(0, device_memory_capacity(info, device.adapter.memory_factor) - usage.booked_mib)
        cores = max(0, device_core_capacity(info, device.adapter.core_capacity) - usage.cores)
        for model in (model_key(info.vendor, info.traits.model if info.traits else info.model), None):
            free[resource_name(info.vendor, model, MEMORY)] += memory
            free[resource_name(info.vendor, model, CORES)] += cores
    return dict(sorted(free.items()))


def vendor_of(spec: ShareSpec) -> str:
    """The one vendor a share's resources are counted under."""
    part = spec.part
    if len(part.vendors) == 1:
        return part.vendors[0]
    candidates = {v for v in (part.vendors or vendors()) for m in part.models if find(v, m) is not None}
    if len(candidates) == 1:
        return candidates.pop()
    raise InvalidRequest(
        f"{FIELD}.vendors", "name one vendor (or models of one vendor) so Ray can reserve the share's resources"
    )


def share_resources(spec: ShareSpec, vendor: str | None = None) -> dict[str, float]:
    """The Ray resources a share reserves: its MiB and cores, times its device count."""
    part = spec.part
    if part.memory_mib is None:
        raise InvalidRequest(f"{FIELD}.memory_mib", "Ray reserves memory in MiB: give memory_mib")
    if part.partition is not None:
        raise InvalidRequest(
            f"{FIELD}.partition", "a partition rounds the grant on the device; Ray could not reserve it exactly"
        )
    vendor = vendor or vendor_of(spec)
    one_model = len(part.models) == 1
    models: Sequence[str | None] = [None, model_key(vendor, part.models[0])] if one_model else [None]
    wanted: dict[str, float] = {}
    for model in models:
        wanted[resource_name(vendor, model, MEMORY)] = float(part.memory_mib * part.count)
        if part.cores:
            wanted[resource_name(vendor, model, CORES)] = float(part.cores * part.count)
    return wanted
