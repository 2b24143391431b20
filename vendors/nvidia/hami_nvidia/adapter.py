"""The NVIDIA adapter: NVML discovery, MIG partitions, NVLink/PCIe topology, CUDA environment."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar, get_args

import pynvml

from hami_devices import traits
from hami_devices.accounting import DeviceUsage
from hami_devices.adapter import Capability, Probe, VendorAdapter
from hami_devices.config import HamiConfig
from hami_devices.device import Device
from hami_devices.errors import ReasonCode
from hami_devices.inventory import MIG_MODE_ATTRIBUTE, MigMode
from hami_devices.isolation import core_limit
from hami_devices.ledger import Ledger
from hami_devices.models import DeviceInfo, Grant, PartitionProfile, RequestPart
from hami_nvidia import binding, kernel, partitions, topology
from hami_nvidia.binding import NvmlError, call
from hami_nvidia.device import NvmlDevice, parse_instances, probe_gpu
from hami_nvidia.partitions import MigGeometry, MigInstance


def _catalog_model(model: str) -> str:
    found = traits.find("nvidia", model)
    return found.model if found is not None else model


MIG_MODES = get_args(MigMode)


@functools.lru_cache(maxsize=1 << 14)
def simulated_mig_uuid(gpu_uuid: str, profile: str, key: int | str) -> str:
    """A MIG device uuid for a simulated instance, shaped as the driver's (``MIG-`` and a UUID): the same
    GPU, profile and ``key`` (a placement or an ordinal) always give the same id."""
    digest = hashlib.sha1(f"{gpu_uuid}/{profile}/{key}".encode()).hexdigest()
    return f"MIG-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


class NvidiaAdapter(VendorAdapter):
    name: ClassVar[str] = "nvidia"
    display_name: ClassVar[str] = "NVIDIA"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {
            Capability.SIMULATED,
            Capability.MEMORY_LIMIT,
            Capability.COMPUTE_LIMIT,
            Capability.TOPOLOGY,
            Capability.PARTITIONS,
            Capability.HEALTH_EVENTS,
            Capability.PROCESS_MONITORING,
        }
    )
    visible_devices_env: ClassVar[tuple[str, ...]] = ("CUDA_VISIBLE_DEVICES",)
    limiter_shim: ClassVar[str | None] = "libhami_cuda.so"
    library_env: ClassVar[str | None] = "HAMI_NVML_LIBRARY"
    device_nodes: ClassVar[tuple[str, ...]] = ("nvidia[0-9]*",)

    def __init__(self, config: HamiConfig | None = None) -> None:
        super().__init__(config)
        self._devices: dict[str, NvmlDevice] = {}
        self._geometries: dict[str, MigGeometry | None] = {}  # model name -> its catalog geometry
        self._grants: dict[tuple[object, ...], Grant] = {}

    def mig_mode(self, info: DeviceInfo) -> str:
        """How MIG is used on this device: its own ``device-plugin.mig-mode`` attribute, else the configuration's."""
        mode = info.attributes.get(MIG_MODE_ATTRIBUTE)
        return mode if mode is not None and mode in MIG_MODES else self.config.device_plugin.mig_mode

    # -- hardware back end -------------------------------------------------
    def probe(self) -> Probe:
        try:
            session = binding.session()
            count = int(call("nvmlDeviceGetCount"))
        except NvmlError as exc:
            return Probe(False, f"NVML is not usable: {exc}", binding.requested_library())
        return Probe(True, f"NVML driver {session.driver_version}, {count} GPU(s)", session.library)

    def driver_agreement(self) -> tuple[bool, str] | None:
        try:
            library = binding.session().driver_version
        except NvmlError:
            return None  # the library check says why
        return kernel.agreement(library, kernel.kernel_module_version())

    def discover(self, ledger: Ledger) -> list[Device]:
        session = binding.session()
        split = self.config.device_plugin.split_count
        probed = []
        for index in range(int(call("nvmlDeviceGetCount"))):
            try:
                probed.append(probe_gpu(session, index, split))
            except NvmlError as exc:
                if not exc.device_failed:
                    raise
                warnings.warn(f"NVIDIA GPU {index} cannot be queried: {exc}", stacklevel=2)
        scores = self._pair_scores(session, probed)
        devices: list[Device] = []
        for p in probed:
            update: dict[str, Any] = {"topology": scores.get(p.info.uuid, {})}
            if not (p.mig_enabled and self.config.device_plugin.mig_mode != "disabled"):
                update["partitions"] = []  # only what plan_grant can grant is offered
            info = p.info.model_copy(update=update)
            device = NvmlDevice(info, self, ledger, p.handle, p.geometry, p.mig_enabled)
            self._devices[info.uuid] = device
            devices.append(device)
        return devices

    def _pair_scores(self, session: binding.Session, probed: Sequence[Any]) -> dict[str, dict[str, int]]:
        live = [p for p in probed if p.failed is None and p.bus_id]
        gpus: list[topology.GpuLinks] = []
        for p in live:
            links = topology.GpuLinks(p.info.uuid, binding.normalize_bus_id(p.bus_id))
            for link in range(topology.NVLINK_FULL_LINKS):
                try:
                    active = call("nvmlDeviceGetNvLinkState", p.handle, link)
                except NvmlError as exc:
                    if exc.device_failed:
                        raise
                    if link == 0 and exc.code == pynvml.NVML_ERROR_NOT_SUPPORTED:
                        break
                    continue
                if active == pynvml.NVML_FEATURE_ENABLED:
                    try:
                        remote = session.nvlink_remote_bus_id(p.handle, link)
                    except NvmlError:
                        continue
                    links.remotes[binding.normalize_bus_id(remote)] += 1
            gpus.append(links)
        levels: dict[tuple[str, str], int | None] = {}
        for i, a in enumerate(live):
            for b in live[i + 1 :]:
                try:
                    levels[(a.info.uuid, b.info.uuid)] = int(
                        call("nvmlDeviceGetTopologyCommonAncestor", a.handle, b.handle)
                    )
                except NvmlError:
                    levels[(a.info.uuid, b.info.uuid)] = None
        return topology.pair_scores(gpus, levels)

    # -- simulated back end ------------------------------------------------
    def partition_catalog(self, model: str) -> list[PartitionProfile]:
        """The model's MIG profiles, where MIG is used at all (``mig-mode`` not disabled)."""
        if self.config.device_plugin.mig_mode == "disabled":
            return []
        geometry = partitions.geometry_for(_catalog_model(model))
        return geometry.partition_profiles() if geometry else []

    def complete_info(self, info: DeviceInfo) -> DeviceInfo:
        """The MIG profiles of the model where the device's own MIG mode uses them (not ``disabled``)."""
        if info.partitions or self.mig_mode(info) == "disabled":
            return info
        geometry = partitions.geometry_for(_catalog_model(info.model))
        return info.model_copy(update={"partitions": geometry.partition_profiles()}) if geometry else info

    # -- MIG planning --------------------------------------------------------
    def _geometry(self, info: DeviceInfo) -> MigGeometry | None:
        device = self._devices.get(info.uuid)
        if device is not None:
            return device.geometry
        if info.model not in self._geometries:
            self._geometries[info.model] = partitions.geometry_for(_catalog_model(info.model))
        return self._geometries[info.model]

    def _existing(self, info: DeviceInfo) -> list[MigInstance]:
        """The instances that exist: the driver's, or the inventory's (``mig.instances``), those named by
        their placement where the inventory gives no uuid, as a driver would name them."""
        device = self._devices.get(info.uuid)
        if device is not None:
            return device.existing_instances()
        return [
            i if i.uuid else replace(i, uuid=simulated_mig_uuid(info.uuid, i.profile, i.start))
            for i in parse_instances(info.attributes.get("mig.instances"))
        ]

    def plain_shares(self, info: DeviceInfo) -> bool:
        """Plain shares unless MIG is on, or a MIG-capable simulated GPU may already hold instances."""
        if info.attributes.get("mig.mode") == "enabled":
            return False
        return self.mig_mode(info) == "disabled" or self._geometry(info) is None or info.uuid in self._devices

    def plan_grant(
        self, info: DeviceInfo, part: RequestPart, part_index: int, usage: DeviceUsage
    ) -> Grant | ReasonCode:
        mode = self.mig_mode(info)
        mig_on = info.attributes.get("mig.mode") == "enabled"
        hardware = info.uuid in self._devices
        wants = part.partition
        geometry = self._geometry(info)
        plain_sharers = usage.sharers - len(usage.partitions)
        if mode == "disabled" or geometry is None or (hardware and not mig_on):
            # MIG is not used: a GPU in MIG mode cannot be shared whole, and nothing is partitioned.
            if wants is not None or mig_on:
                return ReasonCode.CARD_PARTITION_UNAVAILABLE
            return super().plan_grant(info, part, part_index, usage)
        if wants is None:
            if not mig_on:
                if usage.partitions:
                    return ReasonCode.CARD_PARTITION_UNAVAILABLE  # MIG instances and whole-GPU shares never mix
                return super().plan_grant(info, part, part_index, usage)
            if mode != "flexible":
                return ReasonCode.CARD_PARTITION_UNAVAILABLE
            wants = "auto"  # flexible: a plain request on a MIG GPU is rounded up to a profile
        if plain_sharers > 0:
            return ReasonCode.CARD_PARTITION_UNAVAILABLE
        # A part that names no memory asks for the profile, not for the whole GPU's memory.
        given = part.memory_mib is not None or part.memory_percent is not None
        memory = part.memory_for(info.memory_mib) if given else 0
        existing = self._existing(info)
        if mode == "strict":
            held_uuids = getattr(usage, "partition_uuids", ())
            free = partitions.free_existing(geometry, existing, usage.partitions, held_uuids)
            chosen = partitions.pick_existing(geometry, free, memory, part.cores, wants)
            if chosen is None:
                return ReasonCode.CARD_PARTITION_UNAVAILABLE
            profile = geometry.profile(chosen.profile)
            assert profile is not None
            return self._mig_grant(info, part_index, geometry, profile, chosen.uuid)
        pending = [] if hardware else usage.partitions
        placement = partitions.plan_new_instance(geometry, existing, pending, memory, part.cores, wants)
        if placement is None:
            return ReasonCode.CARD_PARTITION_UNAVAILABLE
        # On hardware ``prepare`` creates the instance and the driver names it; a simulated one is named here.
        named = None if hardware else self._new_simulated_uuid(info, placement.profile.name, usage.partition_uuids)
        return self._mig_grant(info, part_index, geometry, placement.profile, named)

    @staticmethod
    def _new_simulated_uuid(info: DeviceInfo, profile: str, held: Sequence[str]) -> str:
        """The first of the GPU's ids for ``profile`` that no live instance holds (the same state, the same id)."""
        taken = set(held)
        ordinal = 0
        while (uuid := simulated_mig_uuid(info.uuid, profile, f"#{ordinal}")) in taken:
            ordinal += 1
        return uuid

    def _mig_grant(
        self,
        info: DeviceInfo,
        part_index: int,
        geometry: MigGeometry,
        profile: partitions.MigProfile,
        uuid: str | None,
    ) -> Grant:
        # The scheduling engine asks every MIG GPU again once its usage moved; the grant is kept per input,
        # since building one is most of what an answer costs.
        cores = geometry.cores(profile)
        key = (info.uuid, info.node, info.vendor, info.model, info.index, part_index, profile.name,
               profile.memory_mib, cores, uuid)
        grant = self._grants.get(key)
        if grant is None:
            if len(self._grants) > 1 << 16:
                self._grants.clear()
            grant = self._grants[key] = Grant.on(
                info, part_index, profile.memory_mib, cores, partition=profile.name, partition_uuid=uuid
            )
        return grant

    # -- hardware side effects -------------------------------------------------
    def prepare(self, grants: list[Grant]) -> list[Grant]:
        """Flexible mode: create a GPU instance and a full compute instance per MIG grant."""
        done: list[Grant] = []
        created: list[Grant] = []
        try:
            for grant in grants:
                device = self._devices.get(grant.uuid)
                if (device is None or grant.partition is None or grant.partition_uuid is not None
                        or self.mig_mode(device.info) != "flexible"):
                    done.append(grant)
                    continue
                mig_uuid = self._create_instance(device, grant.partition)
                new = grant.model_copy(update={"partition_uuid": mig_uuid})
                created.append(new)
                done.append(new)
        except BaseException:
            self.teardown(created)
            raise
        return done

    def _create_instance(self, device: NvmlDevice, profile_name: str) -> str:
        geometry = device.geometry
        assert geometry is not None
        placement = partitions.plan_new_instance(geometry, device.existing_instances(), [], 0, 0, profile_name)
        if placement is None:
            raise NvmlError(
                "nvidia", "plan MIG placement", pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES,
                f"no valid placement for {profile_name} on {device.uuid}",
            )
        where = pynvml.c_nvmlGpuInstancePlacement_t()
        where.start = placement.start
        where.size = placement.profile.memory_slices
        refused = "the driver refused to create MIG instance {} on {} (root and an idle GPU are required)"
        try:
            gi = call(
                "nvmlDeviceCreateGpuInstanceWithPlacement",
                device.handle, placement.profile.profile_id, pynvml.byref(where),
            )
        except NvmlError as exc:
            raise NvmlError(
                "nvidia", exc.function, exc.code, refused.format(profile_name, device.uuid) + f": {exc}"
            ) from None
        ci_profile = partitions.FULL_COMPUTE_INSTANCE_PROFILE.get(placement.profile.compute_slices, 0)
        try:
            call("nvmlGpuInstanceCreateComputeInstance", gi, ci_profile)
        except NvmlError as exc:
            with contextlib.suppress(NvmlError):
                call("nvmlGpuInstanceDestroy", gi)
            raise NvmlError(
                "nvidia", exc.function, exc.code, refused.format(profile_name, device.uuid) + f": {exc}"
            ) from None
        gi_id = int(call("nvmlGpuInstanceGetInfo", gi).id)
        for inst in device.existing_instances():
            if inst.gpu_instance_id == gi_id and inst.uuid:
                return inst.uuid
        raise NvmlError("nvidia", "nvmlDeviceGetMigDeviceHandleByIndex", pynvml.NVML_ERROR_NOT_FOUND,
                        f"created GPU instance {gi_id} has no MIG device")

    def teardown(self, grants: list[Grant]) -> None:
        """Destroy the MIG instances ``prepare`` created; gone ones are skipped, refusals warned about."""
        for grant in grants:
            device = self._devices.get(grant.uuid)
            if device is None or grant.partition_uuid is None or self.mig_mode(device.info) != "flexible":
                continue
            try:
                self._destroy_instance(device, grant.partition_uuid)
            except NvmlError as exc:
                warnings.warn(f"MIG instance {grant.partition_uuid} was not destroyed: {exc}", stacklevel=2)

    def _destroy_instance(self, device: NvmlDevice, mig_uuid: str) -> None:
        target = next((i for i in device.existing_instances() if i.uuid == mig_uuid), None)
        if target is None or target.gpu_instance_id is None:
            return
        gi = call("nvmlDeviceGetGpuInstanceById", device.handle, target.gpu_instance_id)
        for ci_profile in range(partitions.PROFILE_COUNT // 2):
            array = (pynvml.c_nvmlComputeInstance_t * 8)()
            count = pynvml.c_uint(8)
            try:
                call("nvmlGpuInstanceGetComputeInstances", gi, ci_profile, array, pynvml.byref(count))
            except NvmlError:
                continue
            for k in range(count.value):
                call("nvmlComputeInstanceDestroy", array[k])
        call("nvmlGpuInstanceDestroy", gi)

    # -- containers -----------------------------------------------------------
    CONTROL_DEVICE_NODES: ClassVar[tuple[str, ...]] = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")

    def container_environment(self, grants: list[Grant]) -> dict[str, str]:
        """``NVIDIA_VISIBLE_DEVICES``: the GPU (or MIG device) uuids, what NVIDIA's container toolkit reads."""
        return {"NVIDIA_VISIBLE_DEVICES": ",".join(self.visible_device_id(g) for g in grants)}

    def container_device_nodes(self, grants: list[Grant]) -> list[tuple[str, str]]:
        """``/dev/nvidia<minor>`` of each GPU (a MIG device's parent), then the control devices."""
        minors = dict.fromkeys(self._minor_number(g) for g in grants)
        paths = [f"/dev/nvidia{minor}" for minor in minors] + list(self.CONTROL_DEVICE_NODES)
        return [(path, path) for path in paths]

    def _minor_number(self, grant: Grant) -> int:
        # The device file is numbered by the driver's minor number, which NVML's index usually equals;
        # ask NVML where the GPU is live (a library without the call answers with the index).
        device = self._devices.get(grant.uuid)
        if device is not None:
            with contextlib.suppress(NvmlError):
                return int(call("nvmlDeviceGetMinorNumber", device.handle))
        return grant.index

    # -- workload environment ----------------------------------------------
    def limiter_variables(self, position: int, grant: Grant) -> dict[str, str]:
        # HAMi-core's name for the one compute rule: none for MIG instances (the hardware isolates them),
        # exclusive grants, soft isolation and the unlimited policy
        return {
            f"CUDA_DEVICE_MEMORY_LIMIT_{position}": f"{grant.memory_mib}m",
            f"CUDA_DEVICE_SM_LIMIT_{position}": str(core_limit(self, grant)),
        }
