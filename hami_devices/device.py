"""The Device interface: one physical accelerator and the four operations of the mission."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hami_devices.accounting import DeviceUsage, usage_of
from hami_devices.models import (
    NOT_AVAILABLE,
    DeviceHandle,
    DeviceInfo,
    Health,
    Metrics,
    MetricValue,
    ProcessUsage,
    ResourceRequest,
)

if TYPE_CHECKING:
    from hami_devices.adapter import VendorAdapter
    from hami_devices.ledger import Ledger


@dataclass(frozen=True)
class HostResources:
    """The host CPU and memory of a device's node, and its labels, where an inventory describes them."""

    cpu_milli: int
    memory_mib: int
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass
class DeviceReadings:
    """What the vendor library reports about a device right now."""

    memory_used_mib: MetricValue = NOT_AVAILABLE
    utilization_pct: MetricValue = NOT_AVAILABLE
    temperature_c: MetricValue = NOT_AVAILABLE
    power_w: MetricValue = NOT_AVAILABLE
    health: Health | None = None
    processes: list[ProcessUsage] = field(default_factory=list)
    extra: dict[str, MetricValue] = field(default_factory=dict)


class Device(ABC):
    """One accelerator on a node.  Accounting is shared; readings are the vendor's."""

    def __init__(self, info: DeviceInfo, adapter: VendorAdapter, ledger: Ledger) -> None:
        self._info = info
        self.adapter = adapter
        self.ledger = ledger
        self.host: HostResources | None = None  # unknown for hardware: placement then ignores host resources

    @property
    def info(self) -> DeviceInfo:
        return self._info

    def name_node(self, node: str) -> None:
        """Set the node a discovered device is on (adapters leave it to discovery: ``node_identity``)."""
        self._info = self._info.model_copy(update={"node": node})

    @property
    def uuid(self) -> str:
        return self._info.uuid

    @property
    def type(self) -> str:
        """``vendor/model``: what schedulers group devices by."""
        return f"{self._info.vendor}/{self._info.model}"

    def allocate(self, request: ResourceRequest | Mapping[str, Any]) -> DeviceHandle:
        """A share of this one device.  Multi-device requests go through ``hami_devices.allocate``."""
        from hami_devices.allocation import allocate

        return allocate([self], request)

    def release(self, handle: DeviceHandle | str) -> None:
        from hami_devices.allocation import release_from

        release_from(self.ledger, handle, {self.adapter.name: self.adapter})

    def usage(self) -> DeviceUsage:
        return usage_of(self.ledger.grants_on(self.uuid))

    @abstractmethod
    def read(self) -> DeviceReadings:
        """Live readings from the vendor library (not-available where it cannot say)."""

    def refresh_health(self) -> Health:
        """Re-read health; unhealthy devices are never granted."""
        readings = self.read()
        if readings.health is not None and readings.health != self._info.health:
            self._info = self._info.model_copy(update={"health": readings.health})
        return self._info.health

    def monitor(self) -> Metrics:
        from hami_devices.monitoring import build_metrics

        return build_metrics(self)
