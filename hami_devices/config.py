"""The configuration schema (YAML, validated by pydantic).

Keys follow the names HAMi users already write (``scheduler.policy``,
``device-plugin.mig-mode`` ...).  Errors name the dotted key and the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hami_devices.errors import InvalidConfig
from hami_devices.models import every_error
from hami_devices.yamlfile import located, read_yaml

BUILTIN_POLICIES = ("binpack", "spread", "latency-aware", "topology-aware", "fragmentation-aware", "bestfit")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ResourceAllocation(_Section):
    gpu_memory_fraction: float = Field(
        default=1.0, gt=0, le=1.0, alias="gpu-memory-fraction",
        description="share of each device's memory the scheduler may hand out",
    )
    enable_preemptive: bool = Field(
        default=False,
        alias="enable-preemptive",
        description="let the queue admission loop (hami_devices.queueing, hami-devices queues simulate) evict "
        "interruptible (preemptible) tasks: to reclaim a queue's guarantee from borrowers, for a higher priority "
        "inside a queue, or for fair share, each where the queue file allows it. False: the loop never evicts; "
        "a queue below its guarantee waits for borrowers to finish. A non-interruptible task never borrows what "
        "another queue is guaranteed, so guarantees hold either way once borrowers finish",
    )


class MixShape(_Section):
    """One task shape of a declared workload mix (FGD's target workload)."""

    cpu_milli: int = Field(default=0, ge=0, alias="cpu-milli")
    host_memory_mib: int = Field(default=0, ge=0, alias="host-memory-mib")
    num_gpu: int = Field(default=1, ge=0, le=64, alias="num-gpu", description="devices; 0: a task without devices")
    gpu_milli: int = Field(
        default=1000, ge=0, le=1000, alias="gpu-milli", description="thousandths of each device (its cores share)"
    )
    gpu_mem_mib: int = Field(
        default=0, ge=0, alias="gpu-mem-mib", description="device memory in MiB, where the share is given in MiB"
    )
    models: list[str] | None = Field(default=None, description="accepted models (none: any)")
    weight: float = Field(default=1.0, gt=0, description="relative frequency")


class WorkloadMixConfig(_Section):
    """The mix of task shapes the fragmentation-aware policy plans for."""

    mode: Literal["online", "declared"] = Field(
        default="online",
        description="online: learned from the requests the cluster has been given (decaying, from a neutral "
        "prior); declared: the shapes below, fixed",
    )
    half_life: float = Field(default=4096, gt=0, alias="half-life", description="online: requests to halve a weight")
    max_shapes: int = Field(default=48, ge=1, le=512, alias="max-shapes", description="typical shapes kept at most")
    file: str | None = Field(
        default=None, description="online: a learned mix saved by a scheduler (JSON), to continue from"
    )
    shapes: list[MixShape] = Field(default_factory=list, description="declared: the shapes and their weights")

    @model_validator(mode="after")
    def _declared_has_shapes(self) -> WorkloadMixConfig:
        if self.mode == "declared" and not self.shapes:
            raise ValueError("a declared workload mix needs at least one shape")
        return self


_PERCENT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$")


class SchedulerConfig(_Section):
    policy: str = Field(
        default="binpack",
        min_length=1,
        description="a built-in policy (binpack, spread, latency-aware, topology-aware, fragmentation-aware, "
        "bestfit) or the name of a user policy from policy-files; shorthand for node-policy and device-policy",
    )
    node_policy: str | None = Field(
        default=None,
        min_length=1,
        alias="node-policy",
        description="the policy that chooses the node (HAMi's nodeSchedulerPolicy): a node is judged by the mean "
        "of this policy's device scores over its candidate devices; default: policy",
    )
    device_policy: str | None = Field(
        default=None,
        min_length=1,
        alias="device-policy",
        description="the policy that chooses the devices on the chosen node (HAMi's gpuSchedulerPolicy); "
        "default: policy",
    )
    default_memory: int | str = Field(
        default=0,
        alias="default-memory",
        description="memory of a request part that gives none (HAMi's defaultMem): MiB, or a percent of the "
        "device ('50%'); 0 = the whole device",
    )
    default_cores: int = Field(
        default=0, ge=0, le=100, alias="default-cores",
        description="cores (percent of a device) of a part that gives none (HAMi's defaultCores)",
    )
    default_count: int = Field(
        default=1, ge=1, le=64, alias="default-count",
        description="devices of a part that gives no count (HAMi's defaultGPUNum)",
    )
    keep_cpu_tasks_off_accelerators: bool = Field(
        default=False,
        alias="keep-cpu-tasks-off-accelerators",
        description="taint every node that has devices with hami.io/accelerator (NoSchedule): requests with "
        "device parts tolerate it, a host-only request only when its tolerations name it",
    )
    workload_mix: WorkloadMixConfig = Field(default_factory=WorkloadMixConfig, alias="workload-mix")
    policy_files: list[str] = Field(default_factory=list, alias="policy-files")
    resource_allocation: ResourceAllocation = Field(
        default_factory=ResourceAllocation, alias="resource-allocation"
    )

    @field_validator("default_memory")
    @classmethod
    def _memory_form(cls, value: int | str) -> int | str:
        if isinstance(value, bool):
            raise ValueError("MiB (a whole number >= 0) or a percent such as '50%'")
        if isinstance(value, int):
            if value < 0:
                raise ValueError("MiB must be >= 0 (0: the whole device)")
            return value
        match = _PERCENT.match(value)
        if match is None or not 0 < float(match[1]) <= 100:
            raise ValueError("MiB (a whole number >= 0) or a percent in (0, 100] such as '50%'")
        return f"{float(match[1]):g}%"

    @property
    def node_level_policy(self) -> str:
        return self.node_policy or self.policy

    @property
    def device_level_policy(self) -> str:
        return self.device_policy or self.policy


class DevicePluginConfig(_Section):
    mig_mode: Literal["strict", "flexible", "disabled"] = Field(default="disabled", alias="mig-mode")
    memory_overcommit: float = Field(
        default=1.0,
        ge=1.0,
        le=10.0,
        alias="memory-overcommit",
        description="grant up to this times a device's memory; above 1, shares are virtual: what the card cannot "
        "hold physically is served from host memory (the limiter's virtual device memory)",
    )
    virtual_memory_host_limit_mib: int = Field(
        default=0,
        ge=0,
        alias="virtual-memory-host-limit-mib",
        description="most host memory one virtual grant may spill to, MiB; 0: up to the grant",
    )
    isolation_level: Literal["hard", "soft", "none"] = Field(
        default="hard", alias="isolation-level",
        description="hard: limiter preloaded with memory and compute quotas; soft: memory only; none",
    )
    core_policy: Literal["cap", "share"] = Field(
        default="cap",
        alias="core-policy",
        description="how a shared grant's cores are kept when its request part names no core_policy: cap (at "
        "most that share of the device's time, even on an idle card) or share (at least that share whenever "
        "the workload wants it, idle time on top). Only with isolation-level hard; for no compute limit at all "
        "use isolation-level soft, or core_policy: unlimited on a part",
    )
    lightweight_mode: bool = Field(
        default=False, alias="lightweight-mode", description="skip per-process monitoring to save NVML calls"
    )
    split_count: int = Field(default=10, ge=1, le=128, alias="split-count")
    memory_scaling: float = Field(default=1.0, gt=0, le=10.0, alias="memory-scaling")
    core_scaling: float = Field(default=1.0, gt=0, le=10.0, alias="core-scaling")


class DeviceFilter(_Section):
    """Devices a node keeps out of use (HAMi's filterdevices): any listed uuid, model or index."""

    uuids: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list, description="model names as requests use them (aliases too)")
    indexes: list[int] = Field(default_factory=list, description="the vendor's device index on the node")


