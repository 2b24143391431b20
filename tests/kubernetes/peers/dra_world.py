"""The DRA objects the peer tests hand to Kubernetes' code: our published slices and classes, and claims,
from the examples and from a seeded generator (selectors, capacity requests, matchAttribute, partitions)."""

from __future__ import annotations

import random
import uuid
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from hami_devices.config import HamiConfig
from hami_devices.errors import HamiError
from hami_devices.kubernetes.dra.allocator import DraAllocator
from hami_devices.kubernetes.dra.publish import publish_inventory
from hami_devices.registry import VendorRegistry, load_vendors
from tests.conftest import EXAMPLES

DRA = EXAMPLES / "dra"
INVENTORY = DRA / "inventory.yaml"
EXAMPLE_CLAIMS = [DRA / "mixed-tier-claim.yaml", DRA / "mlu-t4-claim.yaml"]
RELEASE_RULES = {"pinned": "1.34", "latest": "1.35"}
"""Which slice rules each peer release is given (``packing``)."""

OWN = 'device.attributes["hami-devices.io"]'
NVIDIA = 'device.attributes["gpu.nvidia.com"]'
SELECTORS = {
    "device": [
        f'{OWN}.model == "T4"', f'{OWN}.model == "A30"', f'{OWN}.model == "H100"', f'{OWN}.model == "A100-80GB"',
        f"{OWN}.memoryMiB >= 40000", f"{OWN}.memoryMiB < 30000", f'{OWN}.vendor == "nvidia"',
        f'{NVIDIA}.productName == "NVIDIA A30"',
        f'{NVIDIA}.cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
        'device.capacity["hami-devices.io"].memory.compareTo(quantity("64Gi")) >= 0',
        'device.capacity["hami-devices.io"].memory.compareTo(quantity("20Gi")) < 0',
        f"{OWN}.numaNode == 0", f"{OWN}.numaNode == 1",
    ],
    "partition": [
        f'{OWN}.partition == "1g.10gb"', f'{OWN}.partition == "3g.40gb"', f'{OWN}.partition == "1g.6gb"',
        f'{OWN}.partition.startsWith("vir")', f'{OWN}.model == "A30"',
        'device.capacity["hami-devices.io"].memory.compareTo(quantity("10Gi")) >= 0',
    ],
}
CLASSES = {
    "device": ["gpu.hami-devices.io", "gpu.hami-devices.io", "npu.hami-devices.io", "mlu.hami-devices.io",
               "hami-devices.io"],
    "partition": ["mig.hami-devices.io", "vnpu.hami-devices.io", "smlu.hami-devices.io", "partition.hami-devices.io"],
}
MEMORY = ["1Gi", "4Gi", "4000Mi", "10Gi", "16Gi", "20Gi", "40Gi", "70Gi"]
CORES = ["10", "25", "30", "50", "100"]
MATCH = ["hami-devices.io/model", "hami-devices.io/numaNode", "hami-devices.io/vendor"]


@cache
def config() -> HamiConfig:
    return HamiConfig.model_validate({"device-plugin": {"mig-mode": "flexible"}})


@cache
def registry() -> VendorRegistry:
    return load_vendors(config=config())


def published(rules: str, inventory: Path = INVENTORY) -> list[dict[str, Any]]:
    """DeviceClasses and every node's ResourceSlices of ``inventory`` (the example DRA inventory), under ``rules``."""
    return publish_inventory(inventory, config(), registry=registry(), kubernetes=rules)


