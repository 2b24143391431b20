"""One Ascend NPU chip behind DCMI: where it sits, and its live readings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hami_ascend.binding import UTIL_AICORE, UTIL_AICPU, Dcmi, device_lost
from hami_devices.device import Device, DeviceReadings
from hami_devices.errors import VendorLibraryError
from hami_devices.models import NOT_AVAILABLE, DeviceInfo, Health, MetricValue, fields

if TYPE_CHECKING:
    from hami_devices.adapter import VendorAdapter
    from hami_devices.ledger import Ledger


HEALTH_OK = 0
HEALTH_MINOR = 1
"""DCMI health: 0 ok, 1 minor (general) warning, 2 major, 3 critical; others: chip missing."""


@dataclass(frozen=True)
class Location:
    """How DCMI addresses a chip: card and device in card; how ACL numbers it: logic id."""

    card: int
    device: int
    logic_id: int
    phy_id: int


def health_of(code: int) -> Health:
    return Health.HEALTHY if code in (HEALTH_OK, HEALTH_MINOR) else Health.UNHEALTHY


def _metric(read: Callable[[], float]) -> MetricValue:
    """A reading, or "n/a" when DCMI cannot give it (unsupported, chip busy or gone)."""
    try:
        return float(read())
    except VendorLibraryError:
        return NOT_AVAILABLE


class AscendDevice(Device):
    """Accounting is the core's; readings come from DCMI."""

    def __init__(
        self, info: DeviceInfo, adapter: VendorAdapter, ledger: Ledger, dcmi: Dcmi, location: Location
    ) -> None:
        super().__init__(info, adapter, ledger)
        self.dcmi = dcmi
        self.location = location

    def read(self) -> DeviceReadings:
        card, dev = self.location.card, self.location.device
        health: Health | None
        try:
            health = health_of(self.dcmi.health(card, dev))
        except VendorLibraryError as exc:
            # a lost chip is news about its health; any other failed call says nothing about it
            health = Health.UNHEALTHY if device_lost(exc) else None
        try:
            memory = self.dcmi.memory(card, dev)
            used: MetricValue = float(memory.used_mb)
        except VendorLibraryError:
            used = NOT_AVAILABLE
        return DeviceReadings(
            memory_used_mib=used,
            utilization_pct=_metric(lambda: self.dcmi.utilization(card, dev, UTIL_AICORE)),
            temperature_c=_metric(lambda: self.dcmi.temperature(card, dev)),
            power_w=_metric(lambda: self.dcmi.power_watts(card, dev)),
            health=health,
            extra={"aicpu_utilization_pct": _metric(lambda: self.dcmi.utilization(card, dev, UTIL_AICPU)),
                   **self._fields()},
        )

    def _fields(self) -> dict[str, MetricValue]:
        """What DCMI reports besides the common readings; a field it cannot give is left out."""
        card, dev = self.location.card, self.location.device
        out: dict[str, MetricValue] = {fields.SM_CLOCK_MHZ: _metric(lambda: self.dcmi.aicore_mhz(card, dev))}
        if self.info.attributes.get("memory_kind") == "hbm":
            try:
                hbm = self.dcmi.hbm(card, dev)
            except VendorLibraryError:
                pass
            else:
                out[fields.MEMORY_CLOCK_MHZ] = float(hbm.clock_mhz)
                out[fields.MEMORY_TEMPERATURE_C] = float(hbm.temperature_c)
                out[fields.MEMORY_UTILIZATION_PCT] = float(hbm.bandwidth_util_pct)
        try:
            ecc = self.dcmi.ecc(card, dev, self.info.attributes.get("memory_kind", "hbm"))
        except VendorLibraryError:
            pass
        else:
            out[fields.ECC_CORRECTED_ERRORS] = float(ecc.corrected)
            out[fields.ECC_UNCORRECTED_ERRORS] = float(ecc.uncorrected)
            out[fields.RETIRED_PAGES_SINGLE_BIT] = float(ecc.isolated_pages_single_bit)
            out[fields.RETIRED_PAGES_DOUBLE_BIT] = float(ecc.isolated_pages_double_bit)
        return {k: v for k, v in out.items() if v != NOT_AVAILABLE}
