"""The check catalog (catalog.yaml): ids, levels, capabilities and requirements."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hami_devices.adapter import Capability


class Level(StrEnum):
    MUST = "MUST"
    SHOULD = "SHOULD"


@dataclass(frozen=True)
class CheckSpec:
    id: str
    level: Level
    requirement: str
    capability: Capability | None = None

    @property
    def group(self) -> str:
        return self.id.split(".", 1)[0]


def catalog_path() -> Path:
    return Path(str(resources.files("hami_conformance").joinpath("catalog.yaml")))


def parse_catalog(data: Any) -> list[CheckSpec]:
    if not isinstance(data, dict) or not isinstance(data.get("checks"), list):
        raise ValueError("catalog: expected a mapping with a 'checks' list")
    specs: list[CheckSpec] = []
    seen: set[str] = set()
    for n, entry in enumerate(data["checks"]):
        where = f"checks[{n}]"
        if not isinstance(entry, dict):
            raise ValueError(f"catalog {where}: expected a mapping")
        unknown = set(entry) - {"id", "level", "requirement", "capability"}
        if unknown:
            raise ValueError(f"catalog {where}: unknown keys {sorted(unknown)}")
        check_id = str(entry.get("id", ""))
        if not check_id or check_id in seen:
            raise ValueError(f"catalog {where}: missing or duplicate id {check_id!r}")
        seen.add(check_id)
        capability = entry.get("capability")
        specs.append(
            CheckSpec(
                id=check_id,
                level=Level(entry["level"]),
                requirement=" ".join(str(entry["requirement"]).split()),
                capability=Capability(capability) if capability else None,
            )
        )
    return specs


@cache
def load_catalog() -> tuple[CheckSpec, ...]:
    return tuple(parse_catalog(yaml.safe_load(catalog_path().read_text())))


def by_id() -> dict[str, CheckSpec]:
    return {spec.id: spec for spec in load_catalog()}
