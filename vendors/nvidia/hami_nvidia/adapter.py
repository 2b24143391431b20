"""NVIDIA adapter (simulated back end; the NVML back end lands with its own issue)."""

from __future__ import annotations

from typing import ClassVar

from hami_devices.adapter import Capability, Probe, VendorAdapter
from hami_devices.device import Device
from hami_devices.ledger import Ledger
from hami_devices.models import Grant


class NvidiaAdapter(VendorAdapter):
    name: ClassVar[str] = "nvidia"
    display_name: ClassVar[str] = "NVIDIA"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.SIMULATED, Capability.MEMORY_LIMIT, Capability.COMPUTE_LIMIT, Capability.TOPOLOGY}
    )
    visible_devices_env: ClassVar[tuple[str, ...]] = ("CUDA_VISIBLE_DEVICES",)
    limiter_shim: ClassVar[str | None] = "libhami_cuda.so"

    def probe(self) -> Probe:
        return Probe(False, "NVML back end not built yet")

    def discover(self, ledger: Ledger) -> list[Device]:
        return []

    def limiter_variables(self, position: int, grant: Grant) -> dict[str, str]:
        return {
            f"CUDA_DEVICE_MEMORY_LIMIT_{position}": f"{grant.memory_mib}m",
            f"CUDA_DEVICE_SM_LIMIT_{position}": str(grant.cores if grant.cores < 100 else 0),
        }
