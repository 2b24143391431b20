"""One Cambricon MLU behind CNDev: its live readings."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hami_cambricon.binding import Cndev, device_lost
from hami_devices.device import Device, DeviceReadings
from hami_devices.errors import VendorLibraryError
from hami_devices.models import NOT_AVAILABLE, DeviceInfo, Health, MetricValue, fields

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
        except VendorLibraryError as exc:
            # a lost MLU is news about its health; any other failed call says nothing about it
            health = Health.UNHEALTHY if device_lost(exc) else None
        return DeviceReadings(
            memory_used_mib=_metric(lambda: self.cndev.memory_mb(handle)[1]),
            utilization_pct=_metric(lambda: self.cndev.utilization(handle)),
            temperature_c=_metric(lambda: self.cndev.temperature(handle)),
            power_w=_metric(lambda: self.cndev.power_watts(handle)),
            health=health,
            extra=self._fields(),
        )

    def _fields(self) -> dict[str, MetricValue]:
        """What CNDev reports besides the common readings; a field it cannot give is left out.  CNDev's PCIe
        "read" is what the MLU received, its "write" what it sent."""
        handle, cndev = self.handle, self.cndev
        out: dict[str, MetricValue] = {
            fields.SM_CLOCK_MHZ: _metric(lambda: cndev.clocks_mhz(handle)[0]),
            fields.MEMORY_CLOCK_MHZ: _metric(lambda: cndev.clocks_mhz(handle)[1]),
            fields.ECC_CORRECTED_ERRORS: _metric(lambda: cndev.ecc(handle)[0]),
            fields.ECC_UNCORRECTED_ERRORS: _metric(lambda: cndev.ecc(handle)[1]),
            fields.PCIE_RX_BYTES_PER_S: _metric(lambda: cndev.pcie_bytes_per_s(handle)[0]),
            fields.PCIE_TX_BYTES_PER_S: _metric(lambda: cndev.pcie_bytes_per_s(handle)[1]),
            fields.MEMORY_TEMPERATURE_C: _metric(lambda: cndev.memory_temperature(handle)),
        }
        return {k: v for k, v in out.items() if v != NOT_AVAILABLE}
