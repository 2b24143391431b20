"""Static facts of devices: health, the spec-sheet traits of a model, partition profiles, one device."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from hami_devices.models.base import HamiModel, Precision


class Health(StrEnum):
    """A device's health as its vendor library reports it; an unhealthy device takes no new grant
    (``CardUnhealthy``)."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


class Interconnect(HamiModel):
    """The device-to-device link a model offers (NVLink, HCCS, MLU-Link, or PCIe only)."""

    kind: str
    bandwidth_gbps: float = Field(ge=0, description="aggregate GB/s per device")


class DeviceTraits(HamiModel):
    """Spec-sheet facts of one accelerator model, from the shipped catalog."""

    vendor: str
    """The vendor (nvidia, ascend, cambricon, or a plugin's name)."""
    model: str
    """The catalog name of the model."""
    generation: str
    """The vendor's architecture generation (Hopper, Ascend 910B ...)."""
    year: int
    """The year the model was released."""
    memory_mib: int = Field(gt=0)
    """Device memory, in MiB."""
    memory_bandwidth_gbps: float = Field(gt=0)
    """Memory bandwidth, in GB/s."""
    peak_tflops: dict[Precision, float] = Field(
        description="dense peak per precision; a precision absent here is unsupported"
    )
    interconnect: Interconnect
    """The device-to-device link the model offers."""
    tdp_watts: float = Field(gt=0)
    """Thermal design power, in watts."""
    relative_cost: float = Field(gt=0, description="price index against an A100-80GB = 1.0")
    aliases: list[str] = Field(default_factory=list)
    """Other names the model answers to (a vendor library's product name ...)."""
    notes: str | None = None
    """Where the figures come from, or what is special about them."""
    context_mib: int | None = Field(
        default=None,
        ge=0,
        description="device memory one process's runtime context takes, outside its allocations (measured); "
        "booked on top of each shared grant until the processes' own figure is observed. None: not measured",
    )

    def supports(self, precision: str) -> bool:
        return bool(self.peak_tflops.get(precision, 0.0) > 0)  # type: ignore[call-overload]


class PartitionProfile(HamiModel):
    """One way a vendor can carve a device: MIG profile, vNPU template, sMLU profile."""

    name: str
    """The vendor's name for the profile (1g.10gb, vir02, ...)."""
    memory_mib: int = Field(gt=0)
    """Device memory of one instance, in MiB."""
    cores: int = Field(ge=1, le=100, description="compute share in percent of the whole device")
    native: dict[str, int] = Field(default_factory=dict, description="vendor units, e.g. {'aicore': 2}")
    max_instances: int = Field(ge=1)
    """How many instances of this profile one device holds at most."""
    placements: list[int] = Field(default_factory=list, description="valid start slots, where the vendor has them")


class DeviceInfo(HamiModel):
    """Static facts of one physical device on one node."""

    uuid: str = Field(min_length=1)
    """The device's unique id (a vendor uuid, or a stable simulated one)."""
    index: int = Field(ge=0)
    """The device's index on its node, as its vendor numbers it."""
    vendor: str = Field(min_length=1)
    """The vendor whose adapter drives the device."""
    model: str = Field(min_length=1)
    """The device's model, by catalog name."""
    node: str = "localhost"
    """The node the device is on."""
    memory_mib: int = Field(gt=0)
    """Device memory, in MiB."""
    numa_node: int | None = None
    """The NUMA node the device is attached to, where known."""
    pci_bus_id: str | None = None
    """The device's PCI bus id, where known."""
    health: Health = Health.HEALTHY
    """The device's health; an unhealthy device takes no new grant."""
    health_reason: str | None = None
    """Why the device is unhealthy, as its vendor library says."""
    native_compute_units: dict[str, int] = Field(default_factory=dict)
    """The vendor's own compute units of the whole device (AICores, MLU cores ...)."""
    partitions: list[PartitionProfile] = Field(default_factory=list)
    """The partition profiles the device supports."""
    split_count: int = Field(default=10, ge=1)
    """How many allocations may share the device at most."""
    memory_factor: float | None = Field(
        default=None, gt=0, description="share of memory that may be granted, set by node-config (None: the rule's)"
    )
    core_capacity: int | None = Field(
        default=None, ge=1, description="sum of cores its sharers may hold, set by node-config (None: the rule's)"
    )
    traits: DeviceTraits | None = None
    """The model's traits from the catalog, when the model is known."""
    topology: dict[str, int] = Field(
        default_factory=dict, description="pair score 0..100 to each other device uuid on the node"
    )
    attributes: dict[str, str] = Field(default_factory=dict, description="vendor extras (driver, MIG mode ...)")

    @property
    def healthy(self) -> bool:
        return self.health == Health.HEALTHY

    @property
    def context_mib(self) -> int:
        """MiB a process's context takes on this device beside its allocations: its model's catalog figure,
        0 where the catalog has none."""
        return self.traits.context_mib or 0 if self.traits is not None else 0