class NodeConfig(_Section):
    """Settings for the nodes an entry selects (HAMi's per-node nodeconfig)."""

    name: str | None = Field(
        default=None, min_length=1, description="node name, or a shell-style pattern ('gpu-*', 'node-[0-3]')"
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="labels the node must all carry (inventory labels; a hardware node "
        "has none unless its inventory entry gives them)"
    )
    memory_scaling: float | None = Field(
        default=None, gt=0, le=10.0, alias="memory-scaling", description="replaces device-plugin.memory-scaling"
    )
    split_count: int | None = Field(
        default=None, ge=1, le=128, alias="split-count", description="replaces each device's split count"
    )
    core_scaling: float | None = Field(
        default=None, gt=0, le=10.0, alias="core-scaling", description="replaces device-plugin.core-scaling"
    )
    filter_devices: DeviceFilter = Field(default_factory=DeviceFilter, alias="filter-devices")
    mig_mode: Literal["strict", "flexible", "disabled"] | None = Field(
        default=None, alias="mig-mode",
        description="replaces device-plugin.mig-mode (and an inventory's mig_mode) on the node's devices",
    )

    @model_validator(mode="after")
    def _selects_something(self) -> NodeConfig:
        if self.name is None and not self.labels:
            raise ValueError("select nodes by name, labels or both")
        return self


