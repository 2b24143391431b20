"""hami-devices: one interface over heterogeneous AI accelerators.

Discover devices, score placements, share a card with hard quotas, monitor and release.

This package holds what every user needs (a workload launcher, a notebook, a node agent): ``discover``,
``allocate``, ``release``, ``build_engine`` (a scheduler that decides first), ``load_vendors``, ``Device``,
``DeviceHandle``, ``ResourceRequest``, ``RequestPart``, ``Metrics``, ``Health``, ``NOT_AVAILABLE``, the
ledgers, the configuration, and every error (``HamiError`` and each subclass, with ``ReasonCode``).
Two facades hold the rest, one per audience:

* ``hami_devices.plugin``: a vendor adapter's author (``VendorAdapter``, ``Capability``, ``Probe``,
  ``DeviceReadings``, ``DeviceInfo``, ``PartitionProfile``, ``Grant``, ...);
* ``hami_devices.scheduler``: a scheduler that embeds the SDK (``Engine``, ``ClusterState``, ``Placement``,
  ``Inventory``, ``load_inventory``, ``QueueRunner``, ``prepare``, ``unprepare``, ...).

The names that used to live here and moved to one of them still resolve here for one release, with a
``DeprecationWarning`` that names their new home.

``import hami_devices`` loads neither numpy nor a C extension: the allocator and the engine
(``allocate``, ``release``, ``build_engine``) load on first use; ``dir(hami_devices)`` lists them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hami_devices.config import HamiConfig, load_config
from hami_devices.device import Device, use_allocator
from hami_devices.discovery import discover
from hami_devices.errors import (
    AllocationInUse,
    AmbiguousEnvironment,
    CannotListen,
    DeviceUnavailable,
    HamiError,
    InsufficientResources,
    InvalidConfig,
    InvalidInventory,
    InvalidRequest,
    LedgerSchemaError,
    LedgerUnavailable,
    LimiterError,
    MissingExtra,
    NoLedger,
    ReasonCode,
    UnknownAllocation,
    VendorLibraryError,
)
from hami_devices.lazy_names import resolver
from hami_devices.ledger import Ledger, MemoryLedger, SqliteLedger
from hami_devices.models import (
    NOT_AVAILABLE,
    DeviceHandle,
    Health,
    Metrics,
    ModelReference,
    RequestPart,
    ResourceRequest,
    use_model_sizer,
)
from hami_devices.registry import load_vendors

if TYPE_CHECKING:
    from hami_devices.adapter import VendorAdapter
    from hami_devices.allocation import allocate, release
    from hami_devices.assembly import build_engine

__version__ = "0.1.0"

_ON_FIRST_USE = {
    "allocate": "hami_devices.allocation",
    "release": "hami_devices.allocation",
    "build_engine": "hami_devices.assembly",
}

_PLUGIN = "hami_devices.plugin"
_SCHEDULER = "hami_devices.scheduler"
_MOVED = {
    **dict.fromkeys(
        ["Capability", "DefaultRule", "DeviceInfo", "DeviceReadings", "DeviceTraits", "DeviceUsage", "Grant",
         "GrantRule", "HostResources", "PartitionProfile", "Probe", "SimulatedDevice", "VendorAdapter"],
        _PLUGIN,
    ),
    **dict.fromkeys(
        ["ClusterState", "Engine", "Inventory", "NodeSpec", "Placement", "QueueRunner", "TaskType",
         "configure_engine", "load_inventory", "load_workload", "prepare", "unprepare"],
        _SCHEDULER,
    ),
}
"""Names this package exported before the facades were split: where each lives now (deprecated here)."""

__getattr__ = resolver(__name__, globals(), _ON_FIRST_USE, _MOVED)


def __dir__() -> list[str]:
    """The public names, those loaded on first use included (not the helpers this module imports)."""
    return sorted(__all__)


def _allocate(devices: Sequence[Device], request: ResourceRequest | Mapping[str, Any]) -> DeviceHandle:
    from hami_devices.allocation import allocate

    return allocate(devices, request)


def _release(
    ledger: Ledger, handle: DeviceHandle | str, adapters: Mapping[str, VendorAdapter], *, force: bool = False
) -> DeviceHandle:
    from hami_devices.allocation import release_from

    return release_from(ledger, handle, adapters, force=force)


def _size_model(ref: ModelReference, precision: str | None) -> int:
    from hami_devices.sizing.reference import resolve_memory  # needs the [precision] extra: loaded on use

    return resolve_memory(ref, precision)


# Device.allocate/release reach the allocator through the package, which loads it on first use;
# a model-sized request part reaches the sizing layer the same way.
use_allocator(_allocate, _release)
use_model_sizer(_size_model)

__all__ = [
    "NOT_AVAILABLE",
    "AllocationInUse",
    "AmbiguousEnvironment",
    "CannotListen",
    "Device",
    "DeviceHandle",
    "DeviceUnavailable",
    "HamiConfig",
    "HamiError",
    "Health",
    "InsufficientResources",
    "InvalidConfig",
    "InvalidInventory",
    "InvalidRequest",
    "Ledger",
    "LedgerSchemaError",
    "LedgerUnavailable",
    "LimiterError",
    "MemoryLedger",
    "Metrics",
    "MissingExtra",
    "NoLedger",
    "ReasonCode",
    "RequestPart",
    "ResourceRequest",
    "SqliteLedger",
    "UnknownAllocation",
    "VendorLibraryError",
    "__version__",
    "allocate",
    "build_engine",
    "discover",
    "load_config",
    "load_vendors",
    "release",
]
