"""Devices with no hardware behind them: the back end for inventories and tests."""

from __future__ import annotations

from hami_devices.device import Device, DeviceReadings


class SimulatedDevice(Device):
    """Accounting is real; hardware readings are honestly not available."""

    def read(self) -> DeviceReadings:
        return DeviceReadings(health=self.info.health)