class HamiConfig(_Section):
    """The configuration file (YAML, keys in kebab-case): the scheduler's policies and defaults, the device
    plugin's sharing settings, this node's name and per-node settings.

    Build one with `load_config` (a file) or `parse_config` (a mapping); both raise `InvalidConfig` naming
    every wrong key. `hami-devices config schema` prints its JSON Schema, with the descriptions below.

    Example:
        ```python
        config = hd.load_config("examples/config-hami-knobs.yaml")
        engine = hd.build_engine("examples/cluster.yaml", config=config)
        ```
    """

    scheduler: SchedulerConfig = Field(
        default_factory=SchedulerConfig, description="placement: policies, defaults, the workload mix, preemption"
    )
    device_plugin: DevicePluginConfig = Field(
        default_factory=DevicePluginConfig, alias="device-plugin",
        description="sharing on the devices: overcommit, core policy, MIG mode, virtual memory",
    )
    node_name: str | None = Field(
        default=None, alias="node-name",
        description="this node's name (after --node-name, before NODE_NAME and the host's name): see node_identity",
    )
    node_config: list[NodeConfig] = Field(
        default_factory=list,
        alias="node-config",
        description="per-node settings (HAMi's nodeconfig): each entry selects nodes by name pattern and/or "
        "labels and sets memory-scaling, split-count, core-scaling, mig-mode and filter-devices there; every matching "
        "entry applies, in order, a later one overriding the keys it sets",
    )


def parse_config(data: Any, source: str = "<config>") -> HamiConfig:
    """Validate a configuration; ``InvalidConfig`` names every key that is wrong, not only the first."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidConfig("<root>", "the configuration must be a mapping", source=source)
    try:
        return HamiConfig.model_validate(data)
    except ValidationError as exc:
        raise InvalidConfig.all_of(every_error(exc, HamiConfig), source=source) from None


def load_config(path: str | Path) -> HamiConfig:
    """Read and validate a configuration file.

    Args:
        path: the YAML file.

    Returns:
        The validated configuration; keys the file leaves out take their defaults.

    Raises:
        InvalidConfig: the file cannot be read, is not YAML, or breaks the schema; the message names the file,
            the line and every wrong key (with the closest accepted key for a misspelt one).
    """
    with located(path):
        return parse_config(read_yaml(path, InvalidConfig), source=str(path))


def config_schema() -> dict[str, Any]:
    schema = HamiConfig.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "hami-devices configuration"
    return schema
