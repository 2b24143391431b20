"""Ascend adapter (simulated back end; the DCMI back end lands with its own issue)."""

from __future__ import annotations

from typing import ClassVar

from hami_devices.adapter import Capability, Probe, VendorAdapter
from hami_devices.device import Device
from hami_devices.ledger import Ledger


class AscendAdapter(VendorAdapter):
    name: ClassVar[str] = "ascend"
    display_name: ClassVar[str] = "Huawei Ascend"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.SIMULATED, Capability.MEMORY_LIMIT})
    visible_devices_env: ClassVar[tuple[str, ...]] = ("ASCEND_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")
    limiter_shim: ClassVar[str | None] = "libhami_ascend.so"

    def probe(self) -> Probe:
        return Probe(False, "DCMI back end not built yet")

    def discover(self, ledger: Ledger) -> list[Device]:
        return []
