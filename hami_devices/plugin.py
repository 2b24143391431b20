"""What a vendor adapter's author uses: the interfaces to implement and the types they exchange.

An adapter package subclasses ``VendorAdapter`` (discovery, the partition catalog, the visible-devices
variable, the limiter shim) and ``Device`` (the readings of one accelerator; the accounting is the
core's), registers it under the ``hami_devices.vendors`` entry point and proves it with
``hami-devices conformance``.  The plugin authors' guide (docs/guides/plugin-authors.md) and the
example plugin (examples/vendor-plugin) show each step.
"""

from __future__ import annotations

from hami_devices.accounting import DeviceUsage
from hami_devices.adapter import Capability, Probe, VendorAdapter
from hami_devices.config import HamiConfig
from hami_devices.device import Device, DeviceReadings, HostResources
from hami_devices.errors import DeviceUnavailable, ReasonCode, VendorLibraryError
from hami_devices.ledger import Ledger
from hami_devices.models import (
    NOT_AVAILABLE,
    DeviceInfo,
    DeviceTraits,
    Grant,
    Health,
    Metrics,
    PartitionProfile,
    RequestPart,
)
from hami_devices.rounding import DefaultRule, GrantRule
from hami_devices.simulated import SimulatedDevice


def __dir__() -> list[str]:
    """The public names (not the modules they come from)."""
    return sorted(__all__)


__all__ = [
    "NOT_AVAILABLE",
    "Capability",
    "DefaultRule",
    "Device",
    "DeviceInfo",
    "DeviceReadings",
    "DeviceTraits",
    "DeviceUnavailable",
    "DeviceUsage",
    "Grant",
    "GrantRule",
    "HamiConfig",
    "Health",
    "HostResources",
    "Ledger",
    "Metrics",
    "PartitionProfile",
    "Probe",
    "ReasonCode",
    "RequestPart",
    "SimulatedDevice",
    "VendorAdapter",
    "VendorLibraryError",
]
