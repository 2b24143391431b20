"""Why a claim's request has no device to be placed on, in words an operator acts on: which CEL selector left
nothing, or that what the selectors match cannot hold the capacity asked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hami_devices.kubernetes.dra.cel import SelectorEnv
from hami_devices.kubernetes.dra.claims import SubRequest


def why_no_device(
    sub: SubRequest, classes: Mapping[str, Sequence[str]], env: SelectorEnv, ours: Sequence[int], claim: str
) -> str:
    """The first selector (the class's, then the request's) after which no published device is left; else what
    the matching devices lack."""
    rows = list(ours)
    steps = [(e, f"DeviceClass {sub.device_class}") for e in classes.get(sub.device_class, ())]
    steps += [(e, "request") for e in sub.selectors]
    for expression, whose in steps:
        rows = env.select(expression, rows, claim, sub.name)
        if not rows:
            return f"the {whose} CEL selector {expression!r} matches no published device"
    capacity = ", ".join(f"{name} {amount}" for name, amount in sub.capacity) or "a device"
    return f"none of the {len(rows)} device(s) its selectors match can hold {capacity}"
