"""Precision awareness: which precision to run a part at on a given device.

Memory need scales linearly with bytes per value.  A part's memory is stated
for its own ``precision`` (fp32 when it names none):

    need(p) = need(stated) * PRECISION_BYTES[p] / PRECISION_BYTES[stated]

``recommend_precision`` walks from the widest format down (fp32, bf16, fp16,
fp8, int8; tf32 stores as fp32 so it is never a memory saving) and returns
the first one the device supports whose need fits the device's free memory:
the least reduction in precision that makes the part fit ("the lowest
precision you have to go down to").  None when even the narrowest supported
format does not fit.
"""

from __future__ import annotations

from hami_devices.models import PRECISION_BYTES, DeviceInfo, Precision, RequestPart, ResourceRequest
from hami_devices.traits import normalize_model_name

ORDER: tuple[Precision, ...] = ("fp32", "bf16", "fp16", "fp8", "int8")


def memory_at(part: RequestPart, device_memory_mib: int, precision: str) -> int:
    stated = part.precision or "fp32"
    need = part.memory_for(device_memory_mib)
    return max(1, int(need * PRECISION_BYTES[precision] / PRECISION_BYTES[stated]))


def _supports(device: DeviceInfo, precision: str) -> bool:
    return device.traits is None or device.traits.supports(precision)


def _part_for(request: ResourceRequest, device: DeviceInfo) -> RequestPart:
    """The first part whose vendor/model lists accept the device (else the first part)."""
    model = normalize_model_name(device.model)
    for part in request.parts:
        if part.vendors and device.vendor.lower() not in {v.lower() for v in part.vendors}:
            continue
        if part.models and model not in {normalize_model_name(m) for m in part.models}:
            continue
        return part
    return request.parts[0]


def recommend_precision(
    request: ResourceRequest, device: DeviceInfo, free_memory_mib: int | None = None
) -> Precision | None:
    """The widest precision the device supports whose memory need fits (see module doc)."""
    part = _part_for(request, device)
    free = device.memory_mib if free_memory_mib is None else free_memory_mib
    for precision in ORDER:
        if _supports(device, precision) and memory_at(part, device.memory_mib, precision) <= free:
            return precision
    return None
