"""The Huawei Ascend adapter: DCMI discovery and monitoring, vNPU templates, Ascend runtime variables."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from hami_ascend import partitions
from hami_ascend.binding import Dcmi, VnpuInfo, load
from hami_ascend.device import AscendDevice, Location, health_of
from hami_devices import traits as traits_catalog
from hami_devices.accounting import DeviceUsage
from hami_devices.adapter import Capability, Probe, VendorAdapter
from hami_devices.config import HamiConfig
from hami_devices.device import Device
from hami_devices.errors import DeviceUnavailable, ReasonCode, VendorLibraryError
from hami_devices.ledger import Ledger
from hami_devices.models import DeviceInfo, Grant, Health, PartitionProfile, RequestPart

ATTR_VNPUS = "vnpus"
"""Every vNPU DCMI reports on the chip at discovery, as ``template:vdev_id`` pairs."""
ATTR_RESERVED_AICORE = "vnpu.reserved_aicore"
ATTR_RESERVED_MEMORY = "vnpu.reserved_memory_mib"
"""AICores and memory held by vNPUs that no allocation in the ledger owns (made by someone else)."""

PAIR_SCORE_FABRIC = 100
PAIR_SCORE_PCIE_SAME_NUMA = 40
PAIR_SCORE_PCIE_CROSS_NUMA = 10
HCCS_GROUP_910A = 4
"""A 910A server links its chips by HCCS in two groups of four; 910B chips form one full mesh."""


def _numa_node(pci_bus_id: str | None) -> int | None:
    if not pci_bus_id:
        return None
    try:
        value = int(Path(f"/sys/bus/pci/devices/{pci_bus_id}/numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def _int_attr(info: DeviceInfo, key: str) -> int:
    try:
        return int(info.attributes.get(key, "0"))
    except ValueError:
        return 0


class AscendAdapter(VendorAdapter):
    name: ClassVar[str] = "ascend"
    display_name: ClassVar[str] = "Huawei Ascend"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.SIMULATED, Capability.MEMORY_LIMIT, Capability.PARTITIONS, Capability.TOPOLOGY}
    )
    visible_devices_env: ClassVar[tuple[str, ...]] = ("ASCEND_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")
    vnpu_specs_env: ClassVar[str] = "ASCEND_VNPU_SPECS"
    limiter_shim: ClassVar[str | None] = "libhami_ascend.so"
    library_env: ClassVar[str | None] = "HAMI_DCMI_LIBRARY"
    device_nodes: ClassVar[tuple[str, ...]] = ("davinci[0-9]*",)

    def __init__(self, config: HamiConfig | None = None) -> None:
        super().__init__(config)
        self._locations: dict[str, Location] = {}

    # -- hardware back end -------------------------------------------------
    def probe(self) -> Probe:
        try:
            dcmi = load()
            chips = sum(dcmi.device_count(card) for card in dcmi.card_list())
            version = dcmi.driver_version()
        except (OSError, VendorLibraryError) as exc:
            return Probe(False, str(exc))
        return Probe(True, f"DCMI driver {version}, {chips} NPU chip(s)", library=dcmi.path)

    def _dcmi(self) -> Dcmi:
        try:
            return load()
        except (OSError, VendorLibraryError) as exc:
            raise DeviceUnavailable(f"ascend: {exc}") from exc

    def discover(self, ledger: Ledger) -> list[Device]:
        dcmi = self._dcmi()
        found: list[tuple[DeviceInfo, Location]] = []
        for card in dcmi.card_list():
            for dev in range(dcmi.device_count(card)):
                found.append(self._describe(dcmi, card, dev, ledger))
        infos = self._with_topology([info for info, _ in found])
        devices: list[Device] = []
        for info, (_, location) in zip(infos, found, strict=True):
            self._locations[info.uuid] = location
            devices.append(AscendDevice(info, self, ledger, dcmi, location))
        return devices

    def _describe(self, dcmi: Dcmi, card: int, dev: int, ledger: Ledger) -> tuple[DeviceInfo, Location]:
        logic_id = dcmi.logic_id(card, dev)
        location = Location(card, dev, logic_id, dcmi.phy_id(logic_id))
        chip = dcmi.chip_info(card, dev)
        traits = traits_catalog.find(self.name, chip.chip_name)
        model = traits.model if traits else chip.chip_name
        try:
            uuid = dcmi.die_id(card, dev)
        except VendorLibraryError:
            uuid = f"NPU-card{card}-chip{dev}"
        try:
            pci: str | None = dcmi.pci_bus_id(card, dev)
        except VendorLibraryError:
            pci = None
        memory = dcmi.memory(card, dev)
        code = dcmi.health(card, dev)
        health = health_of(code)
        reason = None
        if health == Health.UNHEALTHY:
            codes = ",".join(f"{c:#x}" for c in self._error_codes(dcmi, card, dev))
            reason = f"DCMI health {code}" + (f"; error codes {codes}" if codes else "")
        attributes = {
            "backend": "dcmi",
            "card": str(card),
            "device": str(dev),
            "logic_id": str(logic_id),
            "phy_id": str(location.phy_id),
            "chip_name": chip.chip_name,
            "chip_version": chip.chip_version,
            "memory_kind": memory.kind,
        }
        attributes.update(self._vnpu_attributes(dcmi.vnpus(card, dev), uuid, ledger, chip.chip_name))
        catalog = partitions.profiles(model, memory.total_mb, chip.aicore_count)
        info = DeviceInfo(
            uuid=uuid,
            index=logic_id,
            vendor=self.name,
            model=model,
            memory_mib=memory.total_mb,
            numa_node=_numa_node(pci),
            pci_bus_id=pci,
            health=health,
            health_reason=reason,
            native_compute_units={"aicore": chip.aicore_count},
            partitions=catalog,
            split_count=self._split_count(catalog),
            traits=traits,
            attributes=attributes,
        )
        return info, location

    @staticmethod
    def _error_codes(dcmi: Dcmi, card: int, dev: int) -> list[int]:
        try:
            return dcmi.error_codes(card, dev)
        except VendorLibraryError:
            return []

    def _vnpu_attributes(self, vnpus: list[VnpuInfo], uuid: str, ledger: Ledger, chip: str) -> dict[str, str]:
        if not vnpus:
            return {}
        owned = {g.partition_uuid for g in ledger.grants_on(uuid) if g.partition_uuid}
        spec = partitions.chip_spec(chip)
        sizes = {t.name: t for t in spec.templates} if spec else {}
        foreign = [v for v in vnpus if str(v.vdev_id) not in owned]
        aicore = sum(int(v.aicore) or (sizes[v.template].aicore if v.template in sizes else 0) for v in foreign)
        memory = sum(
            v.memory_mb or (sizes[v.template].memory_mib if v.template in sizes else 0) for v in foreign
        )
        return {
            ATTR_VNPUS: ",".join(f"{v.template}:{v.vdev_id}" for v in vnpus),
            ATTR_RESERVED_AICORE: str(aicore),
            ATTR_RESERVED_MEMORY: str(memory),
        }

    def _split_count(self, catalog: Sequence[PartitionProfile]) -> int:
        configured = self.config.device_plugin.split_count
        if not catalog:
            return configured
        return max(1, min(configured, max(p.max_instances for p in catalog)))

    def _with_topology(self, infos: list[DeviceInfo]) -> list[DeviceInfo]:
        out = []
        for a in infos:
            scores = {b.uuid: self.pair_score(a, b) for b in infos if b.uuid != a.uuid}
            out.append(a.model_copy(update={"topology": scores}))
        return out

    # -- simulated back end ------------------------------------------------
    def complete_info(self, info: DeviceInfo) -> DeviceInfo:
        update: dict[str, object] = {}
        if not info.partitions:
            catalog = partitions.profiles(info.model, info.memory_mib)
            if catalog:
                update["partitions"] = catalog
        spec = partitions.chip_spec(info.model)
        if spec is not None and not info.native_compute_units:
            update["native_compute_units"] = {"aicore": spec.aicore}
        return info.model_copy(update=update) if update else info

    # -- sharing model -----------------------------------------------------
    def partition_catalog(self, model: str) -> list[PartitionProfile]:
        return partitions.profiles(model)

    def plain_shares(self, info: DeviceInfo) -> bool:
        """Only chips without vNPU templates take plain shares; the others round every share to a template."""
        return not (info.partitions or partitions.profiles(info.model, info.memory_mib))

    def plan_grant(
        self, info: DeviceInfo, part: RequestPart, part_index: int, usage: DeviceUsage
    ) -> Grant | ReasonCode:
        """Round the part up to the smallest vNPU template that fits; too big for any: the whole chip."""
        catalog = info.partitions or partitions.profiles(info.model, info.memory_mib)
        if not catalog:
            return super().plan_grant(info, part, part_index, usage)
        named = part.partition not in (None, "auto")
        asked = part.memory_mib is not None or part.memory_percent is not None
        memory = part.memory_for(info.memory_mib) if asked or not named else 0
        reserved_aicore = _int_attr(info, ATTR_RESERVED_AICORE)
        reserved_memory = _int_attr(info, ATTR_RESERVED_MEMORY)
        if memory > info.memory_mib:
            return ReasonCode.CARD_INSUFFICIENT_MEMORY  # not even the whole chip holds it
        if not named and (part.exclusive or not partitions.covers(catalog, memory, part.cores)):
            if reserved_aicore or reserved_memory:
                return ReasonCode.CARD_NOT_EMPTY_FOR_EXCLUSIVE
            return self._grant(info, part_index, info.memory_mib, 100, exclusive=True)
        chip_aicore = info.native_compute_units.get("aicore") or max(p.native.get("aicore", 0) for p in catalog)
        free_aicore = chip_aicore - reserved_aicore - partitions.aicores_of(usage.partitions, catalog)
        free_memory = info.memory_mib - reserved_memory - usage.memory_mib
        profile = partitions.smallest_fitting(
            catalog, memory, part.cores, free_aicore, free_memory, part.partition if named else None
        )
        if profile is None:
            if named and not any(p.name == part.partition for p in catalog):
                return ReasonCode.CARD_PARTITION_UNAVAILABLE
            if free_memory < memory:
                return ReasonCode.CARD_INSUFFICIENT_MEMORY
            return ReasonCode.CARD_PARTITION_UNAVAILABLE
        return self._grant(info, part_index, profile.memory_mib, profile.cores, partition=profile.name)

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

    # -- vNPU creation -------------------------------------------------------
    def _hardware_location(self, uuid: str) -> Location | None:
        """Where a chip of this node sits; found again through DCMI after a restart."""
        known = self._locations
        if uuid in known:
            return known[uuid]
        try:
            dcmi = load()
            for card in dcmi.card_list():
                for dev in range(dcmi.device_count(card)):
                    try:
                        die = dcmi.die_id(card, dev)
                    except VendorLibraryError:
                        continue
                    logic_id = dcmi.logic_id(card, dev)
                    known[die] = Location(card, dev, logic_id, dcmi.phy_id(logic_id))
        except (OSError, VendorLibraryError):
            return None
        return known.get(uuid)

    def prepare(self, grants: list[Grant]) -> list[Grant]:
        """Create one vNPU per templated grant on DCMI chips; undo them all if one fails."""
        out: list[Grant] = []
        created: list[Grant] = []
        try:
            for grant in grants:
                location = self._locations.get(grant.uuid)
                if grant.partition is None or location is None:
                    out.append(grant)
                    continue
                vdev_id = self._dcmi().create_vnpu(location.card, location.device, grant.partition)
                made = grant.model_copy(update={"partition_uuid": str(vdev_id)})
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
            location = self._hardware_location(grant.uuid)
            if location is None:
                continue
            try:
                self._dcmi().destroy_vnpu(location.card, location.device, int(grant.partition_uuid))
            except (VendorLibraryError, DeviceUnavailable, ValueError):
                continue  # already gone

    # -- workload environment ----------------------------------------------
    def _phy_id(self, grant: Grant) -> int:
        location = self._locations.get(grant.uuid)
        return location.phy_id if location is not None else grant.index

    def visible_device_id(self, grant: Grant) -> str:
        """The vNPU id for a created vNPU, else the chip's physical id (what the Ascend runtime takes)."""
        return grant.partition_uuid or str(self._phy_id(grant))

    CONTROL_DEVICE_NODES: ClassVar[tuple[str, ...]] = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")

    def container_device_nodes(self, grants: list[Grant]) -> list[tuple[str, str]]:
        """``/dev/davinci<physical id>`` per chip; a vNPU is the host's ``/dev/vdavinci<id>`` seen in the container
        as ``/dev/davinci<id>`` (as Ascend's container runtime mounts it); then the control devices."""
        nodes: dict[str, str] = {}
        for grant in grants:
            if grant.partition_uuid:
                nodes[f"/dev/davinci{grant.partition_uuid}"] = f"/dev/vdavinci{grant.partition_uuid}"
            else:
                path = f"/dev/davinci{self._phy_id(grant)}"
                nodes[path] = path
        nodes.update((path, path) for path in self.CONTROL_DEVICE_NODES)
        return list(nodes.items())

    def environment(self, grants: list[Grant], region_path: str | None) -> dict[str, str]:
        """``ASCEND_VISIBLE_DEVICES`` (physical or vNPU ids, for the container runtime),
        ``ASCEND_RT_VISIBLE_DEVICES`` (logic or vNPU ids, for the process), and
        ``ASCEND_VNPU_SPECS`` naming the templates of vNPU grants."""
        from hami_devices.isolation import limiter_environment

        env = {
            "ASCEND_VISIBLE_DEVICES": ",".join(self.visible_device_id(g) for g in grants),
            "ASCEND_RT_VISIBLE_DEVICES": ",".join(g.partition_uuid or str(g.index) for g in grants),
        }
        specs = [g.partition for g in grants if g.partition]
        if specs:
            env[self.vnpu_specs_env] = ",".join(specs)
        env.update(limiter_environment(self, grants, region_path))
        return env

    # -- topology ------------------------------------------------------------
    def pair_score(self, a: DeviceInfo, b: DeviceInfo) -> int:
        """HCCS peers score 100 (910B: all chips; 910A: within a group of four); PCIe by NUMA."""
        if b.uuid in a.topology:
            return a.topology[b.uuid]
        kind_a = a.traits.interconnect.kind if a.traits else "pcie"
        kind_b = b.traits.interconnect.kind if b.traits else "pcie"
        if kind_a == kind_b == "hccs" and a.node == b.node and a.model == b.model:
            if a.model != "910A":
                return PAIR_SCORE_FABRIC
            phy_a = int(a.attributes.get("phy_id", a.index))
            phy_b = int(b.attributes.get("phy_id", b.index))
            if phy_a // HCCS_GROUP_910A == phy_b // HCCS_GROUP_910A:
                return PAIR_SCORE_FABRIC
        return PAIR_SCORE_PCIE_SAME_NUMA if a.numa_node == b.numa_node else PAIR_SCORE_PCIE_CROSS_NUMA
