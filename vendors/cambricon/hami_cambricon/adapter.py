"""The Cambricon adapter: CNDev discovery and monitoring, sMLU instances, Cambricon runtime variables."""

from __future__ import annotations

import contextlib
import uuid as uuid_module
from typing import ClassVar

from hami_cambricon import partitions
from hami_cambricon.binding import Cndev, SmluInstance, load
from hami_cambricon.device import CambriconDevice
from hami_devices import traits as traits_catalog
from hami_devices.accounting import DeviceUsage
from hami_devices.adapter import Capability, Probe, VendorAdapter
from hami_devices.config import HamiConfig
from hami_devices.device import Device
from hami_devices.errors import DeviceUnavailable, ReasonCode, VendorLibraryError
from hami_devices.ledger import Ledger
from hami_devices.models import DeviceInfo, Grant, Health, PartitionProfile, RequestPart

ATTR_SMLU = "smlu"
"""``enabled`` when shares become sMLU instances; ``disabled`` when the limiter alone enforces them."""
ATTR_INSTANCES = "smlu.instances"
ATTR_RESERVED_MEMORY = "smlu.reserved_memory_mib"
ATTR_RESERVED_QUOTA = "smlu.reserved_quota"
"""Memory and quota held by sMLU instances that no allocation in the ledger owns.  The memory is
physical and is kept free of new instances; a quota is a cap, not a reservation, so it is only reported."""
ATTR_LINK_PORTS = "mlulink.ports"
ATTR_LINK_ACTIVE = "mlulink.active"

PAIR_SCORE_FABRIC = 100
PAIR_SCORE_PCIE_SAME_NUMA = 40
PAIR_SCORE_PCIE_CROSS_NUMA = 10
FULL_QUOTA = partitions.FULL_QUOTA


def _int_attr(info: DeviceInfo, key: str) -> int:
    try:
        return int(info.attributes.get(key, "0"))
    except ValueError:
        return 0


def split_partition_uuid(value: str) -> tuple[str, int | None, int | None]:
    """``<instance uuid>#<instance handle>[#<profile id made for it>]`` -> (uuid, handle, profile id)."""
    uuid, _, rest = value.partition("#")
    handle, _, profile = rest.partition("#")
    return uuid, int(handle) if handle.isdigit() else None, int(profile) if profile.isdigit() else None


