"""The published devices, read back from ResourceSlices: what a scheduler sees.

Only a pool's newest generation counts, and only once all of its slices are there
(as the API documents for consumers).  The driver's own physical devices are turned
back into ``DeviceInfo`` (identity, memory, NUMA, split count, the catalog's traits)
so that the scheduling engine, with each vendor adapter as its rule, places on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.inventory import Inventory, NodeSpec
from hami_devices.kubernetes import quantity as q
from hami_devices.kubernetes.dra import names
from hami_devices.kubernetes.dra.attributes import Attributes, from_api
from hami_devices.kubernetes.dra.cel import SelectorEnv, device_variable
from hami_devices.models import DeviceInfo, DeviceTraits
from hami_devices.scheduling.cluster import UNBOUNDED

PAIR_FABRIC, PAIR_SAME_NUMA, PAIR_CROSS_NUMA = 100, 40, 10


@dataclass
class CatalogDevice:
    driver: str
    pool: str
    node: str
    name: str
    attributes: Attributes
    capacity: dict[str, dict[str, Decimal]]  # domain -> name -> amount
    shareable: bool
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)  # qualified capacity name -> requestPolicy
    counter_set: str | None = None
    consumes: dict[str, Decimal] = field(default_factory=dict)

    def own(self, key: str) -> Any:
        return self.attributes.get(names.DOMAIN, {}).get(key)

    @property
    def ours(self) -> bool:
        return self.driver == names.DRIVER

    @property
    def kind(self) -> str | None:
        value = self.own("kind")
        return value if isinstance(value, str) else None

    def attribute(self, qualified: str) -> Any:
        domain, _, name = qualified.rpartition("/")
        return self.attributes.get(domain or self.driver, {}).get(name)


@dataclass
class Catalog:
    devices: list[CatalogDevice]
    counters: dict[tuple[str, str, str], dict[str, Decimal]]  # (driver, pool, set) -> counter -> amount
    skipped_pools: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.index = {(d.driver, d.pool, d.name): i for i, d in enumerate(self.devices)}
        domains = sorted({dom for d in self.devices for dom in [*d.attributes, *d.capacity]})
        self.env = SelectorEnv(
            [device_variable(d.driver, d.attributes, d.capacity, d.shareable, domains) for d in self.devices],
            [f"{d.driver}/{d.pool}/{d.name}" for d in self.devices],
        )

    def physical(self) -> list[int]:
        return [i for i, d in enumerate(self.devices) if d.ours and d.kind == names.KIND_DEVICE]

    def by_uuid(self) -> dict[str, int]:
        return {str(self.devices[i].own("uuid")): i for i in self.physical()}


def from_slices(objects: Iterable[Mapping[str, Any]]) -> Catalog:
    """Every ResourceSlice among ``objects`` (other kinds are ignored)."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for obj in objects:
        if obj.get("kind") != "ResourceSlice":
            continue
        spec = obj.get("spec") or {}
        pool = spec.get("pool") or {}
        key = (str(spec.get("driver")), str(pool.get("name")))
        pools.setdefault(key, []).append(obj)
    devices: list[CatalogDevice] = []
    counters: dict[tuple[str, str, str], dict[str, Decimal]] = {}
    skipped: list[str] = []
    for (driver, pool), slices in sorted(pools.items()):
        newest = max(int(s["spec"]["pool"].get("generation", 0)) for s in slices)
        current = [s for s in slices if int(s["spec"]["pool"].get("generation", 0)) == newest]
        expected = int(current[0]["spec"]["pool"].get("resourceSliceCount", 1))
        if len(current) != expected:
            skipped.append(f"{driver}/{pool}")  # incomplete: wait for the driver to finish publishing
            continue
        for s in current:
            spec = s["spec"]
            node = spec.get("nodeName") or pool
            for cs in spec.get("sharedCounters") or []:
                counters[(driver, pool, cs["name"])] = {
                    k: q.parse(v["value"], f"sharedCounters.{cs['name']}.{k}") for k, v in cs["counters"].items()
                }
            for raw in spec.get("devices") or []:
                devices.append(_device(driver, pool, node, raw))
    return Catalog(devices, counters, skipped)


