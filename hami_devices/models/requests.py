"""What a task asks for: one or more parts, placed together or not at all."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, Literal, Self

from pydantic import Field, ValidationInfo, field_validator, model_validator

from hami_devices.models.base import HamiModel, Precision
from hami_devices.models.constraints import RequestPolicy, Toleration


class TaskType(StrEnum):
    """What a task does, which the trait-affinity and latency-aware scorers weigh against each model's traits
    (training prefers throughput and bf16, inference and interactive work latency and memory bandwidth)."""

    TRAINING = "training"
    INFERENCE = "inference"
    BATCH = "batch"
    INTERACTIVE = "interactive"


CorePolicy = Literal["cap", "share", "unlimited"]
"""How a shared grant's compute (its ``cores``) is kept on the device:

- ``cap``: a ceiling, at most ``cores`` % of the device's time over a short window, even on an idle card;
- ``share``: a guarantee and a weight, at least ``cores`` % whenever the workload wants it, and time the
  others leave idle on top (a busy card is never left idle);
- ``unlimited``: the cores are booked by the scheduler but the limiter does not pace compute (HAMi's
  ``gpuCorePolicy: disable``).

Exclusive grants and hardware partitions are never paced, whatever their policy."""
CORE_POLICIES: tuple[CorePolicy, ...] = ("cap", "share", "unlimited")

ModelSizer = Callable[["ModelReference", "str | None"], int]


class _Sizer:
    size: ModelSizer | None = None


_SIZER = _Sizer()


def use_model_sizer(size: ModelSizer) -> None:
    """Resolve ``model_ref`` parts with ``size`` (``hami_devices`` installs ``sizing.reference.resolve_memory``;
    the models never import the sizing layer above them)."""
    _SIZER.size = size


class ModelReference(HamiModel):
    """A model file that sizes a part in place of ``memory_mib`` (``hami_devices.sizing``, the [precision] extra).

    Resolved once, when the part is built: ``memory_mib`` is then the request figure of the model's
    mixed-precision plan (the part's ``precision`` forces the plan's precision), and travels with it.
    """

    path: str = Field(min_length=1, description="an ONNX model file")
    batch: int = Field(default=1, ge=1)
    task: Literal["inference", "training"] = "inference"
    optimizer: Literal["adam", "sgd-momentum", "sgd"] = "adam"
    headroom: float = Field(default=0.2, ge=0, le=4)
    memory_mib: int | None = Field(default=None, gt=0, description="the figure it resolved to")


class RequestPart(HamiModel):
    """One tier of a request: ``count`` devices, each granted this share.

    A part that omits ``count``, ``cores`` or its memory (``memory_mib``, ``memory_percent``,
    ``model_ref``) takes the engine's defaults: ``scheduler.default-count`` (1),
    ``scheduler.default-cores`` (0) and ``scheduler.default-memory`` (0: the whole device), as
    HAMi's ``defaultGPUNum``, ``defaultCores`` and ``defaultMem`` do.
    """

    name: str | None = None
    """A name for the part, used in refusals and anti-affinity."""
    count: int = Field(default=1, ge=1, le=64, description="devices; omitted: scheduler.default-count")
    memory_mib: int | None = Field(
        default=None, gt=0, description="MiB per device; with no memory_percent either: scheduler.default-memory"
    )
    memory_percent: float | None = Field(default=None, gt=0, le=100, description="percent of each device's memory")
    cores: int = Field(
        default=0, ge=0, le=100,
        description="percent of one device; 100 = exclusive; omitted: scheduler.default-cores",
    )
    core_policy: CorePolicy | None = Field(
        default=None,
        description="how the cores are kept: cap (at most), share (at least, idle time on top) or unlimited "
        "(booked, not paced); omitted: device-plugin.core-policy",
    )
    vendors: list[str] = Field(default_factory=list)
    """Vendors the part may use (empty: any)."""
    exclude_vendors: list[str] = Field(default_factory=list)
    """Vendors the part must not use."""
    models: list[str] = Field(default_factory=list)
    """Models the part may use, by catalog name or alias (empty: any)."""
    exclude_models: list[str] = Field(default_factory=list)
    """Models the part must not use."""
    uuids: list[str] = Field(default_factory=list)
    """The only devices the part may use (empty: any)."""
    exclude_uuids: list[str] = Field(default_factory=list)
    """Devices the part must not use."""
    partition: str | None = Field(default=None, description="a profile name, or 'auto' for the smallest that fits")
    precision: Precision | None = None
    """A precision the device must run (fp32, tf32, bf16, fp16, fp8, int8), from its traits."""
    numa_node: int | None = Field(default=None, ge=0)
    """The NUMA node the part's devices must sit on."""
    virtual_memory: bool = Field(
        default=False,
        alias="virtual-memory",
        description="what the card cannot hold physically of this share is served from host memory (limiter)",
    )
    model_ref: ModelReference | None = Field(default=None, description="size the part from a model (sizing)")
    anti_affinity: list[str] = Field(
        default_factory=list,
        description="names of other parts of this request that must not share a node with this one "
        "(needs same_node: false)",
    )

    @model_validator(mode="after")
    def _one_memory_form(self) -> Self:
        if self.memory_mib is not None and self.memory_percent is not None:
            raise ValueError("give memory_mib or memory_percent, not both")
        if self.model_ref is not None:
            self._size_from_model(self.model_ref)
        return self

    def _size_from_model(self, ref: ModelReference) -> None:
        if self.memory_percent is not None or (self.memory_mib is not None and self.memory_mib != ref.memory_mib):
            raise ValueError("model_ref sizes the part: give no memory_mib or memory_percent with it")
        if ref.memory_mib is None:
            # the one place a reference becomes a figure, before any engine sees the part
            if _SIZER.size is None:
                raise ValueError("model_ref needs the model sizer: import hami_devices (the [precision] extra)")
            ref.memory_mib = _SIZER.size(ref, self.precision)
        self.__dict__["memory_mib"] = ref.memory_mib  # not by assignment: that would validate again

    @property
    def exclusive(self) -> bool:
        return self.cores >= 100

    @property
    def gives_memory(self) -> bool:
        """Whether the part says its memory (else the default memory applies)."""
        return self.memory_mib is not None or self.memory_percent is not None or self.model_ref is not None

    def memory_for(self, device_memory_mib: int) -> int:
        """The MiB this part needs on a device of ``device_memory_mib``."""
        if self.memory_mib is not None:
            return self.memory_mib
        percent = 100.0 if self.memory_percent is None else self.memory_percent
        return max(1, int(device_memory_mib * percent / 100.0))


