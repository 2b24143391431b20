"""Kubernetes Dynamic Resource Allocation (resource.k8s.io/v1) for every vendor the SDK drives.

- ``slices``: ResourceSlices (one shareable device per accelerator with consumable
  ``memory`` and ``cores``; partitions as counter-consuming devices) and ``classes``:
  DeviceClasses;
- ``allocator``: ResourceClaims allocated with the scheduling engine (CEL selectors and
  constraints narrow, the engine places), results with ``shareID`` and ``consumedCapacity``;
- ``node``: prepare/unprepare on the node (ledger allocation + CDI spec), idempotent.

Needs the ``[kubernetes]`` extra.
"""

from hami_devices.kubernetes.dra.allocator import DraAllocator
from hami_devices.kubernetes.dra.cel import SelectorError
from hami_devices.kubernetes.dra.claims import Claim, parse_claim
from hami_devices.kubernetes.dra.classes import device_classes
from hami_devices.kubernetes.dra.names import DOMAIN, DRIVER
from hami_devices.kubernetes.dra.node import NodePlugin, Prepared
from hami_devices.kubernetes.dra.publish import publish_inventory
from hami_devices.kubernetes.dra.slices import PoolPublisher

__all__ = [
    "DOMAIN",
    "DRIVER",
    "Claim",
    "DraAllocator",
    "NodePlugin",
    "PoolPublisher",
    "Prepared",
    "SelectorError",
    "device_classes",
    "parse_claim",
    "publish_inventory",
]
