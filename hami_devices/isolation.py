"""Glue between allocations and the native limiter: regions and their variables.

One shared region per (allocation, vendor): each vendor's shim numbers its
devices by position in that vendor's visible-devices list, so two vendors in
one allocation must not share device slots.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hami_devices import limiter
from hami_devices.errors import LimiterError
from hami_devices.models import CorePolicy, DeviceHandle, Grant, RequestPart
from hami_devices.sizing.reference import remove_plans

if TYPE_CHECKING:
    from hami_devices.adapter import VendorAdapter

MIB = 1024 * 1024
REVOKED_MEMORY_LIMIT_BYTES = 1
"""The memory limit of a revoked region: any device allocation is over it, whatever is already held (0 would
mean no limit).  Grants are whole MiB, so no granted limit is ever this; shims read limits on every call."""
log = logging.getLogger(__name__)


def limits_enforced(adapter: VendorAdapter) -> bool:
    return adapter.limiter_shim is not None and adapter.config.device_plugin.isolation_level != "none"


def core_policy(adapter: VendorAdapter, part: RequestPart) -> CorePolicy:
    """The policy a grant serving ``part`` gets: the part's own, else the device plugin's (``cap`` by default)."""
    return part.core_policy or adapter.config.device_plugin.core_policy


def with_core_policy(adapter: VendorAdapter, part: RequestPart, grant: Grant) -> Grant:
    return grant.model_copy(update={"core_policy": core_policy(adapter, part)})


def core_limit(adapter: VendorAdapter, grant: Grant) -> int:
    """0 means no compute limit: soft isolation, exclusive grants, hardware partitions and the ``unlimited``
    policy are not throttled.

    A partition (MIG instance, vNPU) is already isolated by the hardware; throttling
    it again to its share of the whole device would take compute away twice.
    """
    if adapter.config.device_plugin.isolation_level != "hard" or grant.cores >= 100 or grant.partition:
        return 0
    return 0 if grant.core_policy == "unlimited" else grant.cores


def region_core_policy(grant: Grant) -> str:
    """The limiter's policy for a grant (``unlimited`` has no limit for a policy to apply to: the default)."""
    return "share" if grant.core_policy == "share" else "cap"


def virtual_memory(adapter: VendorAdapter, asked: bool) -> bool:
    """A grant is virtual when its request part asks, or when the device plugin overcommits memory: an
    overcommitted share may be granted more than the card has free, and host memory backs the rest."""
    return asked or adapter.config.device_plugin.memory_overcommit > 1.0


def region_path(adapter: VendorAdapter, stem: str) -> Path:
    """Where the region of ``stem`` (``region_name``) for ``adapter``'s vendor lives on this host."""
    return limiter.region_dir() / f"{stem}-{adapter.name}.region"


def create_region(
    adapter: VendorAdapter, handle_id: str, grants: Sequence[Grant], virtual: Sequence[bool] = ()
) -> Path:
    """``virtual``: per grant, whether its request part asked for virtual memory (default: none did)."""
    path = region_path(adapter, handle_id)
    host_cap = adapter.config.device_plugin.virtual_memory_host_limit_mib * MIB
    asked = list(virtual) + [False] * (len(grants) - len(virtual))
    limits = [
        limiter.DeviceLimit(
            g.memory_mib * MIB, core_limit(adapter, g), virtual_memory(adapter, a), host_cap, region_core_policy(g)
        )
        for g, a in zip(grants, asked, strict=True)
    ]
    limiter.Region.create(path, limits).close()
    return path


def region_name(handle_id: str, node: str) -> str:
    """The stem of an allocation's region on ``node`` (``create_region`` adds the vendor): the same on every host,
    so the node that prepares an allocation (``handoff``) and the one that committed it name it alike."""
    return f"{handle_id}-{re.sub(r'[^A-Za-z0-9_.-]', '_', node)}"  # node names become part of a file name


