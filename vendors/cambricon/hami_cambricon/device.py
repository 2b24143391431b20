"""One Cambricon MLU behind CNDev: its live readings."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hami_cambricon.binding import Cndev
from hami_devices.device import Device, DeviceReadings
from hami_devices.errors import VendorLibraryError
from hami_devices.models import NOT_AVAILABLE, DeviceInfo, Health, MetricValue

if TYPE_CHECKING:
    from hami_devices.adapter import VendorAdapter
    from hami_devices.ledger import Ledger


def _metric(read: Callable[[], float]) -> MetricValue:
    """A reading, or "n/a" when CNDev cannot give it."""
    try:
        return float(read())
    except VendorLibraryError:
        return NOT_AVAILABLE


class CambriconDevice(Device):
    """Accounting is the core's; readings come from CNDev."""

    def __init__(self, info: DeviceInfo, adapter: VendorAdapter, ledger: Ledger, cndev: Cndev, handle: int) -> None:
        super().__init__(info, adapter, ledger)
        self.cndev = cndev
        self.handle = handle

    def read(self) -> DeviceReadings:
        handle = self.handle
        health: Health | None
        try:
            health = Health.HEALTHY if self.cndev.health(handle).good else Health.UNHEALTHY
        except VendorLibraryError:
            health = None
        return DeviceReadings(
            memory_used_mib=_metric(lambda: self.cndev.memory_mb(handle)[1]),
            utilization_pct=_metric(lambda: self.cndev.utilization(handle)),
            temperature_c=_metric(lambda: self.cndev.temperature(handle)),
            power_w=_metric(lambda: self.cndev.power_watts(handle)),
            health=health,
        )
