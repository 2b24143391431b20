"""The shipped traits catalog and its lookup by vendor and product name."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
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


def nearest_names(name: str, known: Iterable[str], limit: int = 3) -> list[str]:
    """The names of ``known`` nearest to ``name``, for "did you mean" in refusals and validation errors.

    Names that start with ``name`` (as model names compare: case, dashes and vendor prefixes
    aside) come first, as ``A100`` does for ``A100-80GB``; then the closest spellings (difflib).
    """
    by_key: dict[str, str] = {}
    for candidate in known:
        by_key.setdefault(normalize_model_name(candidate), candidate)
    wanted = normalize_model_name(name)
    prefixed = sorted(k for k in by_key if k.startswith(wanted) and k != wanted)
    close = difflib.get_close_matches(wanted, list(by_key), n=limit + len(prefixed), cutoff=0.6)
    keys = list(dict.fromkeys([*prefixed, *close]))[:limit]
    return [by_key[k] for k in keys]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``" (did you mean A100-80GB, A100-40GB?)"``, or "" when nothing is near."""
    near = nearest_names(name, known)
    return f" (did you mean {', '.join(near)}?)" if near else ""


def catalog_model_names() -> list[str]:
    """Every model the shipped catalog knows, by its catalog name."""
    return [t.model for t in all_traits()]


def lookup(vendor: str, model: str) -> DeviceTraits:
    traits = find(vendor, model)
    if traits is None:
        known = ", ".join(t.model for t in models(vendor)) or "none"
        hint = did_you_mean(model, [t.model for t in models(vendor)])
        raise InvalidRequest("model", f"unknown {vendor} model {model!r}{hint} (known: {known})")
    return traits
