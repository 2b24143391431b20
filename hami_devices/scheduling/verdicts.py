"""Per-node verdicts for one request: which nodes can take it now and how well, and why the others cannot.

A scheduler that chooses among nodes itself (a kube-scheduler extender, a Volcano or
Ray plugin) asks "for each of these nodes: does the request fit, with what score; if
not, which reason codes, and could it ever fit there?".  ``Engine.rank`` answers one
node at a time with a full ``Placement`` per node, and ``Engine.rejections`` walks
every node of the cluster in Python: both cost tens of milliseconds at 1,000 nodes.
This module answers the per-node question over the engine's arrays, with the same
filters, scorers and set choice as ``rank`` (the score of a node is the key ``rank``
orders that node's best placement by).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from hami_devices.accounting import DeviceUsage, planned_grant
from hami_devices.errors import InvalidRequest, ReasonCode
from hami_devices.models import Grant, Health, RequestPart, ResourceRequest
from hami_devices.scheduling.scorers.base import HostContext

if TYPE_CHECKING:
    from hami_devices.scheduling.cluster import BoolArray, FloatArray, IntArray
    from hami_devices.scheduling.engine import Engine, _Choice, _PartEval


@dataclass
class NodeVerdicts:
    """``feasible``: the nodes where the request fits now, and ``scores`` their score (0..100) when asked
    for.  ``reasons``: node -> reason codes where it does not fit; ``unresolvable``: those of them that
    could not hold it even with nothing allocated (static mismatches, too small, names nothing in the
    cluster answers to)."""

    feasible: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    reasons: dict[str, list[ReasonCode]] = field(default_factory=dict)
    unresolvable: set[str] = field(default_factory=set)


def judge_nodes(
    engine: Engine, request: ResourceRequest, nodes: Sequence[str] | None = None, *, scores: bool = True
) -> NodeVerdicts:
    """The verdict on every node of ``nodes`` (default: every node of the cluster) for a same-node request.

    ``scores=False`` skips scoring where feasibility alone is cheaper to decide: a
    single multi-device part without required topology fits wherever enough devices pass.
    """
    from hami_devices.scheduling.engine import DEVICE_CODES, unknown_names

    if not request.same_node and len(request.parts) > 1:
        raise InvalidRequest("same_node", "per-node verdicts need a request placed on one node")
    c = engine.cluster
    names = [n for n in c.node_names if n] if nodes is None else list(nodes)
    try:
        rows: IntArray = np.fromiter(map(c.node_row, names), dtype=np.int64, count=len(names))
    except KeyError as exc:
        raise InvalidRequest("nodes", f"unknown node {exc.args[0]!r}") from None
    out = NodeVerdicts()
    unknown = unknown_names(c, request)
    if unknown:  # nothing anywhere answers to a name: no node will ever do
        codes = [code for found in unknown.values() for code in found]
        out.reasons = {n: list(codes) for n in names}
        out.unresolvable = set(names)
        return out
    engine.request_topology = request.topology  # read by the engine's set choice
    evals = [engine._filter(part, i, request) for i, part in enumerate(request.parts)]
    host_ok = c.node_ok & (c.node_cpu_free >= request.host_cpu_milli) & (c.node_mem_free >= request.host_memory_mib)
    score = _scores(engine, request, evals, host_ok, rows, exact=scores)
    fits = ~np.isneginf(score)
    good = np.flatnonzero(fits).tolist()
    out.feasible = [names[k] for k in good]
    if scores:
        out.scores = dict(zip(out.feasible, score[good].tolist(), strict=True))
    failed = np.flatnonzero(~fits)
    if failed.size == 0:
        return out
    failed_rows = rows[failed]
    n_nodes = len(c.node_names)
    # One flag per (failed node, code) in the order codes are reported; the lists are then built once
    # per distinct pattern, not once per node (a thousand failed nodes share a handful of patterns).
    order = [ReasonCode.NODE_UNSCHEDULABLE, ReasonCode.NODE_INSUFFICIENT_CPU, ReasonCode.NODE_INSUFFICIENT_MEMORY,
             ReasonCode.NODE_INSUFFICIENT_DEVICES, *DEVICE_CODES, ReasonCode.NODE_TOPOLOGY_UNSATISFIED]
    first_device = 4
    flags = np.zeros((failed_rows.size, len(order)), dtype=bool)
    flags[:, 0] = ~c.node_ok[failed_rows]
    flags[:, 1] = c.node_cpu_free[failed_rows] < request.host_cpu_milli
    flags[:, 2] = c.node_mem_free[failed_rows] < request.host_memory_mib
    never = (c.node_cpu_total[failed_rows] < request.host_cpu_milli) | (
        c.node_mem_total[failed_rows] < request.host_memory_mib
    )
    empty_union = np.zeros(n_nodes, dtype=np.int64)
    for ev in evals:
        short = np.bincount(ev.nodes, minlength=n_nodes)[failed_rows] < ev.part.count
        if short.any():
            all_rows, first_code = engine._device_codes(ev.part, ev.index)
            bad = first_code >= 0
            seen = np.zeros((n_nodes, len(DEVICE_CODES)), dtype=bool)
            seen[c.node[all_rows[bad]], first_code[bad]] = True
            flags[short, 3] = True
            flags[:, first_device : first_device + len(DEVICE_CODES)] |= seen[failed_rows] & short[:, None]
        fit_empty = _rows_fitting_empty(engine, ev.part, ev.index, failed_rows)
        per_node = np.bincount(c.node[fit_empty], minlength=n_nodes)
        never |= per_node[failed_rows] < ev.part.count
        empty_union += per_node
    if len(evals) > 1:
        never |= empty_union[failed_rows] < request.device_count
    # Enough devices for each part, yet no set: the parts compete for the same devices, or topology.
    silent = ~flags.any(axis=1)
    topology = request.topology == "required" and any(ev.part.count > 1 for ev in evals)
    flags[silent, len(order) - 1 if topology else 3] = True
    packed = flags.astype(np.int64) @ (np.int64(1) << np.arange(len(order), dtype=np.int64))
    patterns, which = np.unique(packed, return_inverse=True)
    lists = [[code for i, code in enumerate(order) if int(p) >> i & 1] for p in patterns.tolist()]
    failed_names = [names[k] for k in failed.tolist()]
    out.reasons = {name: list(lists[w]) for name, w in zip(failed_names, which.reshape(-1).tolist(), strict=True)}
    out.unresolvable = {name for name, n in zip(failed_names, never.tolist(), strict=True) if n}
    return out


def _scores(
    engine: Engine,
    request: ResourceRequest,
    evals: list[_PartEval],
    host_ok: BoolArray,
    rows: IntArray,
    *,
    exact: bool = True,
) -> FloatArray:
    """Score per entry of ``rows`` (-inf where the request does not fit that node now; NaN: fits, not scored)."""
    c = engine.cluster
    n_nodes = len(c.node_names)
    best = np.full(n_nodes, -np.inf)
    if not evals:
        nodes = rows[host_ok[rows]]
        if nodes.size:
            ctx = HostContext(c, request, nodes, engine.mix)
            total, weight = np.zeros(nodes.size), 0.0
            for name in engine.weights:
                values = engine.scorers[name].score_host(ctx)
                if values is not None:
                    total += engine.weights[name] * np.clip(np.asarray(values, dtype=np.float64), 0.0, 100.0)
                    weight += engine.weights[name]
            best[nodes] = total / weight if weight > 0 else total
        return best[rows]
    if len(evals) == 1 and evals[0].part.count == 1:
        ev = evals[0]
        np.maximum.at(best, ev.nodes, ev.device_total)
        best[~host_ok] = -np.inf
        return best[rows]
    wanted = np.zeros(n_nodes, dtype=bool)
    wanted[rows] = True
    feasible = host_ok & wanted
    for ev in evals:
        feasible &= np.bincount(ev.nodes, minlength=n_nodes) >= ev.part.count
    cand = np.flatnonzero(feasible)
    if not exact and len(evals) == 1 and request.topology != "required":
        best[cand] = np.nan  # any ``count`` candidates of the node make a set
        return best[rows]
    pools = [np.flatnonzero(np.isin(ev.nodes, cand)) for ev in evals]
    for node in cand.tolist():
        used: set[int] = set()
        chosen: list[tuple[_PartEval, _Choice]] = []
        for ev, pool in zip(evals, pools, strict=True):
            choice = engine._node_choice(ev, node, used, pool)
            if choice is None:
                break
            used.update(int(ev.rows[p]) for p in choice.rows)
            chosen.append((ev, choice))
        else:
            best[node] = engine._combined(chosen)
    return best[rows]


def _rows_fitting_empty(engine: Engine, part: RequestPart, index: int, node_rows: IntArray) -> IntArray:
    """Device rows on ``node_rows`` that could take ``part`` if nothing were allocated (health aside: it may return).

    Devices whose rule gives plain shares are judged over arrays; the others are asked
    through their rule with empty usage, remembered per cluster layout.
    """
    c = engine.cluster
    size = c.size
    on = np.isin(c.node[:size], node_rows) & c.alive[:size] & engine._static_ok(part)
    if part.partition is None:
        need = engine._memory_need(part, c.mem_total[:size])
        plain = on & c.plain[:size] & (need <= c.mem_cap[:size]) & (part.cores <= c.core_cap[:size])
        asked = np.flatnonzero(on & ~c.plain[:size])
    else:
        plain = np.zeros(size, dtype=bool)
        asked = np.flatnonzero(on)
    if asked.size == 0:
        return np.flatnonzero(plain)
    cache = _empty_cache(engine)
    part_key = (part.model_dump_json(), index)
    known = cache.setdefault(part_key, {})
    empty = DeviceUsage()
    for row in asked.tolist():
        verdict = known.get(row)
        if verdict is None:
            info = c.info(row)
            if not info.healthy:
                info = info.model_copy(update={"health": Health.HEALTHY})
            verdict = known[row] = isinstance(planned_grant(info, c.rule_of(row), part, index, empty), Grant)
        plain[row] = verdict
    return np.flatnonzero(plain)


_EMPTY_VERDICTS: weakref.WeakKeyDictionary[Engine, tuple[tuple[int, int], dict[tuple[str, int], dict[int, bool]]]] = (
    weakref.WeakKeyDictionary()
)


def _empty_cache(engine: Engine) -> dict[tuple[str, int], dict[int, bool]]:
    """Per-engine memo of rule verdicts on empty devices, dropped whenever a device row is added or removed."""
    layout = (engine.cluster.layout_version, engine.cluster.size)
    held = _EMPTY_VERDICTS.get(engine)
    if held is None or held[0] != layout:
        held = _EMPTY_VERDICTS[engine] = (layout, {})
    return held[1]
