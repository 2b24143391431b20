"""The columns the placement rules read, for many devices at once or for one.

A rule never sees a ``DeviceInfo`` or a ``ClusterState``: it sees a view, a
frozen dataclass of columns (``vendor``, ``mem_used``, ``split`` ...) indexed by
row.  The scheduling engine's cluster state keeps those columns as arrays over
every device and node of a cluster and cuts views out of them (``Tables.view``,
``NodeTable.node_view``); ``one_device`` builds the same view, one row long,
from a device's facts and usage for the allocator's re-check.  Both therefore
run the same rule code, vectorised.

Names in a request (vendors, models, uuids) are resolved to the interned ids the
columns hold through a ``Names`` resolver, so matching compares integers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hami_devices.accounting import DeviceUsage, device_core_capacity, device_memory_capacity
from hami_devices.models import PRECISIONS, DeviceInfo, Taint
from hami_devices.traits import normalize_model_name

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
Index = IntArray | slice


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


@dataclass(frozen=True)
class Rows:
    """The rows ``at`` of a table that a view holds (a slice cuts views of the table's arrays, an index array
    gathers copies)."""

    at: Index

    @property
    def rows(self) -> IntArray:
        """The table rows this view holds (what uuid selectors and anti-affinity are resolved to)."""
        at = self.at
        if isinstance(at, slice):
            return np.arange(at.start or 0, at.stop)
        return at

    def __len__(self) -> int:
        at = self.at
        return (at.stop - (at.start or 0)) if isinstance(at, slice) else int(at.size)


@dataclass(frozen=True)
class DeviceView(Rows):
    """The columns the device rules read, one entry per device row of ``at``."""

    names: Names
    vendor: IntArray  # interned vendor id
    model: IntArray  # interned model id
    numa: IntArray  # NUMA node, -1 when unknown
    has_traits: BoolArray  # the model is in the traits catalog
    tflops: FloatArray  # peak per precision (rows x len(PRECISIONS)); 0 where unsupported
    healthy: BoolArray
    exclusive: BoolArray  # held by an exclusive grant (0 or 1 holders)
    sharers: IntArray
    split: IntArray  # the most sharers the device takes
    mem_total: IntArray
    mem_used: IntArray  # the shares and the contexts booked on top of them
    mem_cap: IntArray  # MiB that may be granted: total x the rule's memory factor
    cores_used: IntArray
    core_cap: IntArray  # cores (percent) that may be granted
    context_mib: IntArray  # MiB one context of the model takes beside a shared grant (traits catalog; 0: none known)

    def as_if_empty(self) -> DeviceView:
        """These devices with nothing allocated and every one healthy: "could this ever fit here" (usage goes
        away as allocations are released, an unhealthy device may recover)."""
        return replace(
            self,
            healthy=np.ones_like(self.healthy),
            exclusive=np.zeros_like(self.exclusive),
            sharers=np.zeros_like(self.sharers),
            mem_used=np.zeros_like(self.mem_used),
            cores_used=np.zeros_like(self.cores_used),
        )


@dataclass(frozen=True)
class NodeView(Rows):
    """The columns the node rules read, one entry per node row of ``at``; labels and taints are asked of
    ``names``."""

    names: NodeNames
    node_ok: BoolArray  # the node is there and schedulable
    node_cpu_used: IntArray  # host CPU, millicores
    node_cpu_total: IntArray
    node_mem_used: IntArray  # host memory, MiB
    node_mem_total: IntArray

    def as_if_empty(self) -> NodeView:
        """These nodes with nothing allocated and every one schedulable (a cordoned node may be opened again)."""
        return replace(
            self,
            node_ok=np.ones_like(self.node_ok),
            node_cpu_used=np.zeros_like(self.node_cpu_used),
            node_mem_used=np.zeros_like(self.node_mem_used),
        )


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


def _int(value: int) -> IntArray:
    return np.array([value], dtype=np.int64)


def _flag(value: bool) -> BoolArray:
    return np.array([value], dtype=np.bool_)


def one_device(info: DeviceInfo, usage: DeviceUsage, memory_factor: float, core_capacity: int) -> DeviceView:
    """The rules' columns for one device holding ``usage``, as a one-row view (``memory_factor`` and
    ``core_capacity``: the rule's, which a device's own node settings replace)."""
    traits = info.traits
    return DeviceView(
        at=slice(1),
        names=_OneDeviceNames(info),
        vendor=_int(0),
        model=_int(0),
        numa=_int(-1 if info.numa_node is None else info.numa_node),
        has_traits=_flag(traits is not None),
        tflops=np.array([[traits.peak_tflops.get(p, 0.0) if traits else 0.0 for p in PRECISIONS]]),
        healthy=_flag(info.healthy),
        exclusive=_flag(usage.exclusive),
        sharers=_int(usage.sharers),
        split=_int(info.split_count),
        mem_total=_int(info.memory_mib),
        mem_used=_int(usage.booked_mib),
        mem_cap=_int(device_memory_capacity(info, memory_factor)),
        cores_used=_int(usage.cores),
        core_cap=_int(device_core_capacity(info, core_capacity)),
        context_mib=_int(info.context_mib),
    )
