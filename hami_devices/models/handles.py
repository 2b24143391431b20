"""What an allocation is: the grant on each device and the environment of each workload process group."""

from __future__ import annotations

import time
import uuid as uuid_module
from typing import Any

from pydantic import Field, PrivateAttr, field_validator, model_validator

from hami_devices.errors import AmbiguousEnvironment, InvalidRequest
from hami_devices.models.base import HamiModel
from hami_devices.models.devices import DeviceInfo
from hami_devices.models.requests import CorePolicy, ResourceRequest


class Grant(HamiModel):
    """What one device gives to one allocation."""

    uuid: str
    """The device granted."""
    node: str
    """The device's node."""
    vendor: str
    """The device's vendor."""
    model: str
    """The device's model."""
    index: int
    """The device's index on its node, as its vendor numbers it."""
    part: int = Field(ge=0, description="index of the request part this grant serves")
    memory_mib: int = Field(ge=0)
    """Device memory granted, in MiB."""
    cores: int = Field(ge=0, le=100)
    """Compute granted, in percent of the device (100: exclusive)."""
    exclusive: bool = False
    """Whether the allocation holds the device alone."""
    partition: str | None = None
    """The partition profile granted (a MIG profile, vNPU template or sMLU profile), if any."""
    partition_uuid: str | None = Field(default=None, description="vendor id of a created partition (MIG uuid ...)")
    core_policy: CorePolicy = Field(
        default="cap",
        description="how the limiter keeps the grant's cores (cap, share, unlimited): the request part's "
        "core_policy, else device-plugin.core-policy, set when the allocation is realised",
    )
    context_mib: int = Field(
        default=0,
        ge=0,
        description="device memory booked for the allocation's context on this device, on top of memory_mib "
        "(outside the limiter's share); 0 for exclusive and partition grants, which hold it inside",
    )

    @property
    def booked_mib(self) -> int:
        """What the grant takes of the device's memory in the scheduler's books: the share and its context."""
        return self.memory_mib + self.context_mib

    @classmethod
    def on(
        cls,
        info: DeviceInfo,
        part: int,
        memory_mib: int,
        cores: int,
        *,
        exclusive: bool = False,
        partition: str | None = None,
        partition_uuid: str | None = None,
    ) -> Grant:
        """A grant on the device ``info`` describes (its identity fields copied from it).

        A shared grant books one context of the device's model on top of its memory (``context_mib``): the
        workload's processes create it, outside the share, on a device others use too.  An exclusive
        grant has the whole device and a partition its own slice, so their contexts live inside them.
        """
        return cls(
            uuid=info.uuid,
            node=info.node,
            vendor=info.vendor,
            model=info.model,
            index=info.index,
            part=part,
            memory_mib=memory_mib,
            cores=cores,
            exclusive=exclusive,
            partition=partition,
            partition_uuid=partition_uuid,
            context_mib=0 if exclusive or partition else info.context_mib,
        )


def _new_handle_id() -> str:
    return uuid_module.uuid4().hex


def group_key(node: str, vendor: str) -> str:
    """Key of one (node, vendor) process group in a handle's environments and regions."""
    return f"{node}/{vendor}"


class DeviceHandle(HamiModel):
    """One allocation: its grants and the environment for each workload process group.

    A process group is the grants of one vendor on one node: each vendor's limiter
    numbers its devices by position in that vendor's visible-devices list, and a
    process runs on one node, so each group has its own environment and region.
    JSON round-trippable, so a node agent can persist it and a workload launcher
    can receive it.
    """

    id: str = Field(default_factory=_new_handle_id)
    """The allocation id, unique in its ledger."""
    request: ResourceRequest
    """The request as it was granted (defaults filled in)."""
    grants: list[Grant]
    """One grant per device, for every part of the request."""
    node: str | None = Field(
        default=None,
        description="the node that hosts the task (its host CPU and memory); unset: its first grant's node",
    )
    environments: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="'node/vendor' -> variables for that group's workload processes"
    )
    regions: dict[str, str] = Field(
        default_factory=dict, description="'node/vendor' -> limiter shared-region file of that group"
    )
    created_at: float = Field(default_factory=time.time)
    """When it was granted, in seconds since the epoch."""
    metadata: dict[str, str] = Field(
        default_factory=dict,
        description="the caller's workload identity (workload, namespace, pod, container, queue, owner, ...)",
    )
    # Where hd.allocate recorded it, so hd.release(handle) needs nothing else; not serialised.
    _ledger: Any = PrivateAttr(default=None)
    _adapters: Any = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _from_single_environment(cls, data: Any) -> Any:
        """Handles stored before environments were per group had one ``env`` and regions keyed by vendor."""
        if not isinstance(data, dict) or "env" not in data:
            return data
        data = dict(data)
        env = data.pop("env")
        grants = data.get("grants") or []
        first = grants[0] if grants else {}
        node_of = {g.get("vendor"): g.get("node") for g in grants if isinstance(g, dict)}
        if isinstance(first, dict) and env:
            data.setdefault("environments", {group_key(first.get("node", "localhost"), first.get("vendor", "")): env})
        regions = data.get("regions") or {}
        data["regions"] = {
            (k if "/" in k else group_key(node_of.get(k) or "localhost", k)): v for k, v in regions.items()
        }
        return data

    @field_validator("metadata")
    @classmethod
    def _metadata_keys(cls, metadata: dict[str, str]) -> dict[str, str]:
        # Keys become label names and CSV columns downstream; an empty or padded key would be unaddressable.
        for key in metadata:
            if not key or key != key.strip():
                raise ValueError(f"metadata key {key!r} must be non-empty with no surrounding spaces")
        return metadata

    def __eq__(self, other: object) -> bool:
        """Equal when the allocations are; where a handle was recorded (its ledger) is not part of it."""
        if not isinstance(other, DeviceHandle):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]

    @property
    def host(self) -> str | None:
        """The node that hosts the task: ``node``, else the node of its first grant (``None``: unknown)."""
        return self.node or (self.grants[0].node if self.grants else None)

    @property
    def uuids(self) -> list[str]:
        return [g.uuid for g in self.grants]

    @property
    def groups(self) -> list[tuple[str, str]]:
        """The (node, vendor) process groups, in grant order."""
        return list(dict.fromkeys((g.node, g.vendor) for g in self.grants))

    @property
    def env(self) -> dict[str, str]:
        """The workload environment, when the allocation has a single (node, vendor) group.

        Raises ``AmbiguousEnvironment`` otherwise: merging two groups would let one
        vendor's limits and region overwrite the other's.
        """
        if len(self.environments) > 1:
            raise AmbiguousEnvironment(
                f"allocation {self.id} spans {sorted(self.environments)}; use env_for(node, vendor)"
            )
        return next(iter(self.environments.values()), {})

    def env_for(self, node: str | None = None, vendor: str | None = None) -> dict[str, str]:
        """The environment of one (node, vendor) group; either may be omitted where it is unambiguous."""
        keys = [
            group_key(n, v)
            for n, v in self.groups
            if (node is None or n == node) and (vendor is None or v == vendor)
        ]
        if not keys:
            raise InvalidRequest("group", f"allocation {self.id} has no grants on node={node!r} vendor={vendor!r}")
        if len(keys) > 1:
            raise AmbiguousEnvironment(f"allocation {self.id}: {keys} match; name the node and the vendor")
        return self.environments.get(keys[0], {})

    def region_for(self, node: str, vendor: str) -> str | None:
        return self.regions.get(group_key(node, vendor))
