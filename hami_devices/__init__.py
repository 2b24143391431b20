"""hami-devices: one interface over heterogeneous AI accelerators.

Discover devices, score placements, share a card with hard quotas, monitor and release.
"""

from hami_devices.accounting import DeviceUsage
from hami_devices.adapter import Capability, Probe, VendorAdapter
from hami_devices.allocation import allocate, release
from hami_devices.config import HamiConfig, load_config
from hami_devices.device import Device, DeviceReadings, HostResources
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
    Allocation,
    DeviceHandle,
    DeviceInfo,
    DeviceTraits,
    Grant,
    Health,
    Metrics,
    PartitionProfile,
    RequestPart,
    ResourceRequest,
    TaskType,
)
from hami_devices.registry import load_vendors
from hami_devices.rounding import DefaultRule, GrantRule
from hami_devices.scheduling import ClusterState, Engine, Placement
from hami_devices.simulated import SimulatedDevice
from hami_devices.workload import load_workload

__version__ = "0.1.0"

__all__ = [
    "NOT_AVAILABLE",
    "Allocation",
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
    "discover",
    "load_config",
    "load_inventory",
    "load_vendors",
    "load_workload",
    "release",
]
