"""DeviceClasses: a class for every shareable device, one per vendor, and one per vendor's partitions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hami_devices.kubernetes.dra import names

_DEVICE_CLASS = {"nvidia": "gpu", "ascend": "npu", "cambricon": "mlu"}
_PARTITION_CLASS = {"nvidia": "mig", "ascend": "vnpu", "cambricon": "smlu"}


def _selector(kind: str, vendor: str | None = None) -> str:
    expr = f'device.driver == "{names.DRIVER}" && device.attributes["{names.DOMAIN}"].kind == "{kind}"'
    if vendor is not None:
        expr += f' && device.attributes["{names.DOMAIN}"].vendor == "{vendor}"'
    return expr


def class_specs(vendors: Iterable[str]) -> dict[str, str]:
    """Class name -> CEL selector."""
    out = {
        names.DRIVER: _selector(names.KIND_DEVICE),
        f"partition.{names.DRIVER}": _selector(names.KIND_PARTITION),
    }
    for vendor in sorted(set(vendors)):
        out[f"{names.label(_DEVICE_CLASS.get(vendor, vendor))}.{names.DRIVER}"] = _selector(names.KIND_DEVICE, vendor)
        partition = _PARTITION_CLASS.get(vendor, f"{vendor}-partition")
        out[f"{names.label(partition)}.{names.DRIVER}"] = _selector(names.KIND_PARTITION, vendor)
    return out


def device_classes(vendors: Iterable[str]) -> list[dict[str, Any]]:
    """The DeviceClass objects (API JSON, through the client's models)."""
    from kubernetes.client import ApiClient, V1DeviceClass

    out = []
    for name, expression in class_specs(vendors).items():
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }
        model = V1DeviceClass.model_validate(body)
        out.append(ApiClient().sanitize_for_serialization(model))  # type: ignore[no-untyped-call]
    return out


def selectors_of(device_class: dict[str, Any]) -> list[str]:
    """The CEL expressions of a DeviceClass object."""
    spec = device_class.get("spec") or {}
    return [s["cel"]["expression"] for s in spec.get("selectors") or [] if s.get("cel")]
