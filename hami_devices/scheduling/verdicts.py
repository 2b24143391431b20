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
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from hami_devices.accounting import DeviceUsage, planned_grant
from hami_devices.errors import InvalidRequest, ReasonCode
from hami_devices.models import Grant, Health, RequestPart, ResourceRequest
from hami_devices.scheduling.scorers.base import HostContext

if TYPE_CHECKING:
    from hami_devices.scheduling.cluster import BoolArray, ClusterState, FloatArray, IntArray
    from hami_devices.scheduling.engine import Engine, _Choice, _PartEval


@dataclass
class NodeVerdicts:
    """``feasible``: the nodes where the request fits now, and ``scores`` their score (0..100) when asked
    for.  ``reasons``: node -> reason codes where it does not fit; ``unresolvable``: those of them that
    could not hold it even with nothing allocated (static mismatches, too small, names nothing in the
    cluster answers to).

    The failed nodes are kept compactly -- ``failed`` (in the order asked), the distinct code lists
    ``patterns``, each failed node's pattern in ``pattern_of`` and its ``never`` flag -- because a
    thousand failed nodes share a handful of patterns; ``reasons`` and ``unresolvable`` are built
    from them on first use.
    """

    feasible: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    patterns: list[list[ReasonCode]] = field(default_factory=list)
    pattern_of: list[int] = field(default_factory=list)
    never: list[bool] = field(default_factory=list)

    @cached_property
    def reasons(self) -> dict[str, list[ReasonCode]]:
        return {name: list(self.patterns[k]) for name, k in zip(self.failed, self.pattern_of, strict=True)}

    @cached_property
    def unresolvable(self) -> set[str]:
        return set(compress(self.failed, self.never))


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
    rows = c.node_rows(names)
    if rows.size and rows.min() < 0:
        raise InvalidRequest("nodes", f"unknown node {names[int(np.argmin(rows))]!r}")
    out = NodeVerdicts()
    unknown = unknown_names(c, request)
    if unknown:  # nothing anywhere answers to a name: no node will ever do
        codes = [code for found in unknown.values() for code in found]
        out.failed, out.patterns = names, [codes]
        out.pattern_of, out.never = [0] * len(names), [True] * len(names)
        return out
    engine.request_topology = request.topology  # read by the engine's set choice
    # Scores decide feasibility only where a set is chosen by them: several parts competing for
    # devices, or a multi-device part whose set must meet required topology.
    scored = scores or len(request.parts) > 1 or (request.topology == "required" and request.device_count > 1)
    host_ok = c.node_ok & (c.node_cpu_free >= request.host_cpu_milli) & (c.node_mem_free >= request.host_memory_mib)
    # The candidates ``Engine.place`` scores: devices on nodes with the host resources and enough of them.
    evals = [engine._filter(part, i, request, host_ok=host_ok, scored=scored) for i, part in enumerate(request.parts)]
    score = _scores(engine, request, evals, host_ok, rows, exact=scores)
    fits = ~np.isneginf(score)
    out.feasible = list(compress(names, fits.tolist()))
    if scores:
        out.scores = dict(zip(out.feasible, score[fits].tolist(), strict=True))
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
        # a node without the host resources has no candidates: its host codes say why (as in a refusal)
        short = (np.bincount(ev.nodes, minlength=n_nodes)[failed_rows] < ev.part.count) & host_ok[failed_rows]
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
    out.patterns = [[code for i, code in enumerate(order) if int(p) >> i & 1] for p in patterns.tolist()]
    out.failed = list(compress(names, (~fits).tolist()))
    out.pattern_of = which.reshape(-1).tolist()
    out.never = never.tolist()
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
    if len(evals) == 1 and _sets_by_shape(engine):
        _best_sets(engine, evals[0], pools[0], best)
        return best[rows]
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


