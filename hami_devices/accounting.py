"""The capacity rules every vendor shares, as pure functions over grants.

Keeping them pure (usage in, reasons out) lets the in-memory ledger, the
SQLite ledger and the scheduling engine apply exactly the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hami_devices.config import HamiConfig
from hami_devices.errors import ReasonCode
from hami_devices.matching import static_reasons
from hami_devices.models import DeviceInfo, Grant, RequestPart

if TYPE_CHECKING:
    from hami_devices.rounding import GrantRule


@dataclass(frozen=True)
class DeviceUsage:
    """What the live allocations on one device hold in total.

    Partition names and uuids are kept sorted, so the same grants give the same
    usage whatever order they were added in (the ledger's and the engine's views
    of one device compare equal).
    """

    memory_mib: int = 0
    cores: int = 0
    sharers: int = 0
    exclusive: bool = False
    partitions: tuple[str, ...] = field(default_factory=tuple)
    partition_uuids: tuple[str, ...] = field(default_factory=tuple)

    def plus(self, grant: Grant) -> DeviceUsage:
        return DeviceUsage(
            memory_mib=self.memory_mib + grant.memory_mib,
            cores=self.cores + grant.cores,
            sharers=self.sharers + 1,
            exclusive=self.exclusive or grant.exclusive,
            partitions=tuple(sorted(self.partitions + ((grant.partition,) if grant.partition else ()))),
            partition_uuids=tuple(
                sorted(self.partition_uuids + ((grant.partition_uuid,) if grant.partition_uuid else ()))
            ),
        )

    def minus(self, grant: Grant) -> DeviceUsage:
        """This usage less one grant it includes (the inverse of ``plus``)."""
        partitions = list(self.partitions)
        if grant.partition:
            partitions.remove(grant.partition)
        partition_uuids = list(self.partition_uuids)
        if grant.partition_uuid:
            partition_uuids.remove(grant.partition_uuid)
        return DeviceUsage(
            memory_mib=self.memory_mib - grant.memory_mib,
            cores=self.cores - grant.cores,
            sharers=self.sharers - 1,
            exclusive=self.exclusive and not grant.exclusive,
            partitions=tuple(partitions),
            partition_uuids=tuple(partition_uuids),
        )


def usage_of(grants: Iterable[Grant]) -> DeviceUsage:
    usage = DeviceUsage()
    for grant in grants:
        usage = usage.plus(grant)
    return usage


def memory_factor(config: HamiConfig) -> float:
    """How much of a device's memory may be granted: overcommit x scaling x the scheduler's fraction."""
    plugin = config.device_plugin
    fraction = config.scheduler.resource_allocation.gpu_memory_fraction
    return plugin.memory_overcommit * plugin.memory_scaling * fraction


def core_capacity(config: HamiConfig) -> int:
    """The sum of cores (percent) a device's sharers may hold."""
    return int(100 * config.device_plugin.core_scaling)


def memory_capacity(info: DeviceInfo, memory_overcommit: float) -> int:
    return int(info.memory_mib * memory_overcommit)


def rejection_reasons(
    info: DeviceInfo,
    usage: DeviceUsage,
    grant: Grant,
    *,
    memory_overcommit: float = 1.0,
    core_capacity: int = 100,
) -> list[ReasonCode]:
    """Every rule ``grant`` would break on a device already holding ``usage``."""
    reasons: list[ReasonCode] = []
    if not info.healthy:
        reasons.append(ReasonCode.CARD_UNHEALTHY)
    if usage.exclusive:
        reasons.append(ReasonCode.CARD_EXCLUSIVELY_HELD)
    if grant.exclusive and usage.sharers > 0:
        reasons.append(ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE)
    if usage.sharers + 1 > info.split_count:
        reasons.append(ReasonCode.CARD_SPLIT_EXHAUSTED)
    if usage.memory_mib + grant.memory_mib > memory_capacity(info, memory_overcommit):
        reasons.append(ReasonCode.CARD_INSUFFICIENT_MEMORY)
    if usage.cores + grant.cores > core_capacity:
        reasons.append(ReasonCode.CARD_INSUFFICIENT_CORE)
    return reasons


def planned_grant(
    info: DeviceInfo, rule: GrantRule, part: RequestPart, part_index: int, usage: DeviceUsage
) -> Grant | list[ReasonCode]:
    """The device's rule rounds the part, then the accounting rules judge the result."""
    planned = rule.plan_grant(info, part, part_index, usage)
    if isinstance(planned, ReasonCode):
        return [planned]
    problems = rejection_reasons(
        info, usage, planned, memory_overcommit=rule.memory_factor, core_capacity=rule.core_capacity
    )
    return problems or planned


def evaluate(
    info: DeviceInfo, rule: GrantRule, part: RequestPart, part_index: int, usage: DeviceUsage
) -> Grant | list[ReasonCode]:
    """The one rule set: what ``part`` gets on this device now, or every reason it gets nothing.

    Static matching first (vendor, model, uuid, precision, NUMA, health), then the
    rounding and the capacity rules.  The allocator commits only what this says;
    the scheduling engine computes the same over arrays (held identical by tests).
    """
    problems = static_reasons(info, part)
    if problems:
        return problems
    return planned_grant(info, rule, part, part_index, usage)
