"""What the allocations on a device hold, and how much of a device may be granted.

``DeviceUsage`` is the usage the placement rules (``hami_devices.rules``) judge a
part against; the ledgers and the engine's cluster state compute it the same way,
from the grants on the device.  The capacities come from the configuration.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

from hami_devices.config import HamiConfig
from hami_devices.models import DeviceInfo, Grant


@dataclass(frozen=True)
class DeviceUsage:
    """What the live allocations on one device hold in total.

    Partition names and uuids are kept sorted, so the same grants give the same
    usage whatever order they were added in (the ledger's and the engine's views
    of one device compare equal).
    """

    memory_mib: int = 0  # the shares (what the limiters enforce)
    cores: int = 0
    sharers: int = 0
    exclusive: bool = False
    partitions: tuple[str, ...] = field(default_factory=tuple)
    partition_uuids: tuple[str, ...] = field(default_factory=tuple)
    context_mib: int = 0  # the contexts booked on top of the shares (``Grant.context_mib``)

    @property
    def booked_mib(self) -> int:
        """Device memory the allocations take in the books: their shares and their contexts."""
        return self.memory_mib + self.context_mib

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
            context_mib=self.context_mib + grant.context_mib,
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
            context_mib=self.context_mib - grant.context_mib,
        )


def usage_of(grants: Iterable[Grant]) -> DeviceUsage:
    usage = DeviceUsage()
    for grant in grants:
        usage = usage.plus(grant)
    return usage


@functools.lru_cache(maxsize=256)  # a handful of configured factors, asked for each device evaluated
def decimal_product(*factors: float) -> float:
    """The product of factors a user wrote as decimals (1.5 x 0.7 is 1.05, not 1.0499999999999998)."""
    exact = Fraction(1)
    for factor in factors:
        exact *= Fraction(repr(factor))
    return float(exact)


def whole(amount: float) -> int:
    """The whole units in ``amount`` (a capacity), floored after the rounding a float product carries."""
    return math.floor(amount + ROUNDING)


ROUNDING = 1e-6
"""What a capacity computed from decimal factors may lose to floats, far below one MiB or one percent."""


def memory_factor(config: HamiConfig) -> float:
    """How much of a device's memory may be granted: overcommit x scaling x the scheduler's fraction."""
    plugin = config.device_plugin
    fraction = config.scheduler.resource_allocation.gpu_memory_fraction
    return decimal_product(plugin.memory_overcommit, plugin.memory_scaling, fraction)


def core_capacity(config: HamiConfig) -> int:
    """The sum of cores (percent) a device's sharers may hold."""
    return whole(decimal_product(100, config.device_plugin.core_scaling))


def memory_capacity(memory_mib: int, factor: float) -> int:
    """MiB of a device of ``memory_mib`` that may be granted under the memory ``factor``."""
    return whole(memory_mib * factor)


def device_memory_capacity(info: DeviceInfo, rule_factor: float) -> int:
    """MiB of this device that may be granted: its node's factor (``node-config``) where set, else the rule's."""
    return memory_capacity(info.memory_mib, rule_factor if info.memory_factor is None else info.memory_factor)


def device_core_capacity(info: DeviceInfo, rule_capacity: int) -> int:
    """Cores (percent) this device's sharers may hold: its node's (``node-config``) where set, else the rule's."""
    return rule_capacity if info.core_capacity is None else info.core_capacity
