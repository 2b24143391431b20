"""sMLU profiles: an MLU quota in percent plus memory in 256 MiB units.

sMLU instances are carved dynamically, so any (quota, memory) pair is a valid
profile; the catalog lists the usual shapes (an eighth, a quarter and a half of
a device) so that schedulers and simulations have names to ask for.  A request
is rounded up to whole 256 MiB units.
"""

from __future__ import annotations

import re

from hami_devices.models import PartitionProfile

UNIT_MIB = 256
SHARES = (8, 4, 2)
"""The catalog's profiles: 1/8, 1/4 and 1/2 of a device."""
NAME = re.compile(r"^smlu(?:\.q(\d+))?\.m(\d+)$")
FULL_QUOTA = 100
SMLU_MODELS = ("MLU370-X4", "MLU370-X8", "MLU590")


def round_up(memory_mib: int) -> int:
    """Memory rounded up to whole sMLU units (3000 MiB -> 3072 MiB)."""
    return max(1, -(-memory_mib // UNIT_MIB)) * UNIT_MIB


def round_down(memory_mib: int) -> int:
    return (memory_mib // UNIT_MIB) * UNIT_MIB


def profile_name(quota: int | None, memory_mib: int) -> str:
    """``smlu.q<quota>.m<MiB>``; without a quota (``smlu.m<MiB>``) the instance's compute is not capped."""
    return f"smlu.m{memory_mib}" if quota is None else f"smlu.q{quota}.m{memory_mib}"


def parse_name(name: str) -> tuple[int, int] | None:
    """(sMLU quota percent, memory MiB) of a profile name made by ``profile_name``."""
    match = NAME.match(name)
    if match is None:
        return None
    return (int(match.group(1)) if match.group(1) else FULL_QUOTA, int(match.group(2)))


def profile(quota: int, memory_mib: int, device_memory_mib: int) -> PartitionProfile:
    return PartitionProfile(
        name=profile_name(quota, memory_mib),
        memory_mib=memory_mib,
        cores=quota,
        native={"mlu_quota": quota, "memory_units": memory_mib // UNIT_MIB},
        # as many as fit together, in memory and in compute quota (each instance holds its quota)
        max_instances=max(1, min(device_memory_mib // memory_mib, 100 // max(1, quota))),
    )


def catalog(model: str, device_memory_mib: int) -> list[PartitionProfile]:
    """The usual sMLU shapes of a model that supports sMLU (empty otherwise)."""
    if model not in SMLU_MODELS:
        return []
    out = []
    for share in SHARES:
        memory = round_down(device_memory_mib // share)
        if memory >= UNIT_MIB:
            out.append(profile(100 // share, memory, device_memory_mib))
    return out
