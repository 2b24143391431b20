"""The shipped traits catalog and its lookup by vendor and product name."""

from __future__ import annotations

import re
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import yaml

from hami_devices.errors import InvalidRequest
from hami_devices.models import DeviceTraits


@lru_cache(maxsize=4096)
def normalize_model_name(name: str) -> str:
    """Case, spaces, dashes and vendor prefixes do not distinguish models."""
    text = name.lower()
    text = re.sub(r"^(nvidia|tesla|huawei|ascend|cambricon)\s*", "", text)
    return re.sub(r"[\s_\-]", "", text)


@cache
def _catalog() -> dict[str, dict[str, DeviceTraits]]:
    raw: dict[str, dict[str, dict[str, Any]]] = yaml.safe_load(
        resources.files("hami_devices.traits").joinpath("catalog.yaml").read_text()
    )
    catalog: dict[str, dict[str, DeviceTraits]] = {}
    for vendor, models in raw.items():
        catalog[vendor] = {
            model: DeviceTraits(vendor=vendor, model=model, **fields) for model, fields in models.items()
        }
    return catalog


@cache
def _index() -> dict[tuple[str, str], DeviceTraits]:
    index: dict[tuple[str, str], DeviceTraits] = {}
    for vendor, models in _catalog().items():
        for model, traits in models.items():
            for name in (model, *traits.aliases):
                index[(vendor, normalize_model_name(name))] = traits
    return index


def vendors() -> list[str]:
    return sorted(_catalog())


def models(vendor: str) -> list[DeviceTraits]:
    return list(_catalog().get(vendor, {}).values())


def all_traits() -> list[DeviceTraits]:
    return [t for v in _catalog().values() for t in v.values()]


def find(vendor: str, model: str) -> DeviceTraits | None:
    """The catalog entry for a model name as a vendor library reports it, or None."""
    return _index().get((vendor, normalize_model_name(model)))


def lookup(vendor: str, model: str) -> DeviceTraits:
    traits = find(vendor, model)
    if traits is None:
        known = ", ".join(t.model for t in models(vendor)) or "none"
        raise InvalidRequest("model", f"unknown {vendor} model {model!r} (known: {known})")
    return traits
