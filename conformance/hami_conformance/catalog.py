"""The check catalog (catalog.yaml): ids, MUST/SHOULD, capabilities, requirements and certification levels."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hami_conformance.profile import Profile
from hami_devices.adapter import Capability

PROFILE_HOOKS = tuple(f.name for f in dataclasses.fields(Profile))


class Level(StrEnum):
    MUST = "MUST"
    SHOULD = "SHOULD"


@dataclass(frozen=True)
class CheckSpec:
    id: str
    level: Level
    requirement: str
    capability: Capability | None = None
    catches: str = ""
    """The class of adapter bug the check exists for (CHECKS.md prints it)."""
    needs: str | None = None
    """The Profile hook the check runs through (e.g. ``faults``): without it the check is N/A with the
    reason, and that N/A holds back no level - the suite cannot make the event without the adapter's
    library; a run that has the hook must pass it."""

    @property
    def group(self) -> str:
        return self.id.split(".", 1)[0]


@dataclass(frozen=True)
class LevelSpec:
    """A certification level: the MUST checks of some capabilities, earned together."""

    name: str
    requirement: str
    capability: Capability | None = None
    """Declaring this capability claims the level; None: every adapter claims it (core)."""
    capabilities: frozenset[Capability] = frozenset()
    """Checks with one of these capabilities belong to this level."""


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
        unknown = set(entry) - {"id", "level", "requirement", "capability", "catches", "needs"}
        if unknown:
            raise ValueError(f"catalog {where}: unknown keys {sorted(unknown)}")
        needs = entry.get("needs")
        if needs is not None and needs not in PROFILE_HOOKS:
            raise ValueError(f"catalog {where}: needs {needs!r} is not a Profile field ({', '.join(PROFILE_HOOKS)})")
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
                catches=" ".join(str(entry.get("catches", "")).split()),
                needs=needs,
            )
        )
    return specs


def parse_levels(data: Any) -> list[LevelSpec]:
    if not isinstance(data, dict) or not isinstance(data.get("levels"), list):
        raise ValueError("catalog: expected a 'levels' list")
    levels: list[LevelSpec] = []
    owned: set[Capability] = set()
    for n, entry in enumerate(data["levels"]):
        where = f"levels[{n}]"
        if not isinstance(entry, dict) or not entry.get("name"):
            raise ValueError(f"catalog {where}: expected a mapping with a name")
        unknown = set(entry) - {"name", "requirement", "capability", "capabilities"}
        if unknown:
            raise ValueError(f"catalog {where}: unknown keys {sorted(unknown)}")
        capability = Capability(entry["capability"]) if entry.get("capability") else None
        capabilities = frozenset(Capability(c) for c in entry.get("capabilities", []))
        if capability is not None and capability not in capabilities:
            raise ValueError(f"catalog {where}: capability {capability} must be one of its capabilities")
        if owned & capabilities:
            raise ValueError(f"catalog {where}: capabilities {sorted(owned & capabilities)} belong to two levels")
        owned |= capabilities
        levels.append(
            LevelSpec(str(entry["name"]), " ".join(str(entry["requirement"]).split()), capability, capabilities)
        )
    if sum(level.capability is None for level in levels) != 1:
        raise ValueError("catalog: exactly one level (the core) is claimed without a capability")
    return levels


@cache
def _data() -> Any:
    return yaml.safe_load(catalog_path().read_text())


@cache
def load_catalog() -> tuple[CheckSpec, ...]:
    return tuple(parse_catalog(_data()))


@cache
def load_levels() -> tuple[LevelSpec, ...]:
    return tuple(parse_levels(_data()))


def level_of(spec: CheckSpec) -> LevelSpec:
    """The level a check counts towards: its capability's, else the core."""
    levels = load_levels()
    for level in levels:
        if spec.capability is not None and spec.capability in level.capabilities:
            return level
    return next(level for level in levels if level.capability is None)


def by_id() -> dict[str, CheckSpec]:
    return {spec.id: spec for spec in load_catalog()}
