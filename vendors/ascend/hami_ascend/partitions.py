"""vNPU templates per Ascend chip, and rounding a request onto them.

A template fixes a vNPU's AICores (and AICPUs) and its memory.  A request is
rounded up to the smallest template that fits; a request larger than every
template (or asking for the whole chip) takes the whole chip.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hami_devices.models import PartitionProfile
from hami_devices.traits import normalize_model_name

GIB = 1024


@dataclass(frozen=True)
class Template:
    name: str
    aicore: int
    memory_mib: int
    aicpu: int | None = None


@dataclass(frozen=True)
class ChipSpec:
    """The vNPU facts of one chip model: its AICores and its templates."""

    model: str
    aicore: int
    templates: tuple[Template, ...]


def _b(name: str, aicore: int, gib: int) -> Template:
    aicpu = re.search(r"_(\d+)c_", name)
    return Template(name, aicore, gib * GIB, int(aicpu.group(1)) if aicpu else None)


CHIPS: dict[str, ChipSpec] = {
    "910A": ChipSpec(
        "910A",
        30,
        (
            Template("vir02", 2, 2184),
            Template("vir04", 4, 4369),
            Template("vir08", 8, 8738),
            Template("vir16", 16, 17476),
        ),
    ),
    "310P": ChipSpec(
        "310P",
        8,
        (Template("vir01", 1, 3072), Template("vir02", 2, 6144), Template("vir04", 4, 12288)),
    ),
    "910B2": ChipSpec("910B2", 24, (_b("vir03_1c_8g", 3, 8), _b("vir06_1c_16g", 6, 16), _b("vir12_3c_32g", 12, 32))),
    "910B3": ChipSpec("910B3", 20, (_b("vir05_1c_16g", 5, 16), _b("vir10_3c_32g", 10, 32))),
    "910B4": ChipSpec("910B4", 20, (_b("vir05_1c_8g", 5, 8), _b("vir10_3c_16g", 10, 16))),
}
_ALIASES = {"310P3": "310P", "910": "910A", "910PROA": "910A", "910B2C": "910B2"}


def chip_spec(model: str) -> ChipSpec | None:
    """The vNPU facts for a model name as DCMI or an inventory spells it (``Ascend310P3`` ...)."""
    key = normalize_model_name(model).upper()
    key = _ALIASES.get(key, key)
    return CHIPS.get(key)


def template_cores(template: Template, chip_aicore: int) -> int:
    """The template's compute share in percent (rounded down, at least 1)."""
    return max(1, min(100, template.aicore * 100 // chip_aicore))


def profiles(model: str, memory_mib: int | None = None, aicore: int | None = None) -> list[PartitionProfile]:
    """The model's templates as partition profiles; the chip's own memory and AICores when known."""
    spec = chip_spec(model)
    if spec is None:
        return []
    total_aicore = aicore or spec.aicore
    out: list[PartitionProfile] = []
    for t in spec.templates:
        by_core = total_aicore // t.aicore
        by_memory = memory_mib // t.memory_mib if memory_mib else by_core
        instances = min(by_core, by_memory)
        if instances < 1:
            continue
        native = {"aicore": t.aicore}
        if t.aicpu is not None:
            native["aicpu"] = t.aicpu
        out.append(
            PartitionProfile(
                name=t.name,
                memory_mib=t.memory_mib,
                cores=template_cores(t, total_aicore),
                native=native,
                max_instances=instances,
            )
        )
    return out


def aicores_of(names: Iterable[str], catalog: Sequence[PartitionProfile]) -> int:
    by_name = {p.name: p.native.get("aicore", 0) for p in catalog}
    return sum(by_name.get(n, 0) for n in names)


def smallest_fitting(
    catalog: Sequence[PartitionProfile],
    memory_mib: int,
    cores: int,
    free_aicore: int,
    free_memory_mib: int,
    name: str | None = None,
) -> PartitionProfile | None:
    """The smallest template holding ``memory_mib`` and ``cores`` that still fits the chip's free share."""
    fitting = [
        p
        for p in catalog
        if (name is None or p.name == name)
        and p.memory_mib >= memory_mib
        and p.cores >= cores
        and p.native.get("aicore", 0) <= free_aicore
        and p.memory_mib <= free_memory_mib
    ]
    return min(fitting, key=lambda p: (p.memory_mib, p.native.get("aicore", 0)), default=None)


def covers(catalog: Sequence[PartitionProfile], memory_mib: int, cores: int) -> bool:
    """Whether any template is big enough for the request (else it takes the whole chip)."""
    return any(p.memory_mib >= memory_mib and p.cores >= cores for p in catalog)
