"""hami-devices: one interface over heterogeneous AI accelerators.

Discover devices, score placements, share a card with hard quotas, monitor and release.

The names below are grouped by who they are for:

* **users** (a workload launcher, a notebook, a node agent): ``discover``, ``allocate``, ``release``,
  ``Device``, ``DeviceHandle``, ``ResourceRequest``, ``RequestPart``, ``Metrics``, the ledgers, the errors;
* **plugin authors** (a vendor adapter): ``VendorAdapter``, ``Capability``, ``Probe``, ``Device``,
  ``DeviceReadings``, ``DeviceInfo``, ``DeviceTraits``, ``PartitionProfile``, ``Grant``, ``DeviceUsage``,
  ``GrantRule``, ``DefaultRule``, ``ReasonCode``;
* **scheduler embedders** (an extender, a batch system): ``build_engine`` (with ``ledger=``, an engine that
  also commits: ``engine.allocate``, ``commit``, ``release``, ``refresh``), ``Engine``, ``ClusterState``,
  ``Placement``, ``Inventory``, ``load_inventory``, ``HamiConfig``, ``load_config``, ``load_vendors``,
  ``QueueRunner``; on the node, ``prepare`` and ``unprepare`` (docs/embedding.md).

``import hami_devices`` loads neither numpy nor a C extension: the engine and the allocator
(``allocate``, ``release``, ``Engine``, ``ClusterState``, ``Placement``, ``build_engine``) load
on first use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hami_devices.accounting import DeviceUsage
from hami_devices.adapter import Capability, Probe, VendorAdapter
from hami_devices.config import HamiConfig, load_config
from hami_devices.device import Device, DeviceReadings, HostResources, use_allocator
from hami_devices.discovery import discover
from hami_devices.errors import (
    AmbiguousEnvironment,
    DeviceUnavailable,
    HamiError,
    InsufficientResources,
    InvalidConfig,
    InvalidInventory,
    InvalidRequest,
    LimiterError,
    ReasonCode,
    UnknownAllocation,
    VendorLibraryError,
)
from hami_devices.inventory import Inventory, NodeSpec, load_inventory
from hami_devices.ledger import Ledger, MemoryLedger, SqliteLedger
from hami_devices.models import (
    NOT_AVAILABLE,
    DeviceHandle,
    DeviceInfo,
    DeviceTraits,
    Grant,
    Health,
    Metrics,
    ModelReference,
    PartitionProfile,
    RequestPart,
    ResourceRequest,
    TaskType,
    use_model_sizer,
)
from hami_devices.registry import load_vendors
from hami_devices.rounding import DefaultRule, GrantRule
from hami_devices.simulated import SimulatedDevice
from hami_devices.workload import load_workload

if TYPE_CHECKING:
    from hami_devices.allocation import allocate, release
    from hami_devices.assembly import build_engine, configure_engine
    from hami_devices.handoff import prepare, unprepare
    from hami_devices.queueing.runner import QueueRunner
    from hami_devices.scheduling import ClusterState, Engine, Placement

__version__ = "0.1.0"

_ON_FIRST_USE = {
    "allocate": "hami_devices.allocation",
    "release": "hami_devices.allocation",
    "build_engine": "hami_devices.assembly",
    "configure_engine": "hami_devices.assembly",
    "Engine": "hami_devices.scheduling",
    "ClusterState": "hami_devices.scheduling",
    "Placement": "hami_devices.scheduling",
    "prepare": "hami_devices.handoff",
    "unprepare": "hami_devices.handoff",
    "QueueRunner": "hami_devices.queueing.runner",
}


def __getattr__(name: str) -> Any:
    """The engine and the allocator, imported when first asked for (they bring numpy and the C scorer)."""
    home = _ON_FIRST_USE.get(name)
    if home is None:
        raise AttributeError(f"module 'hami_devices' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    if name == "Engine":
        _keep_deprecated_builders(value)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, those loaded on first use included (not the helpers this module imports)."""
    return sorted(__all__)


def _keep_deprecated_builders(engine: Any) -> None:
    """``Engine.from_config`` and ``Engine.configured``, which now live one layer up (``build_engine``)."""
    import warnings

    from hami_devices.assembly import build_engine, configure_engine

    def deprecated(builder: Any, old: str) -> Any:
        def call(cls: Any, *args: Any, **kwargs: Any) -> Any:
            warnings.warn(f"Engine.{old} is deprecated: use hami_devices.{builder.__name__}", DeprecationWarning,
                          stacklevel=2)
            return builder(*args, **kwargs)

        return classmethod(call)

    engine.from_config = deprecated(build_engine, "from_config")
    engine.configured = deprecated(configure_engine, "configured")


def _allocate(devices: Sequence[Device], request: ResourceRequest | Mapping[str, Any]) -> DeviceHandle:
    return __getattr__("allocate")(devices, request)  # type: ignore[no-any-return]


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
    "AmbiguousEnvironment",
    "Capability",
    "ClusterState",
    "DefaultRule",
    "Device",
    "DeviceHandle",
    "DeviceInfo",
    "DeviceReadings",
    "DeviceTraits",
    "DeviceUnavailable",
    "DeviceUsage",
    "Engine",
    "Grant",
    "GrantRule",
    "HamiConfig",
    "HamiError",
    "Health",
    "HostResources",
    "InsufficientResources",
    "InvalidConfig",
    "InvalidInventory",
    "InvalidRequest",
    "Inventory",
    "Ledger",
    "LimiterError",
    "MemoryLedger",
    "Metrics",
    "NodeSpec",
    "PartitionProfile",
    "Placement",
    "Probe",
    "QueueRunner",
    "ReasonCode",
    "RequestPart",
    "ResourceRequest",
    "SimulatedDevice",
    "SqliteLedger",
    "TaskType",
    "UnknownAllocation",
    "VendorAdapter",
    "VendorLibraryError",
    "__version__",
    "allocate",
    "build_engine",
    "configure_engine",
    "discover",
    "load_config",
    "load_inventory",
    "load_vendors",
    "load_workload",
    "prepare",
    "release",
    "unprepare",
]
