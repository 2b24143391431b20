"""Select: from scored candidates to ranked placements, with deterministic ties.

A single-device part takes the best device (ties: the lexically smaller node
name, then the lower row).  A multi-device or multi-part request ranks nodes by
the sum of each part's best device scores and examines the best
``SEARCH_NODES`` of them in depth; with ``same_node`` every part goes to one
node on disjoint devices, otherwise each part picks its best node in turn.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hami_devices.models import Grant, ResourceRequest
from hami_devices.rules import PART_NODE_RULES, Apart, passing
from hami_devices.rules.columns import BoolArray, FloatArray, IntArray
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.scorers.base import HostContext
from hami_devices.scheduling.scoring import Choice, ScoredPart, Scoring, combined

SEARCH_NODES = 8
"""Multi-device and multi-part requests: the nodes examined in depth, best device scores first."""

Ranked = tuple[float, str, list[int], list[tuple[ScoredPart, Choice]]]
"""(score, node, rows used, each part with its chosen set)."""


@dataclass
class Chooser:
    """The set and node choice of one decision: the cluster, the policy's scoring, and the request's topology."""

    cluster: ClusterState
    scoring: Scoring
    topology: str  # the request's topology need: none, preferred, required
    min_pair_score: float  # the policy's threshold for required topology
    apart: tuple[frozenset[int], ...] = ()  # per part: the parts it must not share a node with

    def apart_ok(self, index: int, placed_on: Mapping[int, int]) -> BoolArray:
        """Per node row: may part ``index`` go there, given the nodes of the parts already placed (``placed_on``:
        part index -> node row)?"""
        avoid = self.apart[index] if index < len(self.apart) else frozenset()
        nodes = np.array([placed_on[j] for j in sorted(avoid) if j in placed_on], dtype=np.int64)
        return passing(PART_NODE_RULES, self.cluster.node_view(), Apart(nodes))

    def node_choice(self, ev: ScoredPart, node: int, exclude: set[int], pool: IntArray | None = None) -> Choice | None:
        """The part's best device set on one node, avoiding ``exclude`` rows.

        ``pool``: ascending candidate positions that include all of the node's (a prefilter
        shared by the few nodes examined in depth, so each does not scan every candidate).
        """
        on = np.flatnonzero(ev.nodes == node) if pool is None else pool[ev.nodes[pool] == node]
        if exclude:
            on = on[~np.isin(ev.rows[on], list(exclude))]
        if on.size < ev.part.count:
            return None
        on = on[np.lexsort((ev.rows[on], -ev.device_total[on]))]
        positions = self.scoring.grow_set(self.cluster, ev, [int(p) for p in on], ev.part.count, self.topology)
        choice = self.scoring.score_set(ev, positions)
        if self.topology == "required" and self.scoring.topology_of(self.cluster, ev, choice) < self.min_pair_score:
            return None
        return choice

    def same_node(self, evals: list[ScoredPart], host_ok: BoolArray, limit: int) -> list[Ranked]:
        """The best ``limit`` placements with every part on one node."""
        c = self.cluster
        if len(evals) == 1 and evals[0].part.count == 1:
            return self._single_device(evals[0], host_ok, limit)
        node_score = np.zeros(len(c.node_names))
        feasible = host_ok.copy()
        for ev in evals:
            nodes = ev.nodes
            counts = np.bincount(nodes, minlength=len(c.node_names))
            feasible &= counts >= ev.part.count  # disjointness between parts is checked in depth
            best = np.full(len(c.node_names), -np.inf)
            np.maximum.at(best, nodes, ev.device_total)
            node_score += ev.part.count * np.where(np.isfinite(best), best, 0.0)
        cand = np.flatnonzero(feasible)
        if cand.size == 0:
            return []
        cand = cand[top_stable(node_score[cand], max(SEARCH_NODES, limit))]
        pools = [np.flatnonzero(np.isin(ev.nodes, cand)) for ev in evals]
        results: list[Ranked] = []
        for node in cand:
            placed = self.on_node(evals, int(node), pools)
            if placed is not None:
                used, chosen = placed
                results.append((combined(chosen), c.node_name(int(node)), sorted(used), chosen))
        results.sort(key=lambda r: (-round(r[0], 9), r[1], r[2]))
        return results[:limit]

    def on_node(
        self, evals: list[ScoredPart], node: int, pools: list[IntArray] | None = None
    ) -> tuple[set[int], list[tuple[ScoredPart, Choice]]] | None:
        """Every part on node row ``node``, on disjoint devices (or None): each part takes its best set in turn,
        in every order of the parts (a part that may use only some devices must not find them taken by one
        that could have used others), and the best-scoring order wins."""
        best: tuple[float, set[int], list[tuple[ScoredPart, Choice]]] | None = None
        for order in part_orders(len(evals)):
            used: set[int] = set()
            chosen: list[tuple[ScoredPart, Choice]] = []
            for i in order:
                choice = self.node_choice(evals[i], node, used, None if pools is None else pools[i])
                if choice is None:
                    break
                used.update(int(evals[i].rows[p]) for p in choice.rows)
                chosen.append((evals[i], choice))
            else:
                chosen.sort(key=lambda pair: pair[0].index)
                score = combined(chosen)
                if best is None or round(score, 9) > round(best[0], 9):
                    best = (score, used, chosen)
        return None if best is None else (best[1], best[2])

    def _single_device(self, ev: ScoredPart, host_ok: BoolArray, limit: int) -> list[Ranked]:
        c = self.cluster
        rank = c.name_rank()
        if limit == 1 and ev.rows.size:
            # The devices whose score rounded to 1e-9 is the best, found without rounding every
            # candidate: rounding is monotone, so only scores within 1e-8 of the best can tie.
            masked = ev.device_total
            if not host_ok.all():
                masked = np.where(host_ok.take(ev.nodes), masked, -np.inf)
            high = float(masked.max())
            if high == -np.inf:
                return []
            if np.isfinite(high):
                best = np.round(high, 9)
                near = np.flatnonzero(masked >= best - 1e-8)
                top = near[np.round(ev.device_total[near], 9) >= best]
                order = top[np.lexsort((ev.rows[top], rank[ev.nodes[top]]))]
                return [self.single(ev, int(order[0]))]
        pos = np.flatnonzero(host_ok[ev.nodes])
        if pos.size == 0:
            return []
        score = np.round(ev.device_total[pos], 9)
        if limit == 1:
            top = pos[score >= score.max()]
            order = top[np.lexsort((ev.rows[top], rank[c.node[ev.rows[top]]]))]
            picks = order[:1]
        else:
            order = pos[np.lexsort((ev.rows[pos], rank[c.node[ev.rows[pos]]], -score))]
            _, first = np.unique(c.node[ev.rows[order]], return_index=True)
            picks = order[np.sort(first)][:limit]
        return [self.single(ev, int(p)) for p in picks]

    def single(self, ev: ScoredPart, p: int) -> Ranked:
        return (
            float(ev.device_total[p]),
            self.cluster.node_name(int(ev.nodes[p])),
            [p],
            [(ev, self.scoring.score_set(ev, [p]))],
        )

    def split(self, evals: list[ScoredPart], host_ok: BoolArray) -> Ranked | None:
        """Each part on its own best node (``same_node: false``), in every order of the parts, the best-scoring
        order winning; host charged on the first part's node."""
        best: Ranked | None = None
        for order in part_orders(len(evals)):
            ranked = self._split_in(evals, host_ok, order)
            if ranked is not None and (best is None or round(ranked[0], 9) > round(best[0], 9)):
                best = ranked
        return best

    def _split_in(self, evals: list[ScoredPart], host_ok: BoolArray, order: Sequence[int]) -> Ranked | None:
        c = self.cluster
        used: set[int] = set()
        chosen: list[tuple[ScoredPart, Choice]] = []
        placed_on: dict[int, int] = {}
        for i in order:
            ev = evals[i]
            nodes = np.unique(c.node[ev.rows])
            allowed = host_ok & self.apart_ok(i, placed_on) if self.apart else host_ok
            nodes = nodes[allowed[nodes]]  # each node of a split placement runs a process: it needs the host
            best: tuple[float, str, Choice] | None = None
            best_dev = np.full(len(c.node_names), -np.inf)
            np.maximum.at(best_dev, c.node[ev.rows], ev.device_total)
            nodes = nodes[top_stable(best_dev[nodes], SEARCH_NODES)]
            pool = np.flatnonzero(np.isin(ev.nodes, nodes))
            for node in nodes:
                choice = self.node_choice(ev, int(node), used, pool)
                if choice is None:
                    continue
                key = (choice.score, c.node_name(int(node)))
                if best is None or (-round(key[0], 9), key[1]) < (-round(best[0], 9), best[1]):
                    best = (choice.score, key[1], choice)
            if best is None:
                return None
            placed_on[i] = c.node_row(best[1])
            used.update(int(ev.rows[p]) for p in best[2].rows)
            chosen.append((ev, best[2]))
        chosen.sort(key=lambda pair: pair[0].index)
        return combined(chosen), c.node_name(placed_on[0]), sorted(used), chosen

    def host_only(
        self, request: ResourceRequest, host_ok: BoolArray, limit: int
    ) -> list[tuple[str, float, dict[str, float]]]:
        """A request for host CPU and memory only: the scorers that judge nodes rank the feasible ones."""
        c = self.cluster
        nodes = np.flatnonzero(host_ok)
        if nodes.size == 0 or limit == 0:
            return []
        total, per_scorer = self.scoring.score_host(HostContext(c, request, nodes, self.scoring.mix))
        order = np.lexsort((c.name_rank()[nodes], -np.round(total, 9)))[:limit]
        return [
            (c.node_name(int(nodes[k])), float(total[k]), {name: float(v[k]) for name, v in per_scorer.items()})
            for k in order.tolist()
        ]


