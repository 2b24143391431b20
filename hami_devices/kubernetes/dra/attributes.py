"""What a device says about itself in a ResourceSlice: attributes in the driver's domain and the vendor's.

Attribute values are Python ``str``/``int``/``bool`` or ``Version`` (a semantic
version), the four kinds a ``DeviceAttribute`` carries.  The 32-entry limit on
attributes plus capacities per device is checked where slices are built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias

from hami_devices.kubernetes.dra.names import DOMAIN, KIND_DEVICE, NVIDIA_DOMAIN
from hami_devices.models import DeviceInfo

# CUDA compute capability per catalog model (NVIDIA's published table); NVML's own answer wins on hardware.
CUDA_COMPUTE_CAPABILITY = {
    "T4": "7.5",
    "A10": "8.6",
    "A30": "8.0",
    "A100-40GB": "8.0",
    "A100-80GB": "8.0",
    "L4": "8.9",
    "L40S": "8.9",
    "H100": "9.0",
    "H200": "9.0",
}
# NVIDIA's architecture names, as NVML and the NVIDIA DRA driver spell them.
ARCHITECTURE = {"turing": "Turing", "ampere": "Ampere", "ada": "Ada Lovelace", "hopper": "Hopper"}


@dataclass(frozen=True)
class Version:
    """A semantic version attribute (``version`` in a DeviceAttribute)."""

    text: str


AttributeValue: TypeAlias = str | int | bool | Version
Attributes: TypeAlias = dict[str, dict[str, AttributeValue]]
"""domain -> attribute name -> value."""


def semver(text: str) -> Version:
    """A dotted number padded to major.minor.patch (``8.0`` -> ``8.0.0``); anything else kept as given."""
    parts = re.findall(r"\d+", text)
    if not parts:
        return Version(text)
    numbers = [*parts, "0", "0"][:3]
    return Version(".".join(str(int(p)) for p in numbers))


def device_attributes(info: DeviceInfo, *, kind: str = KIND_DEVICE) -> Attributes:
    """The driver-domain attributes of a physical device, plus the vendor's conventional ones."""
    own: dict[str, AttributeValue] = {
        "kind": kind,
        "vendor": info.vendor,
        "model": info.model,
        "uuid": info.uuid,
        "index": info.index,
        "memoryMiB": info.memory_mib,
        "splitCount": info.split_count,
    }
    if info.numa_node is not None:
        own["numaNode"] = info.numa_node
    if info.pci_bus_id:
        own["pciBusID"] = info.pci_bus_id
    capability = _compute_capability(info)
    if capability is not None:
        own["computeCapability"] = capability
    for units in ("aicore", "mlu_core", "sm"):
        if units in info.native_compute_units:
            own["computeUnits"] = info.native_compute_units[units]
            break
    traits = info.traits
    if traits is not None:
        own["generation"] = traits.generation
        for precision in ("fp16", "bf16", "fp8"):
            # int TFLOPS (attributes have no floats); 0 says the precision is unsupported
            own[f"{precision}Tflops"] = round(traits.peak_tflops.get(precision, 0.0))
        own["memoryBandwidthGBps"] = round(traits.memory_bandwidth_gbps)
        own["interconnect"] = traits.interconnect.kind
        own["interconnectGBps"] = round(traits.interconnect.bandwidth_gbps)
    if info.attributes.get("mig.mode") == "enabled":
        own["migEnabled"] = True
    if info.attributes.get("smlu") == "enabled":
        own["smluEnabled"] = True
    out: Attributes = {DOMAIN: own}
    if info.vendor == "nvidia":
        out[NVIDIA_DOMAIN] = _nvidia(info)
    return out


def _compute_capability(info: DeviceInfo) -> Version | None:
    if info.vendor == "nvidia":
        cc = info.attributes.get("cuda_compute_capability") or CUDA_COMPUTE_CAPABILITY.get(info.model)
        return semver(cc) if cc else None
    return None


def _nvidia(info: DeviceInfo) -> dict[str, AttributeValue]:
    """uuid, productName, architecture, cudaComputeCapability, driverVersion as NVIDIA's DRA driver publishes them."""
    out: dict[str, AttributeValue] = {"uuid": info.uuid}
    product = info.attributes.get("product_name")
    if not product and info.traits is not None:
        product = info.traits.aliases[0] if info.traits.aliases else info.traits.model
    out["productName"] = product or info.model
    arch = info.attributes.get("architecture")
    if (not arch or arch == "n/a") and info.traits is not None:
        arch = ARCHITECTURE.get(info.traits.generation, info.traits.generation)
    if arch and arch != "n/a":
        out["architecture"] = arch
    cc = _compute_capability(info)
    if cc is not None:
        out["cudaComputeCapability"] = cc
    driver = info.attributes.get("driver_version")
    if driver:
        out["driverVersion"] = semver(driver)
    return out


def to_api(attributes: Attributes) -> dict[str, dict[str, AttributeValue]]:
    """Fully qualified names (``domain/name``) -> ``DeviceAttribute`` JSON."""
    out: dict[str, dict[str, AttributeValue]] = {}
    for domain, values in attributes.items():
        for name, value in values.items():
            out[f"{domain}/{name}"] = _typed(value)
    return out


def _typed(value: AttributeValue) -> dict[str, AttributeValue]:
    if isinstance(value, Version):
        return {"version": value.text}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def from_api(raw: dict[str, dict[str, object]] | None, driver: str) -> Attributes:
    """``DeviceAttribute`` JSON back to domain -> name -> value; unqualified names belong to ``driver``."""
    out: Attributes = {}
    for qualified, typed in (raw or {}).items():
        domain, _, name = qualified.rpartition("/")
        domain = domain or driver
        value: AttributeValue
        if typed.get("version") is not None:
            value = Version(str(typed["version"]))
        elif typed.get("bool") is not None:
            value = bool(typed["bool"])
        elif typed.get("int") is not None:
            value = int(typed["int"])  # type: ignore[call-overload]
        else:
            value = str(typed.get("string", ""))
        out.setdefault(domain, {})[name] = value
    return out
