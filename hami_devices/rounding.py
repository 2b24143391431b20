"""How one request part is rounded onto one device: the rule protocol and the default rule.

A rule turns a part into a ``Grant`` for a given device and its current usage
(or a reason code why it cannot).  Every vendor adapter is a rule
(``VendorAdapter.plan_grant``); devices with no adapter behind them (a
hand-built ``ClusterState``) use ``DefaultRule``.  The allocator and the
scheduling engine both ask the device's rule, so a vendor's rounding reaches
every placement decision through this one interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from hami_devices.accounting import DeviceUsage
from hami_devices.errors import ReasonCode
from hami_devices.models import DeviceInfo, Grant, PartitionProfile, RequestPart


@runtime_checkable
class GrantRule(Protocol):
    """What the allocator and the engine need from whoever rounds parts onto a device."""

    @property
    def memory_factor(self) -> float:
        """How much of a device's memory may be granted (overcommit x scaling x fraction)."""

    @property
    def core_capacity(self) -> int:
        """Sum of cores (percent) the device's sharers may hold."""

    def plan_grant(
        self, info: DeviceInfo, part: RequestPart, part_index: int, usage: DeviceUsage
    ) -> Grant | ReasonCode: ...

    def plain_shares(self, info: DeviceInfo) -> bool:
        """True when a part with no partition lands on ``info`` as the plain share, whatever the usage.

        The plain share is ``memory_for(total)`` MiB, the part's cores, exclusive at 100
        cores, refused only by the accounting rules.  The engine evaluates such devices
        over arrays; every other device is asked through ``plan_grant``.
        """


def choose_profile(
    profiles: Sequence[PartitionProfile], part: RequestPart, memory_mib: int, usage: DeviceUsage
) -> PartitionProfile | None:
    """The named profile, or for ``auto`` the smallest that covers the need and has an instance left."""
    if part.partition not in (None, "auto"):
        profiles = [p for p in profiles if p.name == part.partition]
    fitting = [
        p
        for p in profiles
        if p.memory_mib >= memory_mib and p.cores >= part.cores and usage.partitions.count(p.name) < p.max_instances
    ]
    return min(fitting, key=lambda p: (p.memory_mib, p.cores), default=None)


def plan_share(
    info: DeviceInfo,
    part: RequestPart,
    part_index: int,
    profile: PartitionProfile | ReasonCode | None,
) -> Grant | ReasonCode:
    """A plain share, or the chosen profile's memory and cores when the part names a partition.

    ``profile`` is what the caller's profile choice gave for a part with a partition
    (None: nothing fits); it is ignored for a part without one.
    """
    if part.partition is None:
        return Grant.on(info, part_index, part.memory_for(info.memory_mib), part.cores, exclusive=part.exclusive)
    if profile is None:
        return ReasonCode.CARD_PARTITION_UNAVAILABLE
    if isinstance(profile, ReasonCode):
        return profile
    return Grant.on(info, part_index, profile.memory_mib, profile.cores, partition=profile.name)


def wanted_memory(info: DeviceInfo, part: RequestPart) -> int:
    """MiB a partition part asks for: its memory, or 0 when it names none (it takes what the profile gives)."""
    given = part.memory_mib is not None or part.memory_percent is not None
    return part.memory_for(info.memory_mib) if given else 0


class DefaultRule:
    """The core rule for devices with no adapter: plain shares, or the device's own partition catalog."""

    def __init__(self, memory_factor: float = 1.0, core_capacity: int = 100) -> None:
        self._memory_factor = memory_factor
        self._core_capacity = core_capacity

    @property
    def memory_factor(self) -> float:
        return self._memory_factor

    @property
    def core_capacity(self) -> int:
        return self._core_capacity

    def plan_grant(
        self, info: DeviceInfo, part: RequestPart, part_index: int, usage: DeviceUsage
    ) -> Grant | ReasonCode:
        profile = None
        if part.partition is not None:
            profile = choose_profile(info.partitions, part, wanted_memory(info, part), usage)
        return plan_share(info, part, part_index, profile)

    def plain_shares(self, info: DeviceInfo) -> bool:
        return True
