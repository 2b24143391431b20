"""The columns the placement rules read, for many devices at once or for one.

A rule never sees a ``DeviceInfo`` or a ``ClusterState``: it sees columns
(``vendor``, ``mem_used``, ``split`` ...) indexed by device row.  The scheduling
engine's cluster state keeps those columns as arrays over every device of a
cluster; ``one_device`` builds the same columns, one row long, from a device's
facts and usage for the allocator's re-check.  Both therefore run the same rule
code, vectorised.

Names in a request (vendors, models, uuids) are resolved to the interned ids the
columns hold through a ``Names`` resolver, so matching compares integers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from hami_devices.accounting import DeviceUsage, device_core_capacity, device_memory_capacity
from hami_devices.models import PRECISIONS, DeviceInfo, Taint
from hami_devices.traits import normalize_model_name

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
Index = IntArray | slice

DEVICE_COLUMNS = (
    "vendor",  # interned vendor id
    "model",  # interned model id
    "numa",  # NUMA node, -1 when unknown
    "has_traits",  # the model is in the traits catalog
    "tflops",  # peak per precision (rows x len(PRECISIONS)); 0 where unsupported
    "healthy",
    "exclusive",  # held by an exclusive grant (0 or 1 holders)
    "sharers",
    "split",  # the most sharers the device takes
    "mem_total",
    "mem_used",  # the shares and the contexts booked on top of them
    "mem_cap",  # MiB that may be granted: total x the rule's memory factor
    "cores_used",
    "core_cap",  # cores (percent) that may be granted
    "context_mib",  # MiB one context of the model takes beside a shared grant (traits catalog; 0: none known)
)
NODE_COLUMNS = ("node_ok", "node_cpu_used", "node_cpu_total", "node_mem_used", "node_mem_total")
"""Node views also resolve labels and taints through their ``NodeNames``."""


class Names(Protocol):
    """Resolves the names a request uses to the ids the columns hold (unknown names resolve to nothing)."""

    def vendor_ids(self, names: Sequence[str]) -> list[int]: ...

    def model_ids_matching(self, names: Sequence[str]) -> list[int]: ...

    def uuid_rows(self, uuids: Sequence[str]) -> list[int]: ...


class NodeNames(Protocol):
    """What node rules ask of the table behind a node view, per node row (all rows, the view picks its own)."""

    def label_matches(self, key: str, value: str) -> BoolArray: ...

    def node_taints(self) -> list[tuple[Taint, BoolArray]]: ...


def model_names(info: DeviceInfo) -> set[str]:
    """Every name a request may call this device's model by: its own, the catalog's, and the aliases."""
    names = {normalize_model_name(info.model)}
    if info.traits is not None:
        names.add(normalize_model_name(info.traits.model))
        names.update(normalize_model_name(a) for a in info.traits.aliases)
    return names


class ColumnView:
    """The columns of ``source`` at the rows ``at`` (a slice reads views, an index array gathers).

    Each column is read once per view: rules that share a column share the read.  ``names``
    resolves what a request names: a ``Names`` for device views, a ``NodeNames`` for node views.
    """

    def __init__(self, source: Any, at: Index, names: Any) -> None:
        self._source = source
        self.at = at
        self.names = names
        self._read: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        read = self.__dict__["_read"]
        value = read.get(name)
        if value is None:
            value = read[name] = getattr(self._source, name)[self.at]
        return value

    @property
    def rows(self) -> IntArray:
        """The device rows this view reads (what uuid selectors are resolved to)."""
        at = self.at
        if isinstance(at, slice):
            return np.arange(at.start or 0, at.stop)
        return at

    def __len__(self) -> int:
        at = self.at
        return (at.stop - (at.start or 0)) if isinstance(at, slice) else int(at.size)


@dataclass
class _OneDevice:
    """One device's columns, each an array of one entry."""

    vendor: IntArray
    model: IntArray
    numa: IntArray
    has_traits: BoolArray
    tflops: FloatArray
    healthy: BoolArray
    exclusive: BoolArray
    sharers: IntArray
    split: IntArray
    mem_total: IntArray
    mem_used: IntArray
    mem_cap: IntArray
    cores_used: IntArray
    core_cap: IntArray
    context_mib: IntArray


class _OneDeviceNames:
    def __init__(self, info: DeviceInfo) -> None:
        self._vendor = info.vendor.lower()
        self._models = model_names(info)
        self._uuid = info.uuid

    def vendor_ids(self, names: Sequence[str]) -> list[int]:
        return [0] if any(n.lower() == self._vendor for n in names) else []

    def model_ids_matching(self, names: Sequence[str]) -> list[int]:
        return [0] if {normalize_model_name(n) for n in names} & self._models else []

    def uuid_rows(self, uuids: Sequence[str]) -> list[int]:
        return [0] if self._uuid in uuids else []


def one_device(info: DeviceInfo, usage: DeviceUsage, memory_factor: float, core_capacity: int) -> ColumnView:
    """The rules' columns for one device holding ``usage``, as a one-row view (``memory_factor`` and
    ``core_capacity``: the rule's, which a device's own node settings replace)."""
    traits = info.traits

    def one(value: Any) -> Any:
        return np.array([value])  # Python ints and bools give the columns' int64 and bool

    source = _OneDevice(
        vendor=one(0),
        model=one(0),
        numa=one(-1 if info.numa_node is None else info.numa_node),
        has_traits=one(traits is not None),
        tflops=np.array([[traits.peak_tflops.get(p, 0.0) if traits else 0.0 for p in PRECISIONS]]),
        healthy=one(info.healthy),
        exclusive=one(usage.exclusive),
        sharers=one(usage.sharers),
        split=one(info.split_count),
        mem_total=one(info.memory_mib),
        mem_used=one(usage.booked_mib),
        mem_cap=one(device_memory_capacity(info, memory_factor)),
        cores_used=one(usage.cores),
        core_cap=one(device_core_capacity(info, core_capacity)),
        context_mib=one(info.context_mib),
    )
    return ColumnView(source, slice(1), _OneDeviceNames(info))



_USAGE_COLUMNS = {"mem_used", "cores_used", "sharers", "exclusive", "node_cpu_used", "node_mem_used"}
_MAY_RETURN = {"healthy", "node_ok"}


class AsIfEmpty:
    """A source's columns as they would be with nothing allocated, every device healthy and every node
    schedulable.

    For "could this ever fit here": usage goes away as allocations are released, an unhealthy
    device may recover and a cordoned node may be opened again.
    """

    def __init__(self, source: Any) -> None:
        self._source = source

    def __getattr__(self, name: str) -> Any:
        column = getattr(self._source, name)
        if name in _USAGE_COLUMNS:
            emptied = np.zeros(column.shape, dtype=column.dtype)
        elif name in _MAY_RETURN:
            emptied = np.ones(column.shape, dtype=column.dtype)
        else:
            return column
        self.__dict__[name] = emptied  # built once: a refusal's explanation reads it for many rows
        return emptied
