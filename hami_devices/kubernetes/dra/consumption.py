"""What a request consumes of a shared device's capacity, by the device's published request policy (KEP-5075).

This is what Kubernetes writes in ``consumedCapacity`` for a share, and what its scheduler books: for
every capacity the device publishes, the request's amount rounded by the policy (``validRange``: up to
the minimum, then up to a whole step above it; ``validValues``: the first value not below it), or the
policy's ``default`` (else the whole capacity) when the request names no amount.  Our grant may hold
more (an exclusive grant holds the whole card); what the claim's status reports is the consumption.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from hami_devices.kubernetes import quantity as q
from hami_devices.kubernetes.dra.catalog import CatalogDevice
from hami_devices.kubernetes.dra.claims import SubRequest


def consumed(value: Decimal, policy: Mapping[str, Any] | None, requested: Decimal | None) -> Decimal:
    """The amount booked of one capacity of ``value`` for a request of ``requested`` (None: not named)."""
    if requested is None:
        default = (policy or {}).get("default")
        return q.parse(default) if default is not None else value
    if not policy:
        return requested
    valid_range = policy.get("validRange") or {}
    if valid_range.get("min") is not None:
        low = q.parse(valid_range["min"])
        if requested < low:
            return low
        if valid_range.get("step") is None:
            return requested
        step = q.parse(valid_range["step"])
        return low + math.ceil((requested - low) / step) * step
    for allowed in policy.get("validValues") or []:
        amount = q.parse(allowed)
        if requested <= amount:
            return amount
    return requested


def quantity_text(amount: Decimal, *, binary: bool) -> str:
    """``amount`` as a quantity string: whole MiB as ``NMi`` where ``binary`` and exact, else a plain number."""
    if binary and amount % q.MIB == 0:
        return f"{int(amount / q.MIB)}Mi"
    return str(int(amount)) if amount == amount.to_integral_value() else str(amount)


def consumed_capacity(device: CatalogDevice, sub: SubRequest) -> dict[str, str]:
    """``consumedCapacity`` of a share: each published capacity of ``device``, by its policy, for ``sub``."""
    asked: dict[str, Decimal] = {}
    for key, text in sub.capacity:
        domain, _, name = key.rpartition("/")
        asked[f"{domain or device.driver}/{name}"] = q.parse(text, f"{sub.field}.capacity.requests.{key}")
    out = {}
    for domain, amounts in sorted(device.capacity.items()):
        for name, value in sorted(amounts.items()):
            qualified = f"{domain}/{name}"
            amount = consumed(value, device.policies.get(qualified), asked.get(qualified))
            key = name if domain == device.driver else qualified
            out[key] = quantity_text(amount, binary=name == "memory")
    return out
