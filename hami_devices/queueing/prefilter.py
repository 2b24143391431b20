"""Which nodes could host a request if some tasks left: a pruning step over arrays, never a decision.

The victim search asks the engine (``try_place`` on the cluster with the victims
forgotten) whether a set of victims makes room.  That costs a placement per
trial, so it first rules out nodes where even evicting every candidate would not
free enough, and orders the rest by how little they miss.  "Enough" is the rule
table's: each limited rule (memory, cores, sharer slots, exclusive holders, host
CPU and memory) is short by no more than the victims give back, and the
unlimited ones (the part's selectors, health) pass as they are.  A part with a
partition profile, or a device whose rule is not plain, is never pruned here:
only its rounding can say (the engine asks it during the trial).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from hami_devices.models import RequestPart, ResourceRequest
from hami_devices.rules import (
    FIT_RULES,
    NODE_RULES,
    STATE_RULES,
    Demand,
    HostDemand,
    fits_after,
    passing,
    shortfall,
)
from hami_devices.rules.columns import BoolArray, FloatArray, IntArray
from hami_devices.scheduling.cluster import ClusterState

_LIMITED = tuple(r for r in (*STATE_RULES, *FIT_RULES) if r.limit is not None)
_UNLIMITED_STATE = tuple(r for r in STATE_RULES if r.limit is None)
_NODE_LIMITED = tuple(r for r in NODE_RULES if r.limit is not None)
_NODE_UNLIMITED = tuple(r for r in NODE_RULES if r.limit is None)  # selectors, taints, cordons


def _judged(cluster: ClusterState, part: RequestPart) -> BoolArray:
    """Rows [0, size) whose rule gives the part the plain share: the only ones these arrays can judge."""
    size = cluster.size
    if part.partition is not None:
        return np.zeros(size, dtype=bool)
    return cluster.plain[:size]


def part_rows(
    cluster: ClusterState, part: RequestPart, back: Mapping[str, IntArray] | None = None
) -> tuple[BoolArray, FloatArray]:
    """Rows that could take one device of ``part`` if ``back`` (per resource, per row) were released, and what
    each misses now (the shortfall as fractions of the device; 0 where the part fits now)."""
    c = cluster
    size = c.size
    view = c.view()
    base = c.alive[:size] & c.match_ok(part) & c.node_ok[c.node[:size]]
    passing(_UNLIMITED_STATE, view, None, out=base)
    demand = Demand.plain(part, c.memory_need(part), c.context_mib[:size])
    fits = fits_after(_LIMITED, view, demand, back or {})
    judged = _judged(c, part)
    ok = base & (fits | ~judged)
    scale = {"memory": np.maximum(c.mem_cap[:size], 1), "cores": np.maximum(c.core_cap[:size], 1)}
    miss = np.zeros(size)
    for resource, short in shortfall(_LIMITED, view, demand).values():
        short = np.maximum(short, 0)
        miss += short / scale[resource] if resource in scale else np.minimum(short, 1)
    return ok, np.where(judged, miss, 0.0)


def host_ok(cluster: ClusterState, request: ResourceRequest, back: Mapping[str, IntArray] | None = None) -> BoolArray:
    """Per node row: could the node host ``request`` if ``back`` (host CPU and memory per node) were released?"""
    view = cluster.node_view()
    host = HostDemand.of(request)
    ok = passing(_NODE_UNLIMITED, view, host)
    ok &= fits_after(_NODE_LIMITED, view, host, back or {})
    return ok


def promising_nodes(
    cluster: ClusterState,
    request: ResourceRequest,
    rows: IntArray,
    rows_mem: IntArray,
    rows_cores: IntArray,
    rows_exclusive: BoolArray,
    host_nodes: IntArray,
    host_cpu: IntArray,
    host_mem: IntArray,
    victim_nodes: Sequence[int],
) -> list[int]:
    """Node rows among ``victim_nodes`` that could host ``request`` if every candidate grant were released,
    best first (least missing now).

    ``rows*``: the candidates' grants (device row, MiB, cores, exclusive); ``host_*``: their host charges by node row.
    """
    c = cluster
    size = c.size
    n = len(c.node_names)
    back = {
        "memory": np.bincount(rows, weights=rows_mem, minlength=size).astype(np.int64)[:size],
        "cores": np.bincount(rows, weights=rows_cores, minlength=size).astype(np.int64)[:size],
        "sharers": np.bincount(rows, minlength=size).astype(np.int64)[:size],
        "exclusive": np.bincount(rows, weights=rows_exclusive.astype(np.float64), minlength=size)[:size].astype(
            np.int64
        ),
    }
    host_back = {
        "host_cpu_milli": np.bincount(host_nodes, weights=host_cpu, minlength=n).astype(np.int64)[:n],
        "host_memory_mib": np.bincount(host_nodes, weights=host_mem, minlength=n).astype(np.int64)[:n],
    }
    node_ok = host_ok(c, request, host_back)
    miss = np.zeros(n)
    totals = {"host_cpu_milli": c.node_cpu_total, "host_memory_mib": c.node_mem_total}
    for resource, short in shortfall(_NODE_LIMITED, c.node_view(), HostDemand.of(request)).values():
        miss += np.maximum(short, 0) / np.maximum(totals[resource], 1)
    candidates = np.zeros(n, dtype=bool)
    candidates[list(victim_nodes)] = True
    if request.parts:
        any_part = np.zeros(n, dtype=bool)
        all_parts = np.ones(n, dtype=bool)
        for part in request.parts:
            ok, part_miss = part_rows(c, part, back)
            count = np.bincount(c.node[:size][ok], minlength=n)[:n]
            enough = count >= part.count
            any_part |= enough
            all_parts &= enough
            best = np.full(n, np.inf)
            np.minimum.at(best, c.node[:size][ok], part_miss[ok])
            miss += np.where(np.isfinite(best), best, 0.0) * part.count
        node_ok &= all_parts if request.same_node else any_part
    chosen = np.flatnonzero(candidates & node_ok)
    rank = c.name_rank()
    order = np.lexsort((rank[chosen], miss[chosen]))
    return [int(x) for x in chosen[order]]


def _may_take(cluster: ClusterState, part: RequestPart, rows: IntArray) -> BoolArray:
    """Of ``rows``: could each take ``part`` as the arrays stand (rows not plain pass: only rounding can say)."""
    c = cluster
    view = c.view(rows)
    ok = c.match_ok(part)[rows] & c.ready[rows]
    judged = _judged(c, part)[rows]
    fit = passing(FIT_RULES, view, Demand.plain(part, c.memory_need(part)[rows], c.context_mib[rows]))
    return ok & (fit | ~judged)


def fits_now(cluster: ClusterState, request: ResourceRequest, node: int) -> bool:
    """Could ``request`` fit on node row ``node`` as the arrays stand (a necessary condition; the engine decides)."""
    c = cluster
    if not host_ok(c, request)[node]:
        return False
    if not request.same_node:
        return True
    rows = np.array(c.nodes[c.node_name(node)].devices, dtype=np.int64)
    return rows.size > 0 and all(int(_may_take(c, part, rows).sum()) >= part.count for part in request.parts)


def fits_any(cluster: ClusterState, request: ResourceRequest, nodes: IntArray) -> bool:
    """Could ``request`` fit on any of node rows ``nodes`` as the arrays stand (a necessary condition).

    Used to skip asking the engine again for a request that did not fit, when the
    only capacity freed since is on ``nodes``.
    """
    c = cluster
    if nodes.size == 0:
        return False
    if not request.same_node and len(request.parts) > 1:
        return True
    nodes = nodes[host_ok(c, request)[nodes]]
    if nodes.size == 0 or not request.parts:
        return bool(nodes.size)
    size = c.size
    on = np.zeros(len(c.node_names), dtype=bool)
    on[nodes] = True
    rows = np.flatnonzero(on[c.node[:size]] & c.ready[:size])
    if rows.size == 0:
        return False
    ok_nodes = np.ones(nodes.size, dtype=bool)
    for part in request.parts:
        count = np.bincount(c.node[rows][_may_take(c, part, rows)], minlength=len(c.node_names))
        ok_nodes &= count[nodes] >= part.count
    return bool(ok_nodes.any())
