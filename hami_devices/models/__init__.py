"""Pydantic models: device facts, traits, requests, handles and metrics.

Units (see DESIGN.md): memory in MiB (int); ``cores`` is a percentage of one
device, 0..100, where 100 means exclusive use.  Vendor-native units appear
only inside ``PartitionProfile.native``.

Every model forbids unknown fields and turns pydantic's ``ValidationError``
into ``InvalidRequest`` naming the dotted field path, so callers catch one
typed error whatever model they fed.
"""

from hami_devices.models.base import (
    NOT_AVAILABLE,
    PRECISION_BYTES,
    PRECISIONS,
    HamiModel,
    MetricValue,
    NotAvailable,
    Precision,
    every_error,
    first_error,
    is_available,
)
from hami_devices.models.constraints import ACCELERATOR_TAINT, RequestPolicy, Taint, Toleration
from hami_devices.models.defaults import RequestDefaults
from hami_devices.models.devices import DeviceInfo, DeviceTraits, Health, Interconnect, PartitionProfile
from hami_devices.models.handles import DeviceHandle, Grant, group_key
from hami_devices.models.metrics import AllocationUsage, Metrics, ProcessUsage
from hami_devices.models.requests import (
    CORE_POLICIES,
    CorePolicy,
    ModelReference,
    RequestPart,
    ResourceRequest,
    TaskType,
    use_model_sizer,
)

__all__ = [
    "ACCELERATOR_TAINT",
    "CORE_POLICIES",
    "NOT_AVAILABLE",
    "PRECISIONS",
    "PRECISION_BYTES",
    "AllocationUsage",
    "CorePolicy",
    "DeviceHandle",
    "DeviceInfo",
    "DeviceTraits",
    "Grant",
    "HamiModel",
    "Health",
    "Interconnect",
    "MetricValue",
    "Metrics",
    "ModelReference",
    "NotAvailable",
    "PartitionProfile",
    "Precision",
    "ProcessUsage",
    "RequestDefaults",
    "RequestPart",
    "RequestPolicy",
    "ResourceRequest",
    "Taint",
    "TaskType",
    "Toleration",
    "every_error",
    "first_error",
    "group_key",
    "is_available",
    "use_model_sizer",
]