class CambriconAdapter(VendorAdapter):
    name: ClassVar[str] = "cambricon"
    display_name: ClassVar[str] = "Cambricon"
    # sMLU instances are carved to any (quota, memory) shape: dynamic profiles, not only the catalog's
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {
            Capability.SIMULATED,
            Capability.MEMORY_LIMIT,
            Capability.PARTITIONS,
            Capability.DYNAMIC_PROFILES,
            Capability.TOPOLOGY,
        }
    )
    visible_devices_env: ClassVar[tuple[str, ...]] = ("MLU_VISIBLE_DEVICES", "CAMBRICON_VISIBLE_DEVICES")
    limiter_shim: ClassVar[str | None] = "libhami_cambricon.so"
    library_env: ClassVar[str | None] = "HAMI_CNDEV_LIBRARY"
    device_nodes: ClassVar[tuple[str, ...]] = ("cambricon_dev[0-9]*",)

    def __init__(self, config: HamiConfig | None = None) -> None:
        super().__init__(config)
        self._handles: dict[str, int] = {}

    # -- hardware back end -------------------------------------------------
    def probe(self) -> Probe:
        try:
            cndev = load()
            count = cndev.device_count()
        except (OSError, VendorLibraryError) as exc:
            return Probe(False, str(exc))
        return Probe(True, f"CNDev with {count} MLU(s)", library=cndev.path)

    def _cndev(self) -> Cndev:
        try:
            return load()
        except (OSError, VendorLibraryError) as exc:
            raise DeviceUnavailable(f"cambricon: {exc}") from exc

    def discover(self, ledger: Ledger) -> list[Device]:
        cndev = self._cndev()
        found: list[tuple[DeviceInfo, int]] = []
        for index in range(cndev.device_count()):
            handle = cndev.handle(index)
            found.append((self._describe(cndev, index, handle, ledger), handle))
        infos = [info for info, _ in found]
        devices: list[Device] = []
        for info, handle in found:
            scores = {other.uuid: self.pair_score(info, other) for other in infos if other.uuid != info.uuid}
            info = info.model_copy(update={"topology": scores})
            self._handles[info.uuid] = handle
            devices.append(CambriconDevice(info, self, ledger, cndev, handle))
        return devices

    def _describe(self, cndev: Cndev, index: int, handle: int, ledger: Ledger) -> DeviceInfo:
        raw_uuid = cndev.uuid(handle)
        uuid = raw_uuid if raw_uuid.upper().startswith("MLU-") else f"MLU-{raw_uuid}"
        card_name = cndev.card_name(handle)
        traits = traits_catalog.find(self.name, card_name)
        model = traits.model if traits else card_name or "unknown"
        total_mb, _ = cndev.memory_mb(handle)
        health = cndev.health(handle)
        try:
            pci: str | None = cndev.pci_bus_id(handle)
        except VendorLibraryError:
            pci = None
        try:
            numa = cndev.numa_node(handle)
        except VendorLibraryError:
            numa = None
        ports = cndev.mlulink_ports(handle)
        active = sum(1 for port in range(ports) if self._link_active(cndev, handle, port))
        smlu = cndev.smlu_enabled(handle)
        attributes = {
            "backend": "cndev",
            "card_name": card_name,
            ATTR_LINK_PORTS: str(ports),
            ATTR_LINK_ACTIVE: str(active),
            ATTR_SMLU: "enabled" if smlu else "disabled",
        }
        profiles = partitions.catalog(model, total_mb) if smlu else []
        if smlu:
            profiles = self._with_vendor_profiles(cndev, handle, profiles, total_mb)
            attributes.update(self._instance_attributes(cndev.smlu_instances(handle), uuid, ledger))
        native: dict[str, int] = {}
        with contextlib.suppress(VendorLibraryError):
            native["mlu_core"] = cndev.core_count(handle)
        return DeviceInfo(
            uuid=uuid,
            index=index,
            vendor=self.name,
            model=model,
            memory_mib=total_mb,
            numa_node=numa,
            pci_bus_id=pci,
            health=Health.HEALTHY if health.good else Health.UNHEALTHY,
            health_reason=None if health.good else f"CNDev {health.detail}",
            native_compute_units=native,
            partitions=profiles,
            split_count=self.config.device_plugin.split_count,
            traits=traits,
            attributes=attributes,
        )

    @staticmethod
    def _link_active(cndev: Cndev, handle: int, port: int) -> bool:
        try:
            return cndev.mlulink_active(handle, port)
        except VendorLibraryError:
            return False

    @staticmethod
    def _with_vendor_profiles(
        cndev: Cndev, handle: int, profiles: list[PartitionProfile], total_mb: int
    ) -> list[PartitionProfile]:
        """The catalog plus the sMLU profiles an administrator already made on the device."""
        names = {p.name for p in profiles}
        out = list(profiles)
        for vendor_profile in cndev.smlu_profiles(handle):
            memory = vendor_profile.memory_mib
            if memory <= 0 or memory % partitions.UNIT_MIB or not 1 <= vendor_profile.quota <= FULL_QUOTA:
                continue
            made = partitions.profile(vendor_profile.quota, memory, total_mb)
            if made.name not in names:
                names.add(made.name)
                out.append(made)
        return sorted(out, key=lambda p: (p.memory_mib, p.cores))

    @staticmethod
    def _instance_attributes(instances: list[SmluInstance], uuid: str, ledger: Ledger) -> dict[str, str]:
        if not instances:
            return {}
        owned = {split_partition_uuid(g.partition_uuid)[0] for g in ledger.grants_on(uuid) if g.partition_uuid}
        foreign = [i for i in instances if i.uuid not in owned]
        return {
            ATTR_INSTANCES: ",".join(f"{i.name}:{i.uuid}" for i in instances),
            ATTR_RESERVED_MEMORY: str(sum(i.memory_mib for i in foreign)),
            ATTR_RESERVED_QUOTA: str(sum(i.quota for i in foreign)),
        }

    # -- simulated back end ------------------------------------------------
    def complete_info(self, info: DeviceInfo) -> DeviceInfo:
        update: dict[str, object] = {}
        if not info.partitions:
            profiles = partitions.catalog(info.model, info.memory_mib)
            if profiles:
                update["partitions"] = profiles
        if ATTR_SMLU not in info.attributes and info.model in partitions.SMLU_MODELS:
            update["attributes"] = {**info.attributes, ATTR_SMLU: "enabled"}
        return info.model_copy(update=update) if update else info

    # -- sharing model -----------------------------------------------------
    def partition_catalog(self, model: str) -> list[PartitionProfile]:
        traits = traits_catalog.find(self.name, model)
        return partitions.catalog(model, traits.memory_mib) if traits else []

    def plan_grant(
        self, info: DeviceInfo, part: RequestPart, part_index: int, usage: DeviceUsage
    ) -> Grant | ReasonCode:
        """Memory in whole 256 MiB units; on an sMLU device a share becomes an sMLU instance."""
        reserved_memory = _int_attr(info, ATTR_RESERVED_MEMORY)
        reserved_quota = _int_attr(info, ATTR_RESERVED_QUOTA)
        smlu = info.attributes.get(ATTR_SMLU) == "enabled"
        memory = partitions.round_up(part.memory_for(info.memory_mib))
        cores = part.cores
        partition: str | None = None
        if part.partition not in (None, "auto"):
            chosen = next((p for p in info.partitions if p.name == part.partition), None)
            if chosen is None or not smlu:
                return ReasonCode.CARD_PARTITION_UNAVAILABLE
            # the named instance must hold what the part asks for, as a MIG or vNPU profile must
            sized = part.memory_mib is not None or part.memory_percent is not None
            asked = part.memory_for(info.memory_mib) if sized else 0
            if asked > chosen.memory_mib or cores > chosen.cores:
                return ReasonCode.CARD_PARTITION_UNAVAILABLE
            memory, cores, partition = chosen.memory_mib, chosen.cores, chosen.name
        elif part.exclusive:
            if memory > info.memory_mib:
                return ReasonCode.CARD_INSUFFICIENT_MEMORY
            if reserved_memory or reserved_quota:
                return ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE
            return self._grant(info, part_index, info.memory_mib, 100, exclusive=True)
        elif smlu:
            partition = partitions.profile_name(cores or None, memory)
        # an sMLU instance holds physical memory: no overcommit, and others' instances count
        if partition is not None and reserved_memory + usage.memory_mib + memory > info.memory_mib:
            return ReasonCode.CARD_INSUFFICIENT_MEMORY
        return self._grant(info, part_index, memory, cores, partition=partition)

    @staticmethod
    def _grant(
        info: DeviceInfo,
        part_index: int,
        memory: int,
        cores: int,
        *,
        exclusive: bool = False,
        partition: str | None = None,
    ) -> Grant:
        return Grant.on(info, part_index, memory, cores, exclusive=exclusive, partition=partition)

    # -- sMLU instances --------------------------------------------------------
    @staticmethod
    def _profile_id(cndev: Cndev, handle: int, quota: int, memory_mib: int) -> tuple[int, bool]:
        """An sMLU profile of this shape: an existing one, or a new one (then True)."""
        for existing in cndev.smlu_profiles(handle):
            if existing.quota == quota and existing.memory_mib == memory_mib:
                return existing.profile_id, False
        return cndev.create_smlu_profile(handle, quota, memory_mib), True

    def _create_instance(self, grant: Grant, handle: int) -> Grant:
        assert grant.partition is not None
        shape = partitions.parse_name(grant.partition)
        if shape is None:
            raise VendorLibraryError(self.name, "cndevCreateSMluInstanceByProfileId", None,
                                     f"not an sMLU profile name: {grant.partition!r}")
        quota, memory = shape
        cndev = self._cndev()
        profile_id, new_profile = self._profile_id(cndev, handle, quota, memory)
        name = f"hami-{uuid_module.uuid4().hex[:12]}"
        try:
            instance_handle = cndev.create_smlu_instance(handle, profile_id, name)
        except VendorLibraryError:
            if new_profile:
                with contextlib.suppress(VendorLibraryError):
                    cndev.destroy_smlu_profile(handle, profile_id)
            raise
        made = next((i for i in cndev.smlu_instances(handle) if i.name == name), None)
        instance_uuid = made.uuid if made is not None else name
        vendor_id = f"{instance_uuid}#{instance_handle}" + (f"#{profile_id}" if new_profile else "")
        return grant.model_copy(update={"partition_uuid": vendor_id})

    def prepare(self, grants: list[Grant]) -> list[Grant]:
        """Create one sMLU instance per sMLU grant on CNDev devices; undo them all if one fails."""
        out: list[Grant] = []
        created: list[Grant] = []
        try:
            for grant in grants:
                handle = self._handles.get(grant.uuid)
                if grant.partition is None or handle is None:
                    out.append(grant)
                    continue
                made = self._create_instance(grant, handle)
                created.append(made)
                out.append(made)
        except BaseException:
            self.teardown(created)
            raise
        return out

    def teardown(self, grants: list[Grant]) -> None:
        for grant in grants:
            if grant.partition_uuid is None:
                continue
            _, instance_handle, profile_id = split_partition_uuid(grant.partition_uuid)
            if instance_handle is None:
                continue
            try:
                cndev = self._cndev()
                cndev.destroy_smlu_instance(instance_handle)
            except (VendorLibraryError, DeviceUnavailable):
                continue  # already gone
            if profile_id is not None:  # made for this grant; another grant may still use it
                with contextlib.suppress(VendorLibraryError):
                    cndev.destroy_smlu_profile(self._handles.get(grant.uuid, grant.index), profile_id)

    # -- workload environment ----------------------------------------------
    def environment(self, grants: list[Grant], region_path: str | None) -> dict[str, str]:
        """``MLU_VISIBLE_DEVICES``: device indexes for the runtime; ``CAMBRICON_VISIBLE_DEVICES``:
        device (or sMLU instance) uuids for the container runtime."""
        from hami_devices.isolation import limiter_environment

        env = {
            "MLU_VISIBLE_DEVICES": ",".join(str(g.index) for g in grants),
            "CAMBRICON_VISIBLE_DEVICES": ",".join(self.visible_device_id(g) for g in grants),
        }
        env.update(limiter_environment(self, grants, region_path))
        return env

    CONTROL_DEVICE_NODES: ClassVar[tuple[str, ...]] = ("/dev/cambricon_ctl",)

    def container_device_nodes(self, grants: list[Grant]) -> list[tuple[str, str]]:
        """``/dev/cambricon_dev<index>`` of each card (an sMLU instance's parent), then ``/dev/cambricon_ctl``."""
        paths = [f"/dev/cambricon_dev{index}" for index in dict.fromkeys(g.index for g in grants)]
        return [(path, path) for path in paths + list(self.CONTROL_DEVICE_NODES)]

    def visible_device_id(self, grant: Grant) -> str:
        if grant.partition_uuid:
            return split_partition_uuid(grant.partition_uuid)[0]
        return grant.uuid

    # -- topology ------------------------------------------------------------
    def pair_score(self, a: DeviceInfo, b: DeviceInfo) -> int:
        """Two MLUs with active MLU-Link ports score 100; PCIe pairs score by NUMA."""
        if b.uuid in a.topology:
            return a.topology[b.uuid]
        linked = all(
            d.traits is not None and d.traits.interconnect.kind == "mlu-link" and _int_attr(d, ATTR_LINK_ACTIVE) > 0
            for d in (a, b)
        )
        if linked and a.node == b.node:
            return PAIR_SCORE_FABRIC
        return PAIR_SCORE_PCIE_SAME_NUMA if a.numa_node == b.numa_node else PAIR_SCORE_PCIE_CROSS_NUMA