def apart_of(request: ResourceRequest) -> tuple[frozenset[int], ...]:
    """Per part: the indexes of the parts it must not share a node with (anti-affinity is mutual)."""
    if not any(p.anti_affinity for p in request.parts):
        return ()
    index = {p.name: i for i, p in enumerate(request.parts) if p.name is not None}
    apart: list[set[int]] = [set() for _ in request.parts]
    for i, part in enumerate(request.parts):
        for name in part.anti_affinity:
            apart[i].add(index[name])
            apart[index[name]].add(i)
    return tuple(frozenset(a) for a in apart)


PART_ORDERS = 4
"""Requests of up to this many parts are placed in every order of their parts (4! = 24 orders at most)."""


def part_orders(parts: int) -> list[tuple[int, ...]]:
    """The orders the parts of a request are placed in: the request's own first."""
    if parts <= 1 or parts > PART_ORDERS:
        return [tuple(range(parts))]
    return list(itertools.permutations(range(parts)))


def grants_of(cluster: ClusterState, chosen: list[tuple[ScoredPart, Choice]]) -> list[Grant]:
    return [ev.grant_at(cluster, p) for ev, choice in chosen for p in choice.rows]


def top_stable(values: FloatArray, k: int) -> IntArray:
    """``np.argsort(-values, kind="stable")[:k]`` without sorting everything.

    Every value tied with the k-th largest is kept before the stable sort of the
    few survivors, so the order, ties by position included, is the full sort's.
    """
    if values.size <= k:
        return np.argsort(-values, kind="stable")
    neg = -values
    kth = np.partition(neg, k - 1)[k - 1]
    if np.isnan(kth):  # fewer than k numbers: keep the plain sort's semantics
        return np.argsort(neg, kind="stable")[:k]
    keep = np.flatnonzero(neg <= kth)
    return keep[np.argsort(neg[keep], kind="stable")][:k]
