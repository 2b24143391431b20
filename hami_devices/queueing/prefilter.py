"""Which nodes could host a request if some tasks left: a pruning step over arrays, never a decision.

The victim search asks the engine (``try_place`` on the cluster with the victims
forgotten) whether a set of victims makes room.  That costs a placement per
trial, so it first rules out nodes where even evicting every candidate would not
free enough (memory, cores, sharer slots, exclusivity, host CPU and memory, and
the part's static constraints), and orders the rest by how little they miss.
A part with a partition profile, or a device whose rule is not plain, is never
pruned here: only its rule can say (the engine asks it during the trial).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from hami_devices.models import PRECISIONS, RequestPart, ResourceRequest
from hami_devices.scheduling.cluster import ClusterState

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_static_cache: dict[tuple[int, int, int, str], BoolArray] = {}


def static_rows(cluster: ClusterState, part: RequestPart) -> BoolArray:
    """Rows [0, size) whose static facts match ``part`` (vendor, model, uuid, precision, NUMA lists).

    The same matching as ``matching.static_reasons``; cached per cluster layout.
    """
    key = (id(cluster), cluster.layout_version, cluster.size, part.model_dump_json())
    hit = _static_cache.get(key)
    if hit is not None:
        return hit
    size = cluster.size
    ok = cluster.alive[:size].copy()
    if part.vendors:
        ok &= np.isin(cluster.vendor[:size], [cluster.vendor_id(v) for v in part.vendors])
    if part.exclude_vendors:
        ok &= ~np.isin(cluster.vendor[:size], [cluster.vendor_id(v) for v in part.exclude_vendors])
    if part.models:
        ok &= np.isin(cluster.model[:size], cluster.model_ids_matching(part.models))
    if part.exclude_models:
        ok &= ~np.isin(cluster.model[:size], cluster.model_ids_matching(part.exclude_models))
    if part.uuids:
        ok &= np.isin(np.arange(size), [cluster.uuid_index[u] for u in part.uuids if u in cluster.uuid_index])
    if part.exclude_uuids:
        ok &= ~np.isin(np.arange(size), [cluster.uuid_index[u] for u in part.exclude_uuids if u in cluster.uuid_index])
    if part.precision is not None:
        p = PRECISIONS.index(part.precision)
        ok &= ~(cluster.has_traits[:size] & (cluster.tflops[:size, p] <= 0))
    if part.numa_node is not None:
        ok &= cluster.numa[:size] == part.numa_node
    if len(_static_cache) > 4096:
        _static_cache.clear()
    _static_cache[key] = ok
    return ok


def _need_memory(part: RequestPart, mem_total: IntArray) -> IntArray:
    if part.memory_mib is not None:
        return np.full(mem_total.size, part.memory_mib, dtype=np.int64)
    if part.memory_percent is not None:
        return np.maximum(1, (mem_total * part.memory_percent / 100.0).astype(np.int64))
    return mem_total.copy()


def part_rows(
    cluster: ClusterState,
    part: RequestPart,
    *,
    mem_back: IntArray | None = None,
    cores_back: IntArray | None = None,
    sharers_back: IntArray | None = None,
    exclusive_back: BoolArray | None = None,
) -> tuple[BoolArray, FloatArray]:
    """Rows that could take one device of ``part`` if the ``*_back`` amounts were released, and what each misses now.

    The miss (0 where the part fits now) is the memory and core shortfall as fractions of the device.
    """
    c = cluster
    size = c.size
    zeros = np.zeros(size, dtype=np.int64)
    mem_back = zeros if mem_back is None else mem_back
    cores_back = zeros if cores_back is None else cores_back
    sharers_back = zeros if sharers_back is None else sharers_back
    exclusive_back = np.zeros(size, dtype=bool) if exclusive_back is None else exclusive_back
    base = static_rows(c, part) & c.healthy[:size] & c.node_ok[c.node[:size]]
    need = _need_memory(part, c.mem_total[:size])
    mem_short = np.maximum(need - c.mem_free[:size], 0)
    core_short = np.maximum(part.cores - (c.core_cap[:size] - c.cores_used[:size]), 0)
    sharers_after = c.sharers[:size] - sharers_back
    fits = (
        (mem_short <= mem_back)
        & (core_short <= cores_back)
        & (sharers_after + 1 <= c.split[:size])
        & (~c.exclusive[:size] | exclusive_back)
    )
    if part.exclusive:
        fits &= sharers_after == 0
    unknown = ~c.plain[:size] if part.partition is None else np.ones(size, dtype=bool)
    ok = base & (fits | unknown)
    miss = mem_short / np.maximum(c.mem_cap[:size], 1) + core_short / np.maximum(c.core_cap[:size], 1)
    miss = miss + (c.sharers[:size] >= c.split[:size]) + c.exclusive[:size] + (part.exclusive & (c.sharers[:size] > 0))
    return ok, np.where(unknown, 0.0, miss)


def host_ok(
    cluster: ClusterState, request: ResourceRequest, cpu_back: IntArray | None = None, mem_back: IntArray | None = None
) -> BoolArray:
    c = cluster
    n = len(c.node_names)
    cpu_back = np.zeros(n, dtype=np.int64) if cpu_back is None else cpu_back
    mem_back = np.zeros(n, dtype=np.int64) if mem_back is None else mem_back
    return (
        c.node_ok
        & (c.node_cpu_free + cpu_back >= request.host_cpu_milli)
        & (c.node_mem_free + mem_back >= request.host_memory_mib)
    )


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
    mem_back = np.bincount(rows, weights=rows_mem, minlength=size).astype(np.int64)[:size]
    cores_back = np.bincount(rows, weights=rows_cores, minlength=size).astype(np.int64)[:size]
    sharers_back = np.bincount(rows, minlength=size).astype(np.int64)[:size]
    excl_back = np.bincount(rows, weights=rows_exclusive.astype(np.float64), minlength=size)[:size] > 0
    n = len(c.node_names)
    cpu_back = np.bincount(host_nodes, weights=host_cpu, minlength=n).astype(np.int64)[:n]
    hmem_back = np.bincount(host_nodes, weights=host_mem, minlength=n).astype(np.int64)[:n]
    node_ok = host_ok(c, request, cpu_back, hmem_back)
    host_miss = np.maximum(request.host_cpu_milli - c.node_cpu_free, 0) / np.maximum(c.node_cpu_total, 1) + np.maximum(
        request.host_memory_mib - c.node_mem_free, 0
    ) / np.maximum(c.node_mem_total, 1)
    miss = host_miss.astype(np.float64)
    candidates = np.zeros(n, dtype=bool)
    candidates[list(victim_nodes)] = True
    if request.parts:
        any_part = np.zeros(n, dtype=bool)
        all_parts = np.ones(n, dtype=bool)
        for part in request.parts:
            ok, part_miss = part_rows(
                c, part, mem_back=mem_back, cores_back=cores_back, sharers_back=sharers_back, exclusive_back=excl_back
            )
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


def fits_now(cluster: ClusterState, request: ResourceRequest, node: int) -> bool:
    """Could ``request`` fit on node row ``node`` as the arrays stand (a necessary condition; the engine decides)."""
    c = cluster
    if not (
        c.node_ok[node]
        and c.node_cpu_free[node] >= request.host_cpu_milli
        and c.node_mem_free[node] >= request.host_memory_mib
    ):
        return False
    if not request.same_node:
        return True
    rows = np.array(c.nodes[c.node_name(node)].devices, dtype=np.int64)
    for part in request.parts:
        if rows.size == 0:
            return False
        ok = static_rows(c, part)[rows] & c.ready[rows]
        if part.partition is None:
            plain = c.plain[rows]
            need = _need_memory(part, c.mem_total[rows])
            cap_ok = (c.mem_free[rows] >= need) & (c.cores_used[rows] + part.cores <= c.core_cap[rows])
            if part.exclusive:
                cap_ok &= c.sharers[rows] == 0
            ok &= cap_ok | ~plain
        if int(ok.sum()) < part.count:
            return False
    return True


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
    host = (
        c.node_ok[nodes]
        & (c.node_cpu_free[nodes] >= request.host_cpu_milli)
        & (c.node_mem_free[nodes] >= request.host_memory_mib)
    )
    nodes = nodes[host]
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
        ok = static_rows(c, part)[rows]
        if part.partition is None:
            need = _need_memory(part, c.mem_total[rows])
            cap_ok = (c.mem_free[rows] >= need) & (c.cores_used[rows] + part.cores <= c.core_cap[rows])
            if part.exclusive:
                cap_ok &= c.sharers[rows] == 0
            ok &= cap_ok | ~c.plain[rows]
        count = np.bincount(c.node[rows][ok], minlength=len(c.node_names))
        ok_nodes &= count[nodes] >= part.count
    return bool(ok_nodes.any())
