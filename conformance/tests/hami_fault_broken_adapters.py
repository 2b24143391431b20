"""Built-in adapters with one fault-handling bug each, for faults.during-run on the fake vendor libraries.

Each one is right while every device answers; only a device that fails mid-run (the fakes' fault
hook, ``HAMI_FAKE_FAULTS``) shows the bug.  ``FAULT_BROKEN`` names the bug of each.
"""

from __future__ import annotations

import dataclasses

import pynvml
from hami_ascend.adapter import AscendAdapter
from hami_ascend.device import AscendDevice, health_of
from hami_nvidia.adapter import NvidiaAdapter
from hami_nvidia.device import NvmlDevice

from hami_devices.device import Device, DeviceReadings
from hami_devices.errors import VendorLibraryError
from hami_devices.ledger import Ledger


class NoNewsAscendDevice(AscendDevice):
    def read(self) -> DeviceReadings:
        card, chip = self.location.card, self.location.device
        try:
            health = health_of(self.dcmi.health(card, chip))
        except VendorLibraryError:
            health = None  # bug: a chip that stopped answering is taken for "no news", so still healthy
        return dataclasses.replace(super().read(), health=health)


class LostChipHealthyAscendAdapter(AscendAdapter):
    """The Ascend adapter, but a failed health query leaves the health discovery read."""

    def discover(self, ledger: Ledger) -> list[Device]:
        devices = super().discover(ledger)
        for device in devices:
            device.__class__ = NoNewsAscendDevice
        return devices


class RawNvmlDevice(NvmlDevice):
    def read(self) -> DeviceReadings:
        readings = super().read()
        # bug: one reading taken straight from pynvml, whose NVMLError is no HamiError
        readings.memory_used_mib = pynvml.nvmlDeviceGetMemoryInfo(self.handle).used / (1 << 20)
        return readings


class RawNvmlErrorAdapter(NvidiaAdapter):
    """The NVIDIA adapter, but one reading lets pynvml's own exception out of monitor()."""

    def discover(self, ledger: Ledger) -> list[Device]:
        devices = super().discover(ledger)
        for device in devices:
            device.__class__ = RawNvmlDevice
        return devices


FAULT_BROKEN: dict[str, tuple[str, str]] = {
    # adapter class: (the vendor whose fake library it runs on, its bug)
    "LostChipHealthyAscendAdapter": ("ascend", "reports a chip that stopped answering as healthy"),
    "RawNvmlErrorAdapter": ("nvidia", "lets pynvml's exception escape monitor() when the GPU fails"),
}
