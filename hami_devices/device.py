"""The Device interface: one physical accelerator, its facts and its vendor's operations.

A device is data plus what only its vendor can do (read the hardware).  The
four operations of the mission reach it from the layers that own them:
``allocate`` and ``release`` are the allocator's (``hami_devices.allocation``,
which serves every device: the device layer never imports it), ``monitor``
joins the readings with the ledger and the limiter (``monitoring``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hami_devices.accounting import DeviceUsage, usage_of
from hami_devices.errors import HamiError
from hami_devices.ledger import Ledger
from hami_devices.models import DeviceHandle, DeviceInfo, Health, Metrics, ResourceRequest
from hami_devices.monitoring import DeviceReadings, HostResources, build_metrics

if TYPE_CHECKING:
    from hami_devices.adapter import VendorAdapter

__all__ = ["FACTS", "Device", "DeviceReadings", "HostResources", "use_allocator"]

Allocate = Callable[[Sequence["Device"], "ResourceRequest | Mapping[str, Any]"], DeviceHandle]
Release = Callable[..., Any]


@dataclass
class _Allocator:
    allocate: Allocate | None = None
    release: Release | None = None


_ALLOCATOR = _Allocator()


class _Generation:
    """Moves whenever any device's facts change, so whoever keeps state derived from devices knows when to
    look at them again (``hami_devices.allocation`` does, per allocation)."""

    def __init__(self) -> None:
        self.value = 0

    def changed(self) -> None:
        self.value += 1


FACTS = _Generation()


def use_allocator(allocate: Allocate, release: Release) -> None:
    """Serve ``Device.allocate`` and ``Device.release`` with the allocator's functions.

    ``hami_devices.allocation`` calls this when it is imported; the dependency points
    from the allocator to the device, never back.
    """
    _ALLOCATOR.allocate, _ALLOCATOR.release = allocate, release


def _allocator() -> _Allocator:
    if _ALLOCATOR.allocate is None or _ALLOCATOR.release is None:
        raise HamiError("no allocator: import hami_devices (or hami_devices.allocation) first")
    return _ALLOCATOR


class Device(ABC):
    """One accelerator on a node.  Accounting is shared; readings are the vendor's.

    The core does the accounting for every vendor (memory within total x overcommit, cores within 100,
    sharers within ``split_count``, an exclusive holder alone), in the ledger the device was discovered with;
    a vendor's subclass implements only ``read`` (the library's live readings). ``allocate`` and ``release``
    go through ``hd.allocate`` and ``hd.release`` on this one device; ``monitor`` returns the readings plus
    each allocation's usage from its limiter region, with ``"n/a"`` for what the device cannot report.

    Args:
        info: the device's static facts.
        adapter: the vendor adapter that found it.
        ledger: the ledger its allocations are kept in (one per node, shared by all its devices).
    """

    def __init__(self, info: DeviceInfo, adapter: VendorAdapter, ledger: Ledger) -> None:
        self._info = info
        self.adapter = adapter
        self.ledger = ledger
        self.host: HostResources | None = None  # unknown for hardware: placement then ignores host resources

    @property
    def info(self) -> DeviceInfo:
        return self._info

    def name_node(self, node: str) -> None:
        """Set the node a discovered device is on (adapters leave it to discovery: ``node_identity``)."""
        self._info = self._info.model_copy(update={"node": node})

    def reconfigure(self, info: DeviceInfo) -> None:
        """Take the facts the configuration sets on this device (``node-config``: split count, memory
        factor, core capacity); the uuid must stay the same."""
        if info.uuid != self._info.uuid:
            raise HamiError(f"reconfigure: {info.uuid!r} is not device {self._info.uuid!r}")
        if info != self._info:
            self._info = info
            FACTS.changed()

    @property
    def uuid(self) -> str:
        return self._info.uuid

    @property
    def type(self) -> str:
        """``vendor/model``: what schedulers group devices by."""
        return f"{self._info.vendor}/{self._info.model}"

    def allocate(self, request: ResourceRequest | Mapping[str, Any]) -> DeviceHandle:
        """A share of this one device.  Multi-device requests go through ``hami_devices.allocate``."""
        allocate = _allocator().allocate
        assert allocate is not None
        return allocate([self], request)

    def release(self, handle: DeviceHandle | str, *, force: bool = False) -> None:
        """Release an allocation of this device; ``force``: even while its processes run (see ``hd.release``)."""
        release = _allocator().release
        assert release is not None
        release(self.ledger, handle, {self.adapter.name: self.adapter}, force=force)

    def usage(self) -> DeviceUsage:
        return usage_of(self.ledger.grants_on(self.uuid))

    @abstractmethod
    def read(self) -> DeviceReadings:
        """Live readings from the vendor library (not-available where it cannot say)."""

    def refresh_health(self) -> Health:
        """Re-read health; unhealthy devices are never granted."""
        readings = self.read()
        if readings.health is not None and readings.health != self._info.health:
            self._info = self._info.model_copy(update={"health": readings.health})
            FACTS.changed()
        return self._info.health

    def monitor(self) -> Metrics:
        return build_metrics(self.info, self.read(), self.ledger)
