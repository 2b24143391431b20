"""Pydantic models: device facts, traits, requests, handles and metrics.

Units (see DESIGN.md): memory in MiB (int); ``cores`` is a percentage of one
device, 0..100, where 100 means exclusive use.  Vendor-native units appear
only inside ``PartitionProfile.native``.

Every model forbids unknown fields and turns pydantic's ``ValidationError``
into ``InvalidRequest`` naming the dotted field path, so callers catch one
typed error whatever model they fed.
"""

from __future__ import annotations

import time
import uuid as uuid_module
from enum import StrEnum
from typing import Any, Literal, Self, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic._internal._model_construction import ModelMetaclass

from hami_devices.errors import InvalidRequest

NOT_AVAILABLE: Literal["n/a"] = "n/a"
"""The explicit value of a metric that a device cannot report (never 0)."""

NotAvailable: TypeAlias = Literal["n/a"]
MetricValue: TypeAlias = float | NotAvailable

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
PRECISION_BYTES: dict[str, float] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


def is_available(value: object) -> bool:
    return value != NOT_AVAILABLE and value is not None


def first_error(exc: ValidationError) -> tuple[str, str]:
    """The dotted location and message of the first pydantic error."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err.get("loc", ())) or "<root>"
    return field, str(err.get("msg", "invalid value"))


class _TypedErrorsMeta(ModelMetaclass):
    """Turns a failed ``Model(...)`` call into ``InvalidRequest``.

    Hooking the metaclass rather than ``__init__`` matters: a model with its own
    ``__init__`` makes pydantic call it for nested values too, which would wrap
    our error again and lose the dotted path.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as exc:
            field, message = first_error(exc)
            raise InvalidRequest(field, message) from None


