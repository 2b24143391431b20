"""Explain: why a request does not fit, per node and device, and whether it ever could.

The reason codes come from the rule table (the first rule each device fails,
every node rule each node fails); this adds the two judgements a scheduler
needs to decide between waiting and failing: whether the request could fit
this cluster at all once everything is released (``permanent``), and which
nodes came nearest.
"""

from __future__ import annotations

import numpy as np

from hami_devices.errors import InsufficientResources, ReasonCode
from hami_devices.models import ResourceRequest
from hami_devices.rules import NODE_RULES, HostDemand
from hami_devices.rules.columns import AsIfEmpty, BoolArray, ColumnView, IntArray
from hami_devices.scheduling.choosing import Chooser
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.scoring import ScoredPart

NEAREST = 3


def unknown_names(cluster: ClusterState, request: ResourceRequest) -> dict[str, list[ReasonCode]]:
    """Parts whose vendor or model list names nothing any device of the cluster answers to."""
    out: dict[str, list[ReasonCode]] = {}
    for i, part in enumerate(request.parts):
        if part.vendors and not any(cluster.knows_vendor(v) for v in part.vendors):
            out[f"parts.{i}.vendors"] = [ReasonCode.UNKNOWN_VENDOR]
        if part.models and not any(cluster.knows_model(m) for m in part.models):
            out[f"parts.{i}.models"] = [ReasonCode.UNKNOWN_MODEL]
    return out


def node_failures(
    cluster: ClusterState, request: ResourceRequest, rows: IntArray | slice | None = None, *, as_if_empty: bool = False
) -> list[tuple[ReasonCode, BoolArray]]:
    """Each node rule with the node rows (of ``rows``) that fail it for ``request`` (``as_if_empty``: with
    nothing allocated and every node schedulable, so what fails then never fits)."""
    view = cluster.node_view(rows)
    if as_if_empty:
        view = ColumnView(AsIfEmpty(cluster), view.at, cluster)
    host = HostDemand.of(request)
    out = []
    for rule in NODE_RULES:
        bad = rule.fails(view, host)
        if bad is not None:
            out.append((rule.code, bad))
    return out


def reasons(
    chooser: Chooser, evals: list[ScoredPart], host_ok: BoolArray, request: ResourceRequest
) -> dict[str, list[ReasonCode]]:
    """Reason codes per node, and per rejected device uuid, for a request that does not fit."""
    c = chooser.cluster
    out: dict[str, list[ReasonCode]] = unknown_names(c, request)
    if out:  # a name nothing in the cluster answers to: every device would just say "mismatch"
        return out
    failing = node_failures(c, request)
    for name, state in c.nodes.items():
        row = c.node_row(name)
        codes = [code for code, bad in failing if bad[row]]
        for ev in evals:
            if not host_ok[row]:  # its devices were no candidates: the host codes above say why
                continue
            have = int(np.count_nonzero(c.node[ev.rows] == row))
            if have < ev.part.count:
                codes.append(ReasonCode.NODE_INSUFFICIENT_DEVICES)
                for dev in state.devices:
                    code = ev.rejected.get(dev)
                    if code is not None and code not in codes:
                        codes.append(code)
            elif request.topology == "required" and ev.part.count > 1 and chooser.node_choice(ev, row, set()) is None:
                codes.append(ReasonCode.NODE_TOPOLOGY_UNSATISFIED)
        if codes:
            out[name] = list(dict.fromkeys(codes))
    for ev in evals:
        for dev, code in ev.rejected.items():
            info = c.infos[dev]
            if info is not None:
                out.setdefault(info.uuid, [])
                if code not in out[info.uuid]:
                    out[info.uuid].append(code)
    return out


def refusal(
    cluster: ClusterState, request: ResourceRequest, found: dict[str, list[ReasonCode]], have: list[IntArray]
) -> InsufficientResources:
    """The error for a request that does not fit now: ``found`` reasons, nearest misses, permanence.

    ``have``: per part, the candidate rows it has now (nearest misses are the nodes with most of them).
    """
    label = request.name or "request"
    if any(k.startswith("parts.") for k in found):
        return InsufficientResources(f"no placement for {label}", found, permanent=True)
    fits = [cluster.fits_empty(part, i) for i, part in enumerate(request.parts)]
    permanent = not could_fit(cluster, request, fits)
    return InsufficientResources(
        f"no placement for {label}", found, permanent=permanent, nearest=nearest(cluster, request, found, have)
    )


def could_fit(cluster: ClusterState, request: ResourceRequest, fits: list[BoolArray]) -> bool:
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


def nearest(
    cluster: ClusterState, request: ResourceRequest, found: dict[str, list[ReasonCode]], have: list[IntArray]
) -> list[str]:
    """Nodes that came closest: the largest share of the request's devices free there now, then fewest reasons."""
    c = cluster
    n = len(c.node_names)
    if not request.parts:
        rows: IntArray = np.flatnonzero(c.node_ok)
        slack = np.minimum(
            c.node_cpu_free[rows] - request.host_cpu_milli, c.node_mem_free[rows] - request.host_memory_mib
        )
        order = rows[np.argsort(-slack, kind="stable")]
        return [c.node_name(int(r)) for r in order[:NEAREST]]
    counts = np.zeros(n)
    for part, rows_now in zip(request.parts, have, strict=True):
        counts += np.minimum(np.bincount(c.node[rows_now], minlength=n), part.count)
    share = counts / max(request.device_count, 1)
    candidates = [r for r in range(n) if c.node_names[r] and share[r] > 0]
    candidates.sort(key=lambda r: (-share[r], len(found.get(c.node_names[r], [])), c.node_names[r]))
    return [f"{c.node_names[r]} ({int(counts[r])}/{request.device_count} devices)" for r in candidates[:NEAREST]]
