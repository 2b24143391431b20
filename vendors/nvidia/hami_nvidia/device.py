"""One physical NVIDIA GPU seen through NVML: its static facts and its live readings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pynvml

from hami_devices import traits
from hami_devices.device import Device, DeviceReadings
from hami_devices.models import NOT_AVAILABLE, DeviceInfo, Health, MetricValue, ProcessUsage
from hami_nvidia import binding, partitions
from hami_nvidia.binding import NvmlError, Session, call, optional
from hami_nvidia.fields import FieldReader
from hami_nvidia.partitions import MigGeometry, MigInstance, MigProfile

if TYPE_CHECKING:
    from hami_devices.adapter import VendorAdapter
    from hami_devices.ledger import Ledger

ARCHITECTURES = {
    2: "kepler", 3: "maxwell", 4: "pascal", 5: "volta", 6: "turing", 7: "ampere", 8: "ada", 9: "hopper",
    10: "blackwell",
}


@dataclass
class Probed:
    """What discovery learned about one GPU, before topology is added."""

    index: int
    handle: Any
    info: DeviceInfo
    bus_id: str | None
    failed: str | None = None
    geometry: MigGeometry | None = None
    mig_enabled: bool = False
    attributes: dict[str, str] = field(default_factory=dict)


def canonical_model(name: str) -> str:
    found = traits.find("nvidia", name)
    if found is not None:
        return found.model
    return name.removeprefix("NVIDIA ").strip() or "unknown"


def _failed(exc: NvmlError) -> str:
    return f"NVML reports the GPU as failed: {exc}"


def mig_geometry(session: Session, handle: Any, model: str) -> MigGeometry | None:
    """The driver's MIG profile table for this GPU (catalog names where the driver gives none)."""
    known = partitions.geometry_for(model)
    profiles: list[MigProfile] = []
    for index in range(partitions.PROFILE_COUNT):
        try:
            info = session.gpu_instance_profile(handle, index)
        except NvmlError as exc:
            if exc.device_failed:
                raise
            continue
        name = binding._text(getattr(info, "name", b"")).removeprefix("MIG ").strip()
        catalog = known.by_id(int(info.id)) if known else None
        if not name:
            name = catalog.name if catalog else f"{info.sliceCount}g.{round(info.memorySizeMB / 1024)}gb"
        placements = _placements(handle, int(info.id))
        if not placements and catalog is not None:
            placements = list(catalog.placements)
        size = catalog.memory_slices if catalog else 1
        profiles.append(
            MigProfile(
                name=name,
                nvml_index=index,
                profile_id=int(info.id),
                compute_slices=int(info.sliceCount),
                memory_slices=size,
                memory_mib=int(info.memorySizeMB),
                sm_count=int(info.multiprocessorCount),
                max_instances=max(1, int(info.instanceCount)),
                placements=tuple(placements),
            )
        )
    if not profiles:
        return known
    sizes = {p.profile_id: s for p, s in ((p, _placement_size(handle, p.profile_id)) for p in profiles) if s}
    profiles = [
        MigProfile(p.name, p.nvml_index, p.profile_id, p.compute_slices, sizes.get(p.profile_id, p.memory_slices),
                   p.memory_mib, p.sm_count, p.max_instances, p.placements)
        for p in profiles
    ]
    return MigGeometry(
        model=model,
        compute_slices=max(p.compute_slices for p in profiles),
        memory_slices=max((max(p.placements, default=0) + p.memory_slices) for p in profiles),
        profiles=tuple(profiles),
    )


def _possible_placements(handle: Any, profile_id: int) -> list[tuple[int, int]]:
    array = (pynvml.c_nvmlGpuInstancePlacement_t * 16)()
    count = pynvml.c_uint(16)
    try:
        call("nvmlDeviceGetGpuInstancePossiblePlacements", handle, profile_id, array, pynvml.byref(count))
    except NvmlError as exc:
        if exc.device_failed:
            raise
        return []
    return [(int(array[i].start), int(array[i].size)) for i in range(count.value)]


def _placements(handle: Any, profile_id: int) -> list[int]:
    return [start for start, _ in _possible_placements(handle, profile_id)]


def _placement_size(handle: Any, profile_id: int) -> int | None:
    found = _possible_placements(handle, profile_id)
    return found[0][1] if found else None