class HamiModel(BaseModel, metaclass=_TypedErrorsMeta):
    """Base of all SDK models: strict about unknown fields, typed errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            field, message = first_error(exc)
            raise InvalidRequest(field, message) from None

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate_json(json_data, *args, **kwargs)
        except ValidationError as exc:
            field, message = first_error(exc)
            raise InvalidRequest(field, message) from None


class Health(StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


class TaskType(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"
    BATCH = "batch"
    INTERACTIVE = "interactive"


class Interconnect(HamiModel):
    """The device-to-device link a model offers (NVLink, HCCS, MLU-Link, or PCIe only)."""

    kind: str
    bandwidth_gbps: float = Field(ge=0, description="aggregate GB/s per device")


class DeviceTraits(HamiModel):
    """Spec-sheet facts of one accelerator model, from the shipped catalog."""

    vendor: str
    model: str
    generation: str
    year: int
    memory_mib: int = Field(gt=0)
    memory_bandwidth_gbps: float = Field(gt=0)
    peak_tflops: dict[Precision, float] = Field(
        description="dense peak per precision; a precision absent here is unsupported"
    )
    interconnect: Interconnect
    tdp_watts: float = Field(gt=0)
    relative_cost: float = Field(gt=0, description="price index against an A100-80GB = 1.0")
    aliases: list[str] = Field(default_factory=list)
    notes: str | None = None

    def supports(self, precision: str) -> bool:
        return bool(self.peak_tflops.get(precision, 0.0) > 0)  # type: ignore[call-overload]


class PartitionProfile(HamiModel):
    """One way a vendor can carve a device: MIG profile, vNPU template, sMLU profile."""

    name: str
    memory_mib: int = Field(gt=0)
    cores: int = Field(ge=1, le=100, description="compute share in percent of the whole device")
    native: dict[str, int] = Field(default_factory=dict, description="vendor units, e.g. {'aicore': 2}")
    max_instances: int = Field(ge=1)
    placements: list[int] = Field(default_factory=list, description="valid start slots, where the vendor has them")


class DeviceInfo(HamiModel):
    """Static facts of one physical device on one node."""

    uuid: str = Field(min_length=1)
    index: int = Field(ge=0)
    vendor: str = Field(min_length=1)
    model: str = Field(min_length=1)
    node: str = "localhost"
    memory_mib: int = Field(gt=0)
    numa_node: int | None = None
    pci_bus_id: str | None = None
    health: Health = Health.HEALTHY
    health_reason: str | None = None
    native_compute_units: dict[str, int] = Field(default_factory=dict)
    partitions: list[PartitionProfile] = Field(default_factory=list)
    split_count: int = Field(default=10, ge=1)
    traits: DeviceTraits | None = None
    topology: dict[str, int] = Field(
        default_factory=dict, description="pair score 0..100 to each other device uuid on the node"
    )
    attributes: dict[str, str] = Field(default_factory=dict, description="vendor extras (driver, MIG mode ...)")

    @property
    def healthy(self) -> bool:
        return self.health == Health.HEALTHY


class RequestPart(HamiModel):
    """One tier of a request: ``count`` devices, each granted this share."""

    name: str | None = None
    count: int = Field(default=1, ge=1, le=64)
    memory_mib: int | None = Field(default=None, gt=0)
    memory_percent: float | None = Field(default=None, gt=0, le=100)
    cores: int = Field(default=0, ge=0, le=100, description="percent of one device; 100 = exclusive")
    vendors: list[str] = Field(default_factory=list)
    exclude_vendors: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)
    exclude_models: list[str] = Field(default_factory=list)
    uuids: list[str] = Field(default_factory=list)
    exclude_uuids: list[str] = Field(default_factory=list)
    partition: str | None = Field(default=None, description="a profile name, or 'auto' for the smallest that fits")
    precision: Precision | None = None
    numa_node: int | None = Field(default=None, ge=0)
    virtual_memory: bool = Field(
        default=False,
        alias="virtual-memory",
        description="what the card cannot hold physically of this share is served from host memory (limiter)",
    )

    @model_validator(mode="after")
    def _one_memory_form(self) -> Self:
        if self.memory_mib is not None and self.memory_percent is not None:
            raise ValueError("give memory_mib or memory_percent, not both")
        return self

    @property
    def exclusive(self) -> bool:
        return self.cores >= 100

    def memory_for(self, device_memory_mib: int) -> int:
        """The MiB this part needs on a device of ``device_memory_mib``."""
        if self.memory_mib is not None:
            return self.memory_mib
        percent = 100.0 if self.memory_percent is None else self.memory_percent
        return max(1, int(device_memory_mib * percent / 100.0))


class ResourceRequest(HamiModel):
    """What a task asks for: one or more parts, placed together or not at all."""

    name: str | None = None
    task_type: TaskType = TaskType.BATCH
    # Host resources come before the parts so that the parts' check can see them.
    host_cpu_milli: int = Field(default=0, ge=0)
    host_memory_mib: int = Field(default=0, ge=0)
    parts: list[RequestPart] = Field(
        default_factory=list,
        validate_default=True,
        description="device parts; none for a task that needs host CPU and memory only",
    )
    same_node: bool = True
    topology: Literal["none", "preferred", "required"] = "none"
    latency_slo_ms: float | None = Field(default=None, gt=0)
    priority: int = Field(default=0, description="higher wins; only priority preemption inside a queue reads it")
    preemptible: bool = Field(
        default=False,
        description="interruptible: the scheduler may evict the task (reclaim, priority or fair-share preemption)",
    )
    recomputable: bool = Field(
        default=True,
        description="an evicted task can be run again from its start or last checkpoint, losing only compute time "
        "(the queue loop requeues it); false: an eviction loses what cannot be redone, so such a task is evicted "
        "only when no recomputable choice exists, and is not requeued. Read only when preemptible is true",
    )
    queue: str = "default"
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("parts")
    @classmethod
    def _asks_for_something(cls, parts: list[RequestPart], info: ValidationInfo) -> list[RequestPart]:
        if not parts and not (info.data.get("host_cpu_milli") or info.data.get("host_memory_mib")):
            raise ValueError("a request needs at least one part, or host_cpu_milli / host_memory_mib")
        return parts

    @property
    def device_count(self) -> int:
        return sum(p.count for p in self.parts)

    @classmethod
    def single(cls, **part: Any) -> ResourceRequest:
        """Shorthand for a one-part request; top-level keys go to the request."""
        top = {k: part.pop(k) for k in list(part) if k in cls.model_fields and k != "parts"}
        return cls(parts=[RequestPart(**part)], **top)


class Grant(HamiModel):
    """What one device gives to one allocation."""

    uuid: str
    node: str
    vendor: str
    model: str
    index: int
    part: int = Field(ge=0, description="index of the request part this grant serves")
    memory_mib: int = Field(ge=0)
    cores: int = Field(ge=0, le=100)
    exclusive: bool = False
    partition: str | None = None
    partition_uuid: str | None = Field(default=None, description="vendor id of a created partition (MIG uuid ...)")

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
        """A grant on the device ``info`` describes (its identity fields copied from it)."""
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
    request: ResourceRequest
    grants: list[Grant]
    environments: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="'node/vendor' -> variables for that group's workload processes"
    )
    regions: dict[str, str] = Field(
        default_factory=dict, description="'node/vendor' -> limiter shared-region file of that group"
    )
    created_at: float = Field(default_factory=time.time)
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
            from hami_devices.errors import AmbiguousEnvironment

            raise AmbiguousEnvironment(
                f"allocation {self.id} spans {sorted(self.environments)}; use env_for(node, vendor)"
            )
        return next(iter(self.environments.values()), {})

    def env_for(self, node: str | None = None, vendor: str | None = None) -> dict[str, str]:
        """The environment of one (node, vendor) group; either may be omitted where it is unambiguous."""
        from hami_devices.errors import AmbiguousEnvironment, InvalidRequest

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


Allocation = DeviceHandle


class ProcessUsage(HamiModel):
    pid: int
    memory_used_mib: MetricValue
    utilization_pct: MetricValue = NOT_AVAILABLE


class AllocationUsage(HamiModel):
    """One allocation's grant on one device, with the live usage the limiter records."""

    handle_id: str
    memory_limit_mib: int
    cores_limit: int
    metadata: dict[str, str] = Field(default_factory=dict, description="the allocation's workload identity")
    memory_used_mib: MetricValue = NOT_AVAILABLE
    utilization_pct: MetricValue = NOT_AVAILABLE
    processes: list[ProcessUsage] = Field(default_factory=list)
    memory_spilled_mib: MetricValue = Field(
        default=NOT_AVAILABLE, description="the part of memory_used_mib served from host memory (virtual memory)"
    )


class Metrics(HamiModel):
    """Device-wide figures plus each allocation's usage.  ``"n/a"`` means not reportable."""

    uuid: str
    vendor: str
    model: str
    timestamp: float = Field(default_factory=time.time)
    health: Health
    memory_total_mib: int
    memory_used_mib: MetricValue
    utilization_pct: MetricValue
    temperature_c: MetricValue
    power_w: MetricValue
    allocated_memory_mib: int = 0
    allocated_cores: int = 0
    sharers: int = 0
    allocations: list[AllocationUsage] = Field(default_factory=list)
    processes: list[ProcessUsage] = Field(default_factory=list)
    extra: dict[str, MetricValue] = Field(default_factory=dict)
