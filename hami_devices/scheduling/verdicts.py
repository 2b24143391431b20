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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress
from typing import Any

import numpy as np

from hami_devices.errors import InvalidRequest, ReasonCode
from hami_devices.models import ResourceRequest
from hami_devices.rules import DEVICE_CODES, NODE_CODES
from hami_devices.rules.columns import BoolArray, FloatArray, IntArray
from hami_devices.scheduling.candidates import device_codes, host_ok
from hami_devices.scheduling.choosing import Chooser
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.explaining import node_failures, unknown_names
from hami_devices.scheduling.scorers.base import HostContext
from hami_devices.scheduling.scorers.topology import TopologyScorer
from hami_devices.scheduling.scoring import Choice, ScoredPart, Scoring, combined

Evaluate = Callable[..., ScoredPart]
"""``Engine.evaluate``: one part filtered and scored."""


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
    cluster: ClusterState,
    chooser: Chooser,
    evaluate: Evaluate,
    request: ResourceRequest,
    nodes: Sequence[str] | None = None,
    *,
    scores: bool = True,
) -> NodeVerdicts:
    """The verdict on every node of ``nodes`` (default: every node of the cluster) for a same-node request.

    ``chooser`` and ``evaluate`` are the engine's set choice and part evaluation (``Engine.chooser``,
    ``Engine.evaluate``).  ``scores=False`` skips scoring where feasibility alone is cheaper to decide: a
    single multi-device part without required topology fits wherever enough devices pass.
    """
    if not request.same_node and len(request.parts) > 1:
        raise InvalidRequest("same_node", "per-node verdicts need a request placed on one node")
    c = cluster
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
    # Scores decide feasibility only where a set is chosen by them: several parts competing for
    # devices, or a multi-device part whose set must meet required topology.
    scored = scores or len(request.parts) > 1 or (request.topology == "required" and request.device_count > 1)
    host = host_ok(c, request)
    # The candidates ``Engine.place`` scores: devices on nodes with the host resources and enough of them.
    evals = [evaluate(part, i, request, host=host, scored=scored) for i, part in enumerate(request.parts)]
    score = _scores(chooser, request, evals, host, rows, exact=scores)
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
    order = [*NODE_CODES, ReasonCode.NODE_INSUFFICIENT_DEVICES, *DEVICE_CODES, ReasonCode.NODE_TOPOLOGY_UNSATISFIED]
    devices_flag = len(NODE_CODES)
    first_device = devices_flag + 1
    flags = np.zeros((failed_rows.size, len(order)), dtype=bool)
    for code, bad in node_failures(c, request, failed_rows):
        flags[:, order.index(code)] = bad
    never = np.zeros(failed_rows.size, dtype=bool)
    for _, bad in node_failures(c, request, failed_rows, as_if_empty=True):
        never |= bad
    empty_union = np.zeros(n_nodes, dtype=np.int64)
    on_failed = np.zeros(n_nodes, dtype=bool)
    on_failed[failed_rows] = True
    for ev in evals:
        # a node without the host resources has no candidates: its host codes say why (as in a refusal)
        short = (np.bincount(ev.nodes, minlength=n_nodes)[failed_rows] < ev.part.count) & host[failed_rows]
        if short.any():
            all_rows, first_code = device_codes(c, ev.part, ev.index)
            bad = first_code >= 0
            seen = np.zeros((n_nodes, len(DEVICE_CODES)), dtype=bool)
            seen[c.node[all_rows[bad]], first_code[bad]] = True
            flags[short, devices_flag] = True
            flags[:, first_device : first_device + len(DEVICE_CODES)] |= seen[failed_rows] & short[:, None]
        fit_empty = np.flatnonzero(c.fits_empty(ev.part, ev.index, on_failed[c.node[: c.size]]))
        per_node = np.bincount(c.node[fit_empty], minlength=n_nodes)
        never |= per_node[failed_rows] < ev.part.count
        empty_union += per_node
    if len(evals) > 1:
        never |= empty_union[failed_rows] < request.device_count
    # Enough devices for each part, yet no set: the parts compete for the same devices, or topology.
    silent = ~flags.any(axis=1)
    topology = request.topology == "required" and any(ev.part.count > 1 for ev in evals)
    flags[silent, len(order) - 1 if topology else devices_flag] = True
    packed = flags.astype(np.int64) @ (np.int64(1) << np.arange(len(order), dtype=np.int64))
    patterns, which = np.unique(packed, return_inverse=True)
    out.patterns = [[code for i, code in enumerate(order) if int(p) >> i & 1] for p in patterns.tolist()]
    out.failed = list(compress(names, (~fits).tolist()))
    out.pattern_of = which.reshape(-1).tolist()
    out.never = never.tolist()
    return out