def _device(driver: str, pool: str, node: str, raw: Mapping[str, Any]) -> CatalogDevice:
    capacity: dict[str, dict[str, Decimal]] = {}
    policies: dict[str, dict[str, Any]] = {}
    for qualified, cap in (raw.get("capacity") or {}).items():
        domain, _, name = qualified.rpartition("/")
        capacity.setdefault(domain or driver, {})[name] = q.parse(cap["value"], f"devices.{raw['name']}.capacity")
        if cap.get("requestPolicy"):
            policies[f"{domain or driver}/{name}"] = cap["requestPolicy"]
    consumes = (raw.get("consumesCounters") or [None])[0]
    return CatalogDevice(
        driver=driver,
        pool=pool,
        node=node,
        name=raw["name"],
        attributes=from_api(raw.get("attributes"), driver),
        capacity=capacity,
        shareable=bool(raw.get("allowMultipleAllocations")),
        policies=policies,
        counter_set=consumes["counterSet"] if consumes else None,
        consumes={k: q.parse(v["value"]) for k, v in consumes["counters"].items()} if consumes else {},
    )


def device_info(device: CatalogDevice, traits: DeviceTraits | None) -> DeviceInfo:
    """The engine's view of one of our physical devices."""
    own = device.attributes.get(names.DOMAIN, {})
    try:
        extras = {}
        if own.get("migEnabled") is True:
            extras["mig.mode"] = "enabled"
        if own.get("smluEnabled") is True:
            extras["smlu"] = "enabled"
        return DeviceInfo(
            uuid=str(own["uuid"]),
            index=int(own["index"]),  # type: ignore[arg-type]
            vendor=str(own["vendor"]),
            model=str(own["model"]),
            node=device.node,
            memory_mib=int(own["memoryMiB"]),  # type: ignore[arg-type]
            numa_node=int(own["numaNode"]) if "numaNode" in own else None,  # type: ignore[arg-type]
            pci_bus_id=str(own["pciBusID"]) if "pciBusID" in own else None,
            split_count=int(own.get("splitCount", 10)),  # type: ignore[arg-type]
            traits=traits,
            attributes={"backend": "dra", **extras},
        )
    except KeyError as exc:
        where = f"{device.pool}/{device.name}.attributes"
        raise InvalidRequest(where, f"missing {names.DOMAIN}/{exc.args[0]}") from None


def _fabric(info: DeviceInfo) -> bool:
    return info.traits is not None and not info.traits.interconnect.kind.startswith("pcie")


def inventory(catalog: Catalog, traits_for: Any) -> Inventory:
    """Our physical devices as an Inventory (nodes with unbounded host resources: DRA places devices only)."""
    nodes: dict[str, list[DeviceInfo]] = {}
    for i in catalog.physical():
        d = catalog.devices[i]
        info = device_info(d, traits_for(str(d.own("vendor")), str(d.own("model"))))
        nodes.setdefault(info.node, []).append(info)
    specs = []
    for node, infos in sorted(nodes.items()):
        scored = []
        for a in infos:
            pairs = {}
            for b in infos:
                if b.uuid == a.uuid or b.vendor != a.vendor:
                    continue
                if a.model == b.model and _fabric(a) and _fabric(b):
                    pairs[b.uuid] = PAIR_FABRIC
                else:
                    pairs[b.uuid] = PAIR_SAME_NUMA if a.numa_node == b.numa_node else PAIR_CROSS_NUMA
            scored.append(a.model_copy(update={"topology": pairs}))
        specs.append(NodeSpec(name=node, cpu_milli=UNBOUNDED, memory_mib=UNBOUNDED, devices=scored))
    return Inventory(nodes=specs, source="resourceslices")
