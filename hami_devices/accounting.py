"""The capacity rules every vendor shares, as pure functions over grants.

Keeping them pure (usage in, reasons out) lets the in-memory ledger, the
SQLite ledger and the scheduling engine apply exactly the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from hami_devices.errors import ReasonCode
from hami_devices.models import DeviceInfo, Grant


@dataclass(frozen=True)
class DeviceUsage:
    """What the live allocations on one device hold in total."""

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
            partitions=self.partitions + ((grant.partition,) if grant.partition else ()),
            partition_uuids=self.partition_uuids + ((grant.partition_uuid,) if grant.partition_uuid else ()),
        )


def usage_of(grants: Iterable[Grant]) -> DeviceUsage:
    usage = DeviceUsage()
    for grant in grants:
        usage = usage.plus(grant)
    return usage


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