def realise_group(
    adapter: VendorAdapter,
    handle_id: str,
    node: str,
    grants: Sequence[Grant],
    virtual: Sequence[bool],
    *,
    keep_existing: bool = False,
) -> tuple[str | None, dict[str, str]]:
    """One (node, vendor) group made real on this host: its limiter region (when limits are enforced) and the
    environment of its processes, with this host's paths.  A commit does it on the committing host; ``prepare``
    on the node that runs the workload.  ``keep_existing``: a region already there is used as it is (a
    prepare retried, or on the host that committed): its processes keep their counters."""
    if not limits_enforced(adapter):
        return None, adapter.environment(list(grants), None)
    stem = region_name(handle_id, node)
    path = region_path(adapter, stem)
    if not (keep_existing and path.exists()):
        path = create_region(adapter, stem, grants, virtual)
    return str(path), adapter.environment(list(grants), str(path))


def remove_regions(handle: DeviceHandle, keep: Collection[str] = ()) -> None:
    """The allocation's limiter regions (but those in ``keep``), and the precision plans written beside them."""
    for path in handle.regions.values():
        if path in keep:
            continue
        try:
            Path(path).unlink(missing_ok=True)
        except OSError as exc:  # the allocation is released all the same; `allocations gc` retries the file
            log.warning("cannot remove region %s of allocation %s: %s", path, handle.id, exc.strerror)
    remove_plans(handle.environments)


def process_name(pid: int, host_pid: int) -> str:
    """A pid as this machine's /proc gives it, with the container's own pid where they differ."""
    return f"{host_pid} (pid {pid} in its namespace)" if host_pid and host_pid != pid else str(pid)


def by_pid(names: set[str]) -> list[str]:
    return sorted(names, key=lambda name: (len(name), name))


def live_processes(handle: DeviceHandle) -> list[str]:
    """The workload processes registered alive in the allocation's regions (a region that cannot be read
    cannot say, and names none)."""
    found: dict[tuple[int, int, int], str] = {}
    for path in sorted(handle.regions.values()):
        try:
            with limiter.Region.open(path) as region:
                region.reclaim_dead()
                records = region.process_usage()
        except (LimiterError, OSError) as exc:
            log.info("region %s of allocation %s cannot say who uses it: %s", path, handle.id, exc)
            continue
        for record in records:
            if record.alive:
                found[(record.pid_namespace, record.pid, record.start_time)] = process_name(record.pid, record.host_pid)
    return by_pid(set(found.values()))


def revoke_regions(handle: DeviceHandle) -> list[str]:
    """Refuse every further device allocation in the allocation's regions, on every device (what the processes
    hold stays theirs; compute limits are kept); the paths revoked."""
    revoked = []
    for path in sorted(handle.regions.values()):
        try:
            with limiter.Region.open(path) as region:
                for record in region.device_usage():
                    revoked_limit = limiter.DeviceLimit(
                        REVOKED_MEMORY_LIMIT_BYTES, record.core_limit_pct, core_policy=record.core_policy
                    )
                    region.set_limit(record.device, revoked_limit)
        except (LimiterError, OSError) as exc:
            log.warning("cannot revoke region %s of allocation %s: %s", path, handle.id, exc)
            continue
        revoked.append(path)
    return revoked


def limiter_environment(adapter: VendorAdapter, grants: Sequence[Grant], region_path: str | None) -> dict[str, str]:
    """HAMI_* limits for every vendor, the adapter's own names, and the preload.

    ``HAMI_DEVICE_CORE_POLICY_<i>`` comes with a core limit only: with none there is nothing to keep.
    """
    if region_path is None or not limits_enforced(adapter):
        return {}
    assert adapter.limiter_shim is not None
    env = {
        "HAMI_REGION_PATH": region_path,
        "LD_PRELOAD": str(limiter.shim_library(adapter.limiter_shim)),
    }
    for position, grant in enumerate(grants):
        env[f"HAMI_DEVICE_MEMORY_LIMIT_{position}"] = f"{grant.memory_mib}m"
        cores = core_limit(adapter, grant)
        env[f"HAMI_DEVICE_CORE_LIMIT_{position}"] = str(cores)
        if cores:
            env[f"HAMI_DEVICE_CORE_POLICY_{position}"] = region_core_policy(grant)
        env.update(adapter.limiter_variables(position, grant))
    return env
