"""Why a request was refused, in a form a program can act on.

The engine's per-node and per-device reason codes are the detail; this adds
the two judgements a scheduler needs to decide between waiting and failing:
whether the request could fit this cluster at all once everything is
released (``permanent``), and which nodes came nearest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hami_devices.accounting import DeviceUsage, planned_grant
from hami_devices.errors import InsufficientResources, ReasonCode
from hami_devices.models import Grant, Health, RequestPart, ResourceRequest

if TYPE_CHECKING:
    from hami_devices.scheduling.cluster import BoolArray, ClusterState, IntArray
    from hami_devices.scheduling.engine import Engine

NEAREST = 3


def explain_refusal(
    engine: Engine, request: ResourceRequest, reasons: dict[str, list[ReasonCode]]
) -> InsufficientResources:
    cluster = engine.cluster
    label = request.name or "request"
    if any(k.startswith("parts.") for k in reasons):
        return InsufficientResources(f"no placement for {label}", reasons, permanent=True)
    fits_empty = [_fits_empty(engine, part, i) for i, part in enumerate(request.parts)]
    permanent = not _could_fit(cluster, request, fits_empty)
    return InsufficientResources(
        f"no placement for {label}", reasons, permanent=permanent, nearest=_nearest(engine, request, reasons)
    )


def _fits_empty(engine: Engine, part: RequestPart, index: int) -> BoolArray:
    """Rows [0, size) that could take the part if nothing were allocated and every device were healthy."""
    c = engine.cluster
    size = c.size
    ok = c.alive[:size] & engine._static_ok(part)  # health is not static: a device may recover
    empty = DeviceUsage()
    for row in np.flatnonzero(ok).tolist():
        info = c.info(row)
        if not info.healthy:
            info = info.model_copy(update={"health": Health.HEALTHY})
        ok[row] = isinstance(planned_grant(info, c.rule_of(row), part, index, empty), Grant)
    return ok


def _could_fit(cluster: ClusterState, request: ResourceRequest, fits: list[BoolArray]) -> bool:
    """Whether some node (or, for a split request, some node per part) could hold the request when empty.

    Topology is not judged, so ``False`` from here is certain and ``True`` is a
    necessary condition only.
    """
    size = cluster.size
    host = (cluster.node_cpu_total >= request.host_cpu_milli) & (cluster.node_mem_total >= request.host_memory_mib)
    n = len(cluster.node_names)
    if not request.parts:
        return bool(host.any())
    counts = [np.bincount(cluster.node[:size][f], minlength=n) for f in fits]
    if request.same_node:
        union = np.bincount(cluster.node[:size][np.logical_or.reduce(fits)], minlength=n)
        ok = host.copy()
        for part, count in zip(request.parts, counts, strict=True):
            ok &= count >= part.count
        ok &= union >= request.device_count
        return bool(ok.any())
    return all(bool((host & (count >= part.count)).any()) for part, count in zip(request.parts, counts, strict=True))


def _nearest(engine: Engine, request: ResourceRequest, reasons: dict[str, list[ReasonCode]]) -> list[str]:
    """Nodes that came closest: the largest share of the request's devices free there now, then fewest reasons."""
    c = engine.cluster
    n = len(c.node_names)
    if not request.parts:
        rows: IntArray = np.flatnonzero(c.node_ok)
        slack = np.minimum(
            c.node_cpu_free[rows] - request.host_cpu_milli, c.node_mem_free[rows] - request.host_memory_mib
        )
        order = rows[np.argsort(-slack, kind="stable")]
        return [c.node_name(int(r)) for r in order[:NEAREST]]
    have = np.zeros(n)
    for i, part in enumerate(request.parts):
        ev = engine._filter(part, i, request)
        have += np.minimum(np.bincount(ev.nodes, minlength=n), part.count)
    share = have / max(request.device_count, 1)
    candidates = [r for r in range(n) if c.node_names[r] and share[r] > 0]
    candidates.sort(key=lambda r: (-share[r], len(reasons.get(c.node_names[r], [])), c.node_names[r]))
    return [f"{c.node_names[r]} ({int(have[r])}/{request.device_count} devices)" for r in candidates[:NEAREST]]
