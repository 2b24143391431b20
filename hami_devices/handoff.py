"""The hand-off to the node: an allocation committed by a scheduler on its own host, made real where it runs.

A scheduler's engine (``hd.build_engine(..., ledger=...)``) commits allocations that carry no path of
its host: visible devices and precision plans only.  On the node that runs the workload, ``prepare``
reads the allocation from the shared ledger, creates its limiter regions in that node's region folder
and returns the environment with that node's paths (the region, the limiter shim to preload); the same
code a commit runs (``isolation.realise_group``), as a kubelet plugin prepares a claim.  ``unprepare``
removes them when the workload is over, whether or not the ledger still holds the allocation, and refuses
while a workload process still uses them (unless forced).  Both are safe to run twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hami_devices.config import HamiConfig
from hami_devices.errors import AllocationInUse, DeviceUnavailable, InvalidRequest
from hami_devices.inputs import as_config
from hami_devices.isolation import live_processes, realise_group, region_name, region_path
from hami_devices.ledger import Ledger
from hami_devices.models import DeviceHandle, group_key
from hami_devices.node_identity import node_name
from hami_devices.registry import VendorRegistry, load_vendors

__all__ = ["prepare", "unprepare"]


def prepare(
    handle_id: str,
    ledger: Ledger,
    *,
    node: str | None = None,
    config: HamiConfig | Mapping[str, Any] | str | Path | None = None,
    registry: VendorRegistry | None = None,
) -> dict[str, dict[str, str]]:
    """Make allocation ``handle_id`` real on ``node`` (default: this node, ``node_identity``): its limiter
    regions in this node's region folder; returns 'node/vendor' -> the environment of that group's processes.

    ``UnknownAllocation`` when the ledger does not hold it; ``InvalidRequest`` (field ``node``) when it has
    no grant on the node.  A host-only allocation (no grants) has nothing to prepare: ``{}``.
    """
    settings = as_config(config)
    with ledger.reading() as view:
        handle = view.get(handle_id)
    here = node_name(node, settings)
    groups = [(n, v) for n, v in handle.groups if n == here]
    if handle.grants and not groups:
        nodes = sorted({n for n, _ in handle.groups})
        raise InvalidRequest("node", f"allocation {handle_id} has no grant on node {here!r}; it runs on {nodes}")
    registry = registry or load_vendors(config=settings)
    environments: dict[str, dict[str, str]] = {}
    for n, vendor in groups:
        adapter = registry.adapters.get(vendor)
        if adapter is None:
            failure = registry.failures.get(vendor)
            raise DeviceUnavailable(f"allocation {handle_id} has {vendor} grants on {n}: "
                                    f"{failure.error if failure else 'no adapter is registered for it'}")
        grants = [g for g in handle.grants if (g.node, g.vendor) == (n, vendor)]
        virtual = [handle.request.parts[g.part].virtual_memory for g in grants]
        _, env = realise_group(adapter, handle.id, n, grants, virtual, keep_existing=True)
        key = group_key(n, vendor)
        environments[key] = {**handle.environments.get(key, {}), **env}  # the plan variables it carries stay
    return environments


def unprepare(
    handle_id: str,
    *,
    node: str | None = None,
    config: HamiConfig | Mapping[str, Any] | str | Path | None = None,
    registry: VendorRegistry | None = None,
    force: bool = False,
) -> list[str]:
    """Remove allocation ``handle_id``'s limiter regions from this node's region folder; the paths removed
    (none when there were none: unpreparing twice is not an error).  The ledger is not read: the scheduler
    may have released the allocation already.

    ``AllocationInUse`` (naming the pids) while a workload process still uses one, unless ``force``.
    """
    settings = as_config(config)
    here = node_name(node, settings)
    registry = registry or load_vendors(config=settings)
    stem = region_name(handle_id, here)
    found = {group_key(here, v): region_path(a, stem) for v, a in registry.adapters.items()}
    found = {k: p for k, p in found.items() if p.exists()}
    if not found:
        return []
    # a handle naming only the regions, so that the one reader of process slots says who still uses them
    users = live_processes(DeviceHandle.model_construct(id=handle_id, regions={k: str(p) for k, p in found.items()}))
    if users and not force:
        raise AllocationInUse(handle_id, users)
    for path in found.values():
        path.unlink(missing_ok=True)
    return sorted(str(p) for p in found.values())
