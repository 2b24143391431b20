"""Inventory YAML -> nodes of DeviceInfo, the simulated back end's input.

An inventory names, per node, groups of devices by vendor, model and count;
everything else is filled from the traits catalog and may be overridden.
A node entry with ``replicas: N`` stands for N identical nodes (``name-0`` ..).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hami_devices import traits as traits_catalog
from hami_devices.errors import InvalidInventory, InvalidRequest
from hami_devices.models import DeviceInfo, DeviceTraits, Health, Taint, first_error
from hami_devices.yamlfile import located, read_yaml

FABRIC_LINKS = {"nvlink", "hccs", "mlu-link", "xgmi"}
PAIR_SCORE_FABRIC = 100
PAIR_SCORE_PCIE_SAME_NUMA = 40
PAIR_SCORE_PCIE_CROSS_NUMA = 10

MigMode = Literal["strict", "flexible", "disabled"]
MIG_MODE_ATTRIBUTE = "device-plugin.mig-mode"
"""The device attribute that replaces the configuration's ``device-plugin.mig-mode`` for one device: set from
an inventory's ``mig_mode`` (node or device group) and from a ``node-config`` entry's ``mig-mode``."""
_MIG_MODE_HELP = "replaces device-plugin.mig-mode on these devices (strict, flexible or disabled)"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeviceGroupSpec(_Strict):
    vendor: str = Field(min_length=1)
    model: str = Field(min_length=1)
    count: int = Field(default=1, ge=1, le=64)
    link: Literal["nvlink", "hccs", "mlu-link", "xgmi", "pcie"] | None = None
    numa_nodes: int = Field(default=1, ge=1, le=8)
    memory_mib: int | None = Field(default=None, gt=0)
    split_count: int | None = Field(default=None, ge=1)
    unhealthy: list[int] = Field(default_factory=list, description="indexes within this group")
    attributes: dict[str, str] = Field(default_factory=dict)
    mig_mode: MigMode | None = Field(default=None, description=_MIG_MODE_HELP + "; over the node's")


class NodeEntrySpec(_Strict):
    name: str = Field(min_length=1)
    replicas: int = Field(default=1, ge=1, le=100_000)
    cpu_milli: int = Field(default=64_000, ge=0)
    memory_mib: int = Field(default=262_144, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list, description="keep off requests that do not tolerate them")
    devices: list[DeviceGroupSpec] = Field(default_factory=list)
    mig_mode: MigMode | None = Field(default=None, description=_MIG_MODE_HELP + " of the node")


class InventorySpec(_Strict):
    nodes: list[NodeEntrySpec] = Field(min_length=1)


class NodeSpec(BaseModel):
    """One node: host CPU and memory, labels, taints, and its devices."""

    name: str = Field(description="the node's name, as the cluster knows it")
    cpu_milli: int = Field(description="host CPU, in thousandths of a core")
    memory_mib: int = Field(description="host memory, in MiB")
    labels: dict[str, str] = Field(default_factory=dict, description="labels a request's node_selector matches")
    taints: list[Taint] = Field(default_factory=list, description="taints a request must tolerate to land here")
    devices: list[DeviceInfo] = Field(default_factory=list, description="the node's devices")


class Inventory(BaseModel):
    """A cluster described in a file rather than discovered: its nodes, each with its devices.

    `load_inventory` reads one; `hd.discover(inventory)` and `hd.build_engine(inventory)` run the simulated
    back end on it, with the same adapters, accounting and engine as real hardware.
    """

    nodes: list[NodeSpec] = Field(description="the nodes, in the file's order")
    source: str | None = Field(default=None, description="the file it was read from, for error messages")

    def devices(self) -> list[DeviceInfo]:
        """Every device of every node, in the file's order."""
        return [d for n in self.nodes for d in n.devices]


def simulated_uuid(vendor: str, node: str, index: int) -> str:
    digest = hashlib.sha1(f"{vendor}/{node}/{index}".encode()).hexdigest()
    prefix = {"nvidia": "GPU", "ascend": "NPU", "cambricon": "MLU"}.get(vendor, vendor.upper())
    return f"{prefix}-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _pair_score(link: str | None, numa_a: int | None, numa_b: int | None) -> int:
    if link in FABRIC_LINKS:
        return PAIR_SCORE_FABRIC
    return PAIR_SCORE_PCIE_SAME_NUMA if numa_a == numa_b else PAIR_SCORE_PCIE_CROSS_NUMA


TraitsLookup = Callable[[str, str], DeviceTraits | None]
"""(vendor, model) -> traits, for vendors the shipped catalog does not know."""


def _traits(group: DeviceGroupSpec, traits_for: TraitsLookup | None) -> DeviceTraits:
    found = traits_catalog.find(group.vendor, group.model)
    if found is None and traits_for is not None:
        found = traits_for(group.vendor, group.model)
    return found or traits_catalog.lookup(group.vendor, group.model)  # lookup raises the named error