def counters_apart(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same pools with every counter set moved to a slice of its own (one per pool): what 1.34's slices
    mean, written as 1.35 and newer accept it (a device finds its counter set anywhere in its pool)."""
    out: list[dict[str, Any]] = []
    extra: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in objects:
        if obj["kind"] != "ResourceSlice" or not obj["spec"].get("sharedCounters"):
            out.append(obj)
            continue
        spec = dict(obj["spec"])
        sets = spec.pop("sharedCounters")
        out.append({**obj, "spec": spec})
        key = (spec["driver"], spec["pool"]["name"])
        holder = extra.setdefault(key, {**obj, "metadata": {**obj["metadata"], "name": obj["metadata"]["name"] + "-c"},
                                        "spec": {k: v for k, v in spec.items() if k != "devices"}
                                        | {"sharedCounters": []}})
        holder["spec"]["sharedCounters"].extend(sets)
    out.extend(extra.values())
    for obj in out:
        if obj["kind"] == "ResourceSlice" and (obj["spec"]["driver"], obj["spec"]["pool"]["name"]) in extra:
            count = sum(1 for o in out if o["kind"] == "ResourceSlice" and o["spec"]["pool"]["name"]
                        == obj["spec"]["pool"]["name"] and o["spec"]["driver"] == obj["spec"]["driver"])
            obj["spec"] = {**obj["spec"], "pool": {**obj["spec"]["pool"], "resourceSliceCount": count}}
    return out


def card_of(objects: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(pool, device) -> the card it is on: a partition's parentDevice, a card itself."""
    out = {}
    for obj in objects:
        if obj["kind"] != "ResourceSlice":
            continue
        for d in obj["spec"].get("devices") or []:
            parent = d["attributes"].get("hami-devices.io/parentDevice", {}).get("string")
            out[(obj["spec"]["pool"]["name"], d["name"])] = parent or d["name"]
    return out


def share_beside_partition(cards: dict[tuple[str, str], str], held: list[dict[str, Any]],
                           allocation: dict[str, Any]) -> bool:
    """Whether ``allocation`` puts a share on a card a held partition is on, or a partition on a shared card."""
    shared, partitioned = set(), set()
    for a in held:
        for r in a["devices"]["results"]:
            card = (r["pool"], cards[(r["pool"], r["device"])])
            (shared if "shareID" in r else partitioned).add(card)
    for r in allocation["devices"]["results"]:
        card = (r["pool"], cards[(r["pool"], r["device"])])
        if card in (partitioned if "shareID" in r else shared):
            return True
    return False


def nodes(objects: list[dict[str, Any]]) -> list[str]:
    return sorted({o["spec"]["nodeName"] for o in objects if o["kind"] == "ResourceSlice"})


def claim(name: str, requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None
          ) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"claim/{name}"))
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "uid": uid}, "spec": {"devices": devices}}


def example_claims() -> list[dict[str, Any]]:
    return [yaml.safe_load(Path(p).read_text()) for p in EXAMPLE_CLAIMS]


def _request(rng: random.Random, name: str) -> dict[str, Any]:
    kind = "partition" if rng.random() < 0.3 else "device"
    body: dict[str, Any] = {"deviceClassName": rng.choice(CLASSES[kind])}
    if rng.random() < 0.6:
        body["selectors"] = [{"cel": {"expression": e}} for e in rng.sample(SELECTORS[kind], rng.choice([1, 1, 2]))]
    if kind == "device":
        if rng.random() < 0.2:
            body["count"] = 2
        if rng.random() < 0.75:
            wanted = {"memory": rng.choice(MEMORY)}
            if rng.random() < 0.6:
                wanted["cores"] = rng.choice(CORES)
            body["capacity"] = {"requests": wanted}
    return {"name": name, "exactly": body}


def generated_claims(seed: int, count: int) -> list[dict[str, Any]]:
    """``count`` claims of one to three requests; some with matchAttribute across their requests."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        requests = [_request(rng, f"r{k}") for k in range(rng.choice([1, 1, 1, 2, 2, 3]))]
        constraints = None
        if len(requests) > 1 and rng.random() < 0.4:
            constraints = [{"matchAttribute": rng.choice(MATCH)}]
        out.append(claim(f"gen-{seed}-{i}", requests, constraints))
    return out


def allocate_in_order(objects: list[dict[str, Any]], claims: list[dict[str, Any]], policy: str | None = None
                      ) -> list[dict[str, Any]]:
    """Each claim as our allocator leaves it, in order: with ``status.allocation`` when it allocated it."""
    allocator = DraAllocator(objects, config(), registry=registry(), policy=policy)
    out = []
    for c in claims:
        try:
            out.append(allocator.allocated(c))
        except HamiError:
            out.append(c)
    return out
