"""Static matching of a request part against a device's facts.

These are the hard constraints that do not depend on usage; the allocator and
the scheduling engine both apply them, with the same reason codes.
"""

from __future__ import annotations

from hami_devices.errors import ReasonCode
from hami_devices.models import DeviceInfo, RequestPart
from hami_devices.traits import normalize_model_name


def model_names(info: DeviceInfo) -> set[str]:
    names = {normalize_model_name(info.model)}
    if info.traits is not None:
        names.add(normalize_model_name(info.traits.model))
        names.update(normalize_model_name(a) for a in info.traits.aliases)
    return names


def static_reasons(info: DeviceInfo, part: RequestPart) -> list[ReasonCode]:
    reasons: list[ReasonCode] = []
    vendor = info.vendor.lower()
    if part.vendors and vendor not in {v.lower() for v in part.vendors}:
        reasons.append(ReasonCode.CARD_VENDOR_MISMATCH)
    if vendor in {v.lower() for v in part.exclude_vendors}:
        reasons.append(ReasonCode.CARD_VENDOR_MISMATCH)
    names = model_names(info)
    if part.models and not names & {normalize_model_name(m) for m in part.models}:
        reasons.append(ReasonCode.CARD_TYPE_MISMATCH)
    if names & {normalize_model_name(m) for m in part.exclude_models}:
        reasons.append(ReasonCode.CARD_TYPE_MISMATCH)
    if part.uuids and info.uuid not in part.uuids:
        reasons.append(ReasonCode.CARD_UUID_MISMATCH)
    if info.uuid in part.exclude_uuids:
        reasons.append(ReasonCode.CARD_UUID_MISMATCH)
    if part.precision is not None and info.traits is not None and not info.traits.supports(part.precision):
        reasons.append(ReasonCode.CARD_PRECISION_UNSUPPORTED)
    if part.numa_node is not None and info.numa_node != part.numa_node:
        reasons.append(ReasonCode.CARD_NUMA_MISMATCH)
    if not info.healthy:
        reasons.append(ReasonCode.CARD_UNHEALTHY)
    return reasons