def _scores(
    chooser: Chooser,
    request: ResourceRequest,
    evals: list[ScoredPart],
    host: BoolArray,
    rows: IntArray,
    *,
    exact: bool = True,
) -> FloatArray:
    """Score per entry of ``rows`` (-inf where the request does not fit that node now; NaN: fits, not scored)."""
    c = chooser.cluster
    n_nodes = len(c.node_names)
    best = np.full(n_nodes, -np.inf)
    if not evals:
        nodes = rows[host[rows]]
        if nodes.size:
            best[nodes] = chooser.scoring.score_host(HostContext(c, request, nodes, chooser.scoring.mix))[0]
        return best[rows]
    if len(evals) == 1 and evals[0].part.count == 1:
        ev = evals[0]
        np.maximum.at(best, ev.nodes, ev.device_total)
        best[~host] = -np.inf
        return best[rows]
    wanted = np.zeros(n_nodes, dtype=bool)
    wanted[rows] = True
    feasible = host & wanted
    for ev in evals:
        feasible &= np.bincount(ev.nodes, minlength=n_nodes) >= ev.part.count
    cand = np.flatnonzero(feasible)
    if not exact and len(evals) == 1 and request.topology != "required":
        best[cand] = np.nan  # any ``count`` candidates of the node make a set
        return best[rows]
    pools = [np.flatnonzero(np.isin(ev.nodes, cand)) for ev in evals]
    if len(evals) == 1 and _sets_by_shape(chooser.scoring):
        _best_sets(chooser, evals[0], pools[0], best)
        return best[rows]
    for node in cand.tolist():
        placed = chooser.on_node(evals, node, pools)
        if placed is not None:
            best[node] = combined(placed[1])
    return best[rows]


def _best_sets(chooser: Chooser, ev: ScoredPart, pool: IntArray, best: FloatArray) -> None:
    """``best[node]``: the score of the engine's set choice on each node of ``pool`` (one part, nothing excluded).

    The choice is a function of the node's candidates' scores and of the pair scores among them, not of
    which node it is, so nodes in the same situation -- a hundred empty 8-GPU nodes -- share one choice:
    the key is the node's pair-score shape, the candidates' slots in it (their order as rows) and every
    score the choice reads.
    """
    if pool.size == 0:
        return
    shapes = _shapes(chooser.cluster)
    names = list(chooser.scoring.weights)
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
            choice = None if held is None else Choice([int(on[i]) for i in held[0]], held[1], dict(held[2]))
        else:
            choice = chooser.node_choice(ev, node, set(), on)
            local = {p: i for i, p in enumerate(on.tolist())}
            memo[key] = None if choice is None else ([local[p] for p in choice.rows], choice.score, choice.per_scorer)
        if choice is not None:
            best[node] = combined([(ev, choice)])


def _sets_by_shape(scoring: Scoring) -> bool:
    """Whether every set score is the mean of device scores or the topology pair mean (what ``_best_sets`` keys)."""
    return all(
        name in scoring.mean_set or type(scoring.scorers[name]).score_set is TopologyScorer.score_set
        for name in scoring.weights
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
