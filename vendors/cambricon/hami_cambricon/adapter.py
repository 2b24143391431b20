"""Cambricon adapter (simulated back end; the CNDev back end lands with its own issue)."""

from __future__ import annotations

from typing import ClassVar

from hami_devices.adapter import Capability, Probe, VendorAdapter
from hami_devices.device import Device
from hami_devices.ledger import Ledger


class CambriconAdapter(VendorAdapter):
    name: ClassVar[str] = "cambricon"
    display_name: ClassVar[str] = "Cambricon"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.SIMULATED, Capability.MEMORY_LIMIT})
    visible_devices_env: ClassVar[tuple[str, ...]] = ("MLU_VISIBLE_DEVICES", "CAMBRICON_VISIBLE_DEVICES")
    limiter_shim: ClassVar[str | None] = "libhami_cambricon.so"

    def probe(self) -> Probe:
        return Probe(False, "CNDev back end not built yet")

    def discover(self, ledger: Ledger) -> list[Device]:
        return []