def _attributes(group: DeviceGroupSpec, node_mig_mode: MigMode | None) -> dict[str, str]:
    attributes = {"backend": "simulated", **group.attributes}
    mig_mode = group.mig_mode or node_mig_mode
    if mig_mode is not None:
        attributes[MIG_MODE_ATTRIBUTE] = mig_mode
    return attributes


def _node_devices(
    node_name: str,
    groups: list[DeviceGroupSpec],
    where: str,
    split_count_default: int,
    traits_for: TraitsLookup | None,
    mig_mode: MigMode | None = None,
) -> list[DeviceInfo]:
    devices: list[DeviceInfo] = []
    next_index: dict[str, int] = {}
    group_of: list[DeviceGroupSpec] = []
    for g, group in enumerate(groups):
        try:
            traits = _traits(group, traits_for)
        except InvalidRequest as exc:
            raise InvalidInventory(f"{where}.devices.{g}.model", exc.message) from None
        bad = [i for i in group.unhealthy if i >= group.count]
        if bad:
            raise InvalidInventory(f"{where}.devices.{g}.unhealthy", f"indexes {bad} are beyond count {group.count}")
        given = group.attributes.get(MIG_MODE_ATTRIBUTE)
        if given is not None and given not in get_args(MigMode):
            raise InvalidInventory(f"{where}.devices.{g}.attributes", f"{MIG_MODE_ATTRIBUTE} {given!r} is not one of "
                                   + ", ".join(get_args(MigMode)))
        attributes = _attributes(group, mig_mode)
        for i in range(group.count):
            index = next_index.get(group.vendor, 0)
            next_index[group.vendor] = index + 1
            numa = i * group.numa_nodes // group.count
            unhealthy = i in group.unhealthy
            devices.append(
                DeviceInfo(
                    uuid=simulated_uuid(group.vendor, node_name, index),
                    index=index,
                    vendor=group.vendor,
                    model=traits.model,
                    node=node_name,
                    memory_mib=group.memory_mib or traits.memory_mib,
                    numa_node=numa,
                    pci_bus_id=f"0000:{0x10 + len(devices):02x}:00.0",
                    health=Health.UNHEALTHY if unhealthy else Health.HEALTHY,
                    health_reason="marked unhealthy in the inventory" if unhealthy else None,
                    split_count=group.split_count or split_count_default,
                    traits=traits,
                    attributes=dict(attributes),
                )
            )
            group_of.append(group)
    for a, dev_a in enumerate(devices):
        scores = {
            dev_b.uuid: _pair_score(group_of[a].link if group_of[a] is group_of[b] else None,
                                    dev_a.numa_node, dev_b.numa_node)
            for b, dev_b in enumerate(devices)
            if b != a and dev_b.vendor == dev_a.vendor
        }
        devices[a] = dev_a.model_copy(update={"topology": scores})
    return devices


def parse_inventory(
    data: Any,
    source: str = "<inventory>",
    *,
    split_count_default: int = 10,
    traits_for: TraitsLookup | None = None,
) -> Inventory:
    """Validate and expand an inventory.

    ``split_count_default`` applies where a group gives none; ``traits_for`` finds
    traits of models the shipped catalog does not know (third-party vendors).
    """
    try:
        spec = InventorySpec.model_validate(data)
    except ValidationError as exc:
        field, message = first_error(exc, InventorySpec)
        raise InvalidInventory(field, message, source=source) from None
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    try:
        for n, entry in enumerate(spec.nodes):
            names = [entry.name] if entry.replicas == 1 else [f"{entry.name}-{r}" for r in range(entry.replicas)]
            for name in names:
                if name in seen:
                    raise InvalidInventory(f"nodes.{n}.name", f"duplicate node name {name!r}")
                seen.add(name)
                nodes.append(
                    NodeSpec(
                        name=name,
                        cpu_milli=entry.cpu_milli,
                        memory_mib=entry.memory_mib,
                        labels=entry.labels,
                        taints=entry.taints,
                        devices=_node_devices(
                            name, entry.devices, f"nodes.{n}", split_count_default, traits_for, entry.mig_mode
                        ),
                    )
                )
    except InvalidInventory as exc:
        raise InvalidInventory(exc.field, exc.message, source=source) from None
    return Inventory(nodes=nodes, source=source)


def load_inventory(
    path: str | Path, *, split_count_default: int = 10, traits_for: TraitsLookup | None = None
) -> Inventory:
    """Read and validate an inventory file (see ``examples/cluster.yaml``).

    Args:
        path: the YAML file: ``nodes``, each with its host CPU and memory, labels, taints and devices.
        split_count_default: the sharers a device takes when its entry does not say.
        traits_for: where a model's traits come from; the shipped catalog when omitted.

    Returns:
        The inventory, each device with a stable simulated uuid and its model's traits.

    Raises:
        InvalidInventory: the file cannot be read, is not YAML, or breaks the schema; the message names the
            file, the line and every wrong key.
    """
    data = read_yaml(path, InvalidInventory)
    with located(path):
        return parse_inventory(data, source=str(path), split_count_default=split_count_default, traits_for=traits_for)