def mig_instances(handle: Any, geometry: MigGeometry) -> list[MigInstance]:
    """The GPU instances that exist, with their placement and MIG device uuid."""
    uuids: dict[tuple[int, int], str] = {}
    count = int(call("nvmlDeviceGetMaxMigDeviceCount", handle))
    for i in range(count):
        try:
            mig = call("nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
        except NvmlError as exc:
            if exc.code in (pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                continue
            raise
        gi = int(call("nvmlDeviceGetGpuInstanceId", mig))
        ci = int(call("nvmlDeviceGetComputeInstanceId", mig))
        uuids[(gi, ci)] = str(call("nvmlDeviceGetUUID", mig))
    instances: list[MigInstance] = []
    for profile in geometry.profiles:
        array = (pynvml.c_nvmlGpuInstance_t * max(profile.max_instances, 8))()
        n = pynvml.c_uint(len(array))
        try:
            call("nvmlDeviceGetGpuInstances", handle, profile.profile_id, array, pynvml.byref(n))
        except NvmlError as exc:
            if exc.device_failed:
                raise
            continue
        for k in range(n.value):
            info = call("nvmlGpuInstanceGetInfo", array[k])
            gi_id = int(info.id)
            ci_ids = sorted(ci for g, ci in uuids if g == gi_id)
            ci_id = ci_ids[0] if ci_ids else None
            instances.append(
                MigInstance(
                    profile=profile.name,
                    start=int(info.placement.start),
                    size=int(info.placement.size),
                    gpu_instance_id=gi_id,
                    compute_instance_id=ci_id,
                    uuid=uuids.get((gi_id, ci_id)) if ci_id is not None else None,
                )
            )
    return sorted(instances, key=lambda i: i.start)


def instances_json(instances: list[MigInstance], geometry: MigGeometry) -> str:
    rows = []
    for inst in instances:
        profile = geometry.profile(inst.profile)
        rows.append(
            {
                "profile": inst.profile,
                "start": inst.start,
                "size": inst.size,
                "memory_mib": profile.memory_mib if profile else None,
                "gpu_instance_id": inst.gpu_instance_id,
                "compute_instance_id": inst.compute_instance_id,
                "uuid": inst.uuid,
            }
        )
    return json.dumps(rows, sort_keys=True)


def parse_instances(text: str | None) -> list[MigInstance]:
    """``attributes["mig.instances"]`` back into instances (inventories may carry it too)."""
    if not text:
        return []
    rows = json.loads(text)
    return [
        MigInstance(
            profile=str(r["profile"]),
            start=int(r["start"]),
            size=int(r.get("size", 1)),
            gpu_instance_id=r.get("gpu_instance_id"),
            compute_instance_id=r.get("compute_instance_id"),
            uuid=r.get("uuid"),
        )
        for r in rows
    ]


def probe_gpu(session: Session, index: int, split_count: int) -> Probed:
    """Static facts of GPU ``index``.  A failed GPU is described as unhealthy, never raised."""
    handle = call("nvmlDeviceGetHandleByIndex", index)
    attributes: dict[str, str] = {"driver_version": session.driver_version}
    failed: str | None = None

    def soft(fn: Any, default: Any = None) -> Any:
        nonlocal failed
        try:
            value = optional(fn)
        except NvmlError as exc:
            if not exc.device_failed:
                raise
            failed = failed or _failed(exc)
            return default
        return default if value == NOT_AVAILABLE else value

    name = str(soft(lambda: call("nvmlDeviceGetName", handle), "NVIDIA GPU"))
    uuid = str(soft(lambda: call("nvmlDeviceGetUUID", handle), f"GPU-unknown-{index}"))
    pci = soft(lambda: session.pci(handle))
    memory = soft(lambda: session.memory(handle))
    model = canonical_model(name)
    found = traits.find("nvidia", name)
    cc = soft(lambda: call("nvmlDeviceGetCudaComputeCapability", handle))
    if cc is not None:
        attributes["cuda_compute_capability"] = f"{cc[0]}.{cc[1]}"
    arch = soft(lambda: call("nvmlDeviceGetArchitecture", handle))
    attributes["architecture"] = ARCHITECTURES.get(int(arch), str(arch)) if arch is not None else NOT_AVAILABLE
    numa = soft(lambda: call("nvmlDeviceGetNumaNodeId", handle))
    attributes["product_name"] = name

    geometry: MigGeometry | None = None
    mig_enabled = False
    mig = soft(lambda: call("nvmlDeviceGetMigMode", handle))
    if mig is not None:
        mig_enabled = int(mig[0]) == pynvml.NVML_DEVICE_MIG_ENABLE
        attributes["mig.mode"] = "enabled" if mig_enabled else "disabled"
        if mig_enabled:
            geometry = soft(lambda: mig_geometry(session, handle, model))
            if geometry is not None:
                existing = soft(lambda: mig_instances(handle, geometry), [])
                attributes["mig.instances"] = instances_json(existing, geometry)
                attributes["mig.free_profiles"] = json.dumps(partitions.free_profiles(geometry, existing))
        else:
            geometry = partitions.geometry_for(model)
    else:
        attributes["mig.mode"] = NOT_AVAILABLE

    if memory is not None:
        memory_mib = max(1, int(memory.total_mib))
    elif found is not None:
        memory_mib = found.memory_mib
    else:
        memory_mib = 1
    info = DeviceInfo(
        uuid=uuid,
        index=index,
        vendor="nvidia",
        model=model,
        memory_mib=memory_mib,
        numa_node=None if numa is None else int(numa),
        pci_bus_id=binding.normalize_bus_id(pci.bus_id) if pci is not None else None,
        health=Health.UNHEALTHY if failed else Health.HEALTHY,
        health_reason=failed,
        native_compute_units={"sm": geometry.profiles[-1].sm_count} if geometry and geometry.profiles else {},
        partitions=geometry.partition_profiles() if geometry else [],
        split_count=max(p.max_instances for p in geometry.profiles) if mig_enabled and geometry else split_count,
        traits=found,
        attributes={**attributes, "nvml.versions": ",".join(f"{k}={v}" for k, v in sorted(session.served.items()))},
    )
    return Probed(index, handle, info, pci.bus_id if pci else None, failed, geometry, mig_enabled)


class NvmlDevice(Device):
    """A GPU read live through NVML."""

    def __init__(
        self,
        info: DeviceInfo,
        adapter: VendorAdapter,
        ledger: Ledger,
        handle: Any,
        geometry: MigGeometry | None,
        mig_enabled: bool,
    ) -> None:
        super().__init__(info, adapter, ledger)
        self.handle = handle
        self.geometry = geometry
        self.mig_enabled = mig_enabled
        self.fields = FieldReader(handle)  # keeps the XID events and GPM samples between reads

    def existing_instances(self) -> list[MigInstance]:
        if not self.mig_enabled or self.geometry is None:
            return []
        return mig_instances(self.handle, self.geometry)

    def read(self) -> DeviceReadings:
        session = binding.session()
        readings = DeviceReadings(health=Health.HEALTHY)

        def metric(fn: Any) -> MetricValue:
            try:
                value = optional(fn)
            except NvmlError as exc:
                if not exc.device_failed:
                    raise
                readings.health = Health.UNHEALTHY
                return NOT_AVAILABLE
            return NOT_AVAILABLE if value == NOT_AVAILABLE else float(value)

        readings.memory_used_mib = metric(lambda: session.memory(self.handle).used_mib)
        readings.utilization_pct = metric(lambda: call("nvmlDeviceGetUtilizationRates", self.handle).gpu)
        readings.extra["memory_utilization_pct"] = metric(
            lambda: call("nvmlDeviceGetUtilizationRates", self.handle).memory
        )
        readings.temperature_c = metric(
            lambda: call("nvmlDeviceGetTemperature", self.handle, pynvml.NVML_TEMPERATURE_GPU)
        )
        readings.power_w = metric(lambda: call("nvmlDeviceGetPowerUsage", self.handle) / 1000.0)
        readings.extra.update(self.fields.read(metric))
        if not self.adapter.config.device_plugin.lightweight_mode:
            try:
                procs = optional(lambda: session.processes(self.handle))
            except NvmlError as exc:
                if not exc.device_failed:
                    raise
                readings.health = Health.UNHEALTHY
                procs = NOT_AVAILABLE
            if procs != NOT_AVAILABLE:
                readings.processes = [ProcessUsage(pid=p.pid, memory_used_mib=p.used_mib) for p in procs]
        return readings