class ResourceRequest(HamiModel):
    """What a task asks for: one or more parts, placed together or not at all."""

    name: str | None = None
    """The task's name, used in messages, events and queues."""
    task_type: TaskType = TaskType.BATCH
    """What the task does: training, inference, batch or interactive (scorers weigh traits by it)."""
    # Host resources come before the parts so that the parts' check can see them.
    host_cpu_milli: int = Field(default=0, ge=0)
    """Host CPU the task needs on its node, in thousandths of a core."""
    host_memory_mib: int = Field(default=0, ge=0)
    """Host memory the task needs on its node, in MiB."""
    parts: list[RequestPart] = Field(
        default_factory=list,
        validate_default=True,
        description="device parts; none for a task that needs host CPU and memory only",
    )
    same_node: bool = True
    """All parts on one node (False: each part may take its own node)."""
    topology: Literal["none", "preferred", "required"] = "none"
    """How much the devices' links matter: none, preferred (scored) or required (a filter)."""
    latency_slo_ms: float | None = Field(default=None, gt=0)
    """A latency objective the latency-aware policy weighs, in milliseconds."""
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
    priority_class: str | None = Field(
        default=None,
        description="a priority class of the queue file (Kueue's WorkloadPriorityClass): the queue loop sets "
        "priority to its value",
    )
    queue: str = "default"
    """The queue the task counts in (queueing)."""
    labels: dict[str, str] = Field(
        default_factory=dict, description="soft: nodes carrying them score higher (locality); see node_selector"
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="labels a node must all carry to be used (hard)"
    )
    tolerations: list[Toleration] = Field(default_factory=list, description="node taints this request tolerates")
    policy: RequestPolicy | None = Field(
        default=None,
        description="this request's node and device policies (a name: both), overriding the engine's",
    )

    @field_validator("parts")
    @classmethod
    def _asks_for_something(cls, parts: list[RequestPart], info: ValidationInfo) -> list[RequestPart]:
        if not parts and not (info.data.get("host_cpu_milli") or info.data.get("host_memory_mib")):
            raise ValueError("a request needs at least one part, or host_cpu_milli / host_memory_mib")
        names = [p.name for p in parts if p.name is not None]
        for i, part in enumerate(parts):
            unknown = [n for n in part.anti_affinity if n not in names or n == part.name]
            if unknown:
                raise ValueError(f"parts.{i}.anti_affinity names {unknown}: not another part of this request")
        return parts

    @field_validator("policy", mode="before")
    @classmethod
    def _one_name_for_both(cls, value: Any) -> Any:
        return {"node": value, "device": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _apart_needs_nodes(self) -> Self:
        if self.same_node and any(p.anti_affinity for p in self.parts):
            raise ValueError("anti-affinity keeps parts on different nodes: set same_node: false")
        return self

    @property
    def device_count(self) -> int:
        return sum(p.count for p in self.parts)

    @classmethod
    def single(cls, **part: Any) -> ResourceRequest:
        """Shorthand for a one-part request; top-level keys go to the request."""
        top = {k: part.pop(k) for k in list(part) if k in cls.model_fields and k != "parts"}
        return cls(parts=[RequestPart(**part)], **top)
