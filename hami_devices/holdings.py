"""What the live processes of an allocation still hold on each device, read from its limiter regions.

A forced release revokes an allocation's regions: its processes can allocate no
more, but what they hold stays theirs until they exit.  The ledger keeps that
memory booked (``releasing``), so these figures are read once, at revocation,
per device of each region (device slot ``i`` of a region is the ``i``-th grant
of its node and vendor, as the region was created).
"""

from __future__ import annotations

import logging

from hami_devices import limiter
from hami_devices.errors import LimiterError
from hami_devices.models import DeviceHandle

log = logging.getLogger(__name__)

MIB = 1024 * 1024


def held_mib(handle: DeviceHandle, regions: list[str]) -> dict[str, int]:
    """Device uuid -> MiB (rounded up) that live processes hold through the given ``regions`` of ``handle``."""
    held: dict[str, int] = {}
    for (node, vendor), path in _groups(handle, regions):
        grants = [g for g in handle.grants if g.node == node and g.vendor == vendor]
        try:
            with limiter.Region.open(path) as region:
                region.reclaim_dead()
                records = region.process_usage()
        except (LimiterError, OSError) as exc:
            log.warning("region %s of allocation %s cannot say what its processes hold: %s", path, handle.id, exc)
            continue
        for slot, grant in enumerate(grants):
            used = sum(r.memory_used_bytes for r in records if r.alive and r.device == slot)
            held[grant.uuid] = held.get(grant.uuid, 0) + -(-used // MIB)
    return held


def _groups(handle: DeviceHandle, regions: list[str]) -> list[tuple[tuple[str, str], str]]:
    wanted = set(regions)
    found = []
    for key, path in handle.regions.items():
        if path in wanted:
            node, _, vendor = key.rpartition("/")
            found.append(((node, vendor), path))
    return found
