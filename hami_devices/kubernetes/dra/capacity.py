"""Consumable capacity of a shareable device: the request policy our accounting actually applies.

The policy is read off the device's own rule (``GrantRule.plan_grant``, the one
rule set) rather than restated: the rule is asked what a tiny share becomes, and
what the next size up becomes, so the published minimum, step or list of valid
values is exactly the rounding the engine and the allocator will apply (1 MiB for
plain shares, 256 MiB units for sMLU, one value per vNPU template).  The total
is the grantable amount: device memory x the memory factor (overcommit x scaling x
``gpu-memory-fraction``) and 100 x core scaling.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_devices import accounting
from hami_devices.accounting import DeviceUsage
from hami_devices.models import DeviceInfo, Grant, RequestPart
from hami_devices.rounding import GrantRule
from hami_devices.rules import plan

MAX_VALID_VALUES = 10  # the API's limit on validValues
FULL_CORES = 100


@dataclass(frozen=True)
class Capacity:
    """One consumable capacity: its total and the policy requests are rounded by (``unit`` 'Mi' or '')."""

    value: int
    unit: str
    default: int
    minimum: int | None = None
    maximum: int | None = None
    step: int | None = None
    valid_values: tuple[int, ...] = ()

    def round(self, amount: int) -> int | None:
        """What a request of ``amount`` consumes under this policy; None when it violates it."""
        if self.valid_values:
            return next((v for v in self.valid_values if v >= amount), None)
        low = self.minimum or 0
        amount = max(amount, low)
        if self.step:
            amount = low + -(-(amount - low) // self.step) * self.step
        if self.maximum is not None and amount > self.maximum:
            return None
        return amount

    def quantity(self, amount: int) -> str:
        return f"{amount}{self.unit}"

    def to_api(self, *, consumable: bool) -> dict[str, object]:
        out: dict[str, object] = {"value": self.quantity(self.value)}
        if not consumable:
            return out
        policy: dict[str, object] = {"default": self.quantity(self.default)}
        if self.valid_values:
            policy["validValues"] = [self.quantity(v) for v in self.valid_values]
        else:
            rng: dict[str, object] = {"min": self.quantity(self.minimum or 0)}
            if self.maximum is not None:
                rng["max"] = self.quantity(self.maximum)
            if self.step:
                rng["step"] = self.quantity(self.step)
            policy["validRange"] = rng
        out["requestPolicy"] = policy
        return out


def _probe(rule: GrantRule, info: DeviceInfo, memory: int, cores: int) -> Grant | None:
    planned = plan(rule, info, RequestPart(memory_mib=memory, cores=cores), 0, DeviceUsage())
    return planned if isinstance(planned, Grant) else None


def memory_capacity(rule: GrantRule, info: DeviceInfo) -> Capacity:
    total = accounting.device_memory_capacity(info, rule.memory_factor)
    whole = min(info.memory_mib, total)  # the default: the card's memory, as far as it may be granted
    if rule.plain_shares(info):
        return Capacity(total, "Mi", whole, minimum=1, maximum=total, step=1)
    first = _probe(rule, info, 1, 1)
    if first is not None and not first.exclusive:
        second = _probe(rule, info, first.memory_mib + 1, 1)
        third = _probe(rule, info, 2 * first.memory_mib + 1, 1) if second is not None else None
        step = second.memory_mib - first.memory_mib if second is not None else 0
        if (
            step > 0
            and third is not None
            and third.memory_mib == second.memory_mib + step  # type: ignore[union-attr]
            and first.memory_mib % step == 0
        ):
            top = total // step * step
            return Capacity(total, "Mi", max(first.memory_mib, whole // step * step), minimum=first.memory_mib,
                            maximum=top, step=step)
    sizes = {p.memory_mib for p in info.partitions} | {info.memory_mib}
    probed = (_probe(rule, info, m, 1) for m in sizes)
    values = sorted({g.memory_mib for g in probed if g is not None and g.memory_mib <= total})
    values = values[-MAX_VALID_VALUES:] or [total]
    default = max((v for v in values if v <= whole), default=values[0])
    return Capacity(total, "Mi", default, valid_values=tuple(values))


def cores_capacity(rule: GrantRule, info: DeviceInfo) -> Capacity:
    total = accounting.device_core_capacity(info, rule.core_capacity)
    top = min(FULL_CORES, total)
    if rule.plain_shares(info):
        return Capacity(total, "", top, minimum=1, maximum=top, step=1)
    one = _probe(rule, info, 1, 1)
    two = _probe(rule, info, 1, 2)
    if one is not None and two is not None and (one.cores, two.cores) == (1, 2):
        return Capacity(total, "", top, minimum=1, maximum=top, step=1)
    asks = {p.cores for p in info.partitions} | {FULL_CORES}
    values = sorted({g.cores for c in asks if (g := _probe(rule, info, 1, c)) is not None and g.cores <= total})
    values = values[-MAX_VALID_VALUES:] or [top]
    return Capacity(total, "", values[-1], valid_values=tuple(values))