def _best_sets(engine: Engine, ev: _PartEval, pool: IntArray, best: FloatArray) -> None:
    """``best[node]``: the score of the engine's set choice on each node of ``pool`` (one part, nothing excluded).

    The choice is a function of the node's candidates' scores and of the pair scores among them, not of
    which node it is, so nodes in the same situation -- a hundred empty 8-GPU nodes -- share one choice:
    the key is the node's pair-score shape, the candidates' slots in it (their order as rows) and every
    score the choice reads.
    """
    from hami_devices.scheduling.engine import _Choice

    if pool.size == 0:
        return
    shapes = _shapes(engine.cluster)
    names = list(engine.weights)
    by_node = pool[np.argsort(ev.nodes[pool], kind="stable")]  # positions stay ascending within a node
    starts = np.flatnonzero(np.diff(ev.nodes[by_node], prepend=-1))
    memo: dict[tuple[Any, ...], tuple[list[int], float, dict[str, float]] | None] = {}
    for on in np.split(by_node, starts[1:]):
        node = int(ev.nodes[on[0]])
        shape, slot = shapes.of(node)
        key = (shape, slot[ev.rows[on]].tobytes(), ev.device_total[on].tobytes(),
               *(ev.per_scorer[n][on].tobytes() for n in names))
        if key in memo:
            held = memo[key]
            choice = None if held is None else _Choice([int(on[i]) for i in held[0]], held[1], dict(held[2]))
        else:
            choice = engine._node_choice(ev, node, set(), on)
            local = {p: i for i, p in enumerate(on.tolist())}
            memo[key] = None if choice is None else ([local[p] for p in choice.rows], choice.score, choice.per_scorer)
        if choice is not None:
            best[node] = engine._combined([(ev, choice)])


def _sets_by_shape(engine: Engine) -> bool:
    """Whether every set score is the mean of device scores or the topology pair mean (what ``_best_sets`` keys)."""
    from hami_devices.scheduling.scorers.topology import TopologyScorer

    return all(
        name in engine._mean_set or type(engine.scorers[name]).score_set is TopologyScorer.score_set
        for name in engine.weights
    )


class _Shapes:
    """Per node: an id for its devices' pair-score matrix (rows in ascending order) and each row's slot in it."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.layout = cluster.layout_version
        self.slot = np.zeros(cluster.size, dtype=np.int64)
        self._ids: dict[bytes, int] = {}
        self._shape: dict[int, int] = {}

    def of(self, node: int) -> tuple[int, IntArray]:
        shape = self._shape.get(node)
        if shape is None:
            c = self.cluster
            rows = sorted(c.nodes[c.node_name(node)].devices)
            self.slot[rows] = np.arange(len(rows))
            # Both orientations: a pair score is what one device reports of the other.
            full = np.array([[c.pair_score(a, b) if a != b else 0.0 for b in rows] for a in rows])
            shape = self._shape[node] = self._ids.setdefault(full.tobytes(), len(self._ids))
        return shape, self.slot


_SHAPES: weakref.WeakKeyDictionary[ClusterState, _Shapes] = weakref.WeakKeyDictionary()


def _shapes(cluster: ClusterState) -> _Shapes:
    held = _SHAPES.get(cluster)
    if held is None or held.layout != cluster.layout_version or held.slot.size != cluster.size:
        held = _SHAPES[cluster] = _Shapes(cluster)
    return held


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
    known = cache.get(part_key)
    if known is None:
        known = cache[part_key] = np.full(size, -1, dtype=np.int8)  # -1: not asked yet, else 0 or 1
        while len(cache) > EMPTY_VERDICT_PARTS:
            cache.popitem(last=False)
    else:
        cache.move_to_end(part_key)
    empty = DeviceUsage()
    for row in asked[known[asked] < 0].tolist():
        info = c.info(row)
        if not info.healthy:
            info = info.model_copy(update={"health": Health.HEALTHY})
        known[row] = isinstance(planned_grant(info, c.rule_of(row), part, index, empty), Grant)
    plain[asked] = known[asked] == 1
    return np.flatnonzero(plain)


EMPTY_VERDICT_PARTS = 1024
"""Parts whose verdicts on empty devices are remembered per engine (least recently used dropped first)."""
_Verdicts = OrderedDict[tuple[str, int], npt.NDArray[np.int8]]
_EMPTY_VERDICTS: weakref.WeakKeyDictionary[Engine, tuple[tuple[int, int], _Verdicts]] = weakref.WeakKeyDictionary()


def _empty_cache(engine: Engine) -> _Verdicts:
    """Per-engine memo of rule verdicts on empty devices (one entry per device row, per part), dropped whenever a
    device row is added or removed."""
    layout = (engine.cluster.layout_version, engine.cluster.size)
    held = _EMPTY_VERDICTS.get(engine)
    if held is None or held[0] != layout:
        held = _EMPTY_VERDICTS[engine] = (layout, OrderedDict())
    return held[1]
