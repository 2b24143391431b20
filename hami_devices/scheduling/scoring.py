"""Score: a policy's scorers over a part's candidates, and the score of a set of devices.

Each scorer (a plugin in ``hami_devices.scorers``) scores every candidate of a
part 0..100; the policy's weights combine them into one device score.  A
multi-device part takes a set per node: the best ``count`` devices, or, where
topology matters, a set grown greedily from each seed device by pair score.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from hami_devices.errors import InvalidConfig
from hami_devices.models import Grant, RequestPart, ResourceRequest
from hami_devices.plugins import SCORER_NAMESPACE, load_plugins
from hami_devices.rules.columns import FloatArray, IntArray
from hami_devices.scheduling.candidates import Candidates
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.fgd import WorkloadMix
from hami_devices.scheduling.policies import Policy
from hami_devices.scheduling.scorers.base import HostContext, ScoreContext, Scorer
from hami_devices.scheduling.scorers.topology import set_pair_score


@dataclass
class ScoredPart:
    """One part's candidates with their scores."""

    part: RequestPart
    index: int
    rows: IntArray  # candidate rows
    memory: IntArray  # MiB on each candidate
    grants: dict[int, Grant]  # row -> the grant its rule rounded to (devices that are not plain)
    device_total: FloatArray  # weighted device score per candidate
    per_scorer: dict[str, FloatArray]
    ctx: ScoreContext
    nodes: IntArray  # node row per candidate
    explain: Callable[[], tuple[IntArray, IntArray]]  # each live row's first failing rule, on first use

    @property
    def candidates(self) -> Candidates:
        """The filter's answer this part was scored over (another policy may score it again)."""
        return Candidates(self.rows, self.memory, self.ctx.cores, self.grants)

    @cached_property
    def device_codes(self) -> tuple[IntArray, IntArray]:
        """(live rows, the index into ``DEVICE_CODES`` of each one's first failing rule; -1 passes)."""
        return self.explain()

    def grant_at(self, cluster: ClusterState, position: int) -> Grant:
        """The grant of candidate ``position``: its rule's rounding, or the plain share."""
        row = int(self.rows[position])
        planned = self.grants.get(row)
        if planned is not None:
            return planned
        info, part = cluster.info(row), self.part
        return Grant.on(info, self.index, int(self.memory[position]), part.cores, exclusive=part.exclusive)


@dataclass
class Choice:
    """A set of candidate positions of one part, with its score and per-scorer breakdown."""

    rows: list[int]
    score: float
    per_scorer: dict[str, float]


class Scoring:
    """A policy's weights and its scorers."""

    def __init__(self, policy: Policy, scorers: Mapping[str, Scorer] | None, mix: WorkloadMix | None) -> None:
        self.policy = policy
        self.weights = {k: v for k, v in policy.weights.items() if v > 0}
        self.scorers = dict(scorers) if scorers is not None else load_scorer_plugins(self.weights)
        missing = [k for k in self.weights if k not in self.scorers]
        if missing:
            raise InvalidConfig("weights", f"policy {policy.name!r} names unknown scorers: {missing}")
        self.mix = mix
        self.total_weight = sum(self.weights.values())
        # scorers whose set score is the default mean of their device scores
        self.mean_set = {k for k in self.weights if type(self.scorers[k]).score_set is Scorer.score_set}

    def score_part(
        self,
        cluster: ClusterState,
        request: ResourceRequest,
        part: RequestPart,
        index: int,
        found: Candidates,
        explain: Callable[[], tuple[IntArray, IntArray]],
        *,
        scored: bool = True,
    ) -> ScoredPart:
        """Every scorer of the policy over the candidates (``scored=False``: every score 0, for feasibility)."""
        cand = found.rows
        ctx = ScoreContext(cluster, request, part, index, cand, found.memory, self.mix, found.cores)
        per_scorer: dict[str, FloatArray] = {}
        device_total = np.zeros(cand.size)
        weighted = np.empty(cand.size)  # one scratch array: large temporaries cost page faults
        for name, w in self.weights.items() if scored else ():
            const = self.scorers[name].constant(ctx) if cand.size else None
            if const is not None:
                # Same values as clipping a full array of ``const`` and adding w * it elementwise.
                value = min(max(float(const), 0.0), 100.0)
                per_scorer[name] = np.full(cand.size, value)
                device_total += w * value
                continue
            if cand.size:
                raw = np.asarray(self.scorers[name].score(ctx), dtype=np.float64)
                score = np.maximum(raw, 0.0)
                np.minimum(score, 100.0, out=score)  # == np.clip(raw, 0, 100), cheaper
            else:
                score = np.zeros(0)
            per_scorer[name] = score
            np.multiply(w, score, out=weighted)
            device_total += weighted
        device_total /= self.total_weight
        return ScoredPart(part, index, cand, found.memory, found.grants, device_total, per_scorer, ctx,
                          cluster.node.take(cand), explain)

    def score_host(self, ctx: HostContext) -> tuple[FloatArray, dict[str, FloatArray]]:
        """A request without devices: the weighted score of each candidate node, and each scorer's."""
        per_scorer: dict[str, FloatArray] = {}
        for name in self.weights:
            values = self.scorers[name].score_host(ctx)
            if values is not None:
                per_scorer[name] = np.clip(np.asarray(values, dtype=np.float64), 0.0, 100.0)
        weight = sum(self.weights[k] for k in per_scorer)
        total = np.zeros(ctx.nodes.size)
        for name, values in per_scorer.items():
            total += self.weights[name] * values
        if weight > 0:
            total /= weight
        return total, per_scorer

    def score_set(self, ev: ScoredPart, positions: list[int]) -> Choice:
        rows = [int(ev.rows[p]) for p in positions]
        idx = np.array(positions, dtype=np.int64)
        per: dict[str, float] = {}
        for name in self.weights:
            values = ev.per_scorer[name][idx]
            if name in self.mean_set:
                # Scorer.score_set inlined: float(np.mean(v)) is add.reduce(v) / n, bit for bit.
                per[name] = float(np.add.reduce(values)) / values.size if values.size else 0.0
            else:
                per[name] = self.scorers[name].score_set(ev.ctx, rows, values)
        total = sum(self.weights[k] * per[k] for k in per) / self.total_weight
        return Choice(positions, total, per)

    def grow_set(self, cluster: ClusterState, ev: ScoredPart, positions: list[int], count: int,
                 topology: str) -> list[int]:
        """Greedy set from each seed: add the device with the best mean pair score to those chosen.

        The device's own score breaks near ties.  Each seed gives one set; the
        best-scoring set wins.  O(k^2 * count) per node instead of C(k, count).
        """
        if count <= 1 or (self.weights.get("topology", 0) <= 0 and topology == "none"):
            return positions[:count]
        rows = [int(ev.rows[p]) for p in positions]
        pairs = cluster.pair_matrix(rows)
        own = ev.device_total[np.array(positions)] * 0.01
        best: list[int] = positions[:count]
        best_val = -np.inf
        seen: set[tuple[int, ...]] = set()
        # All seeds grow at once: row s of ``acc`` sums the pair scores of seed s's chosen
        # devices to every device.  Pair scores are integers, so these sums are exact and
        # acc / m equals the mean over the chosen columns bit for bit.
        size = len(positions)
        seeds = np.arange(size)
        sets = np.empty((size, count), dtype=np.int64)
        sets[:, 0] = seeds
        taken = np.zeros((size, size), dtype=bool)
        taken[seeds, seeds] = True
        acc = pairs.copy()
        for m in range(1, count):
            gain = acc / m + own
            gain[taken] = -np.inf
            pick = np.argmax(gain, axis=1)
            sets[:, m] = pick
            taken[seeds, pick] = True
            acc += pairs[pick]
        for seed in range(size):
            chosen = [int(x) for x in sets[seed]]
            key = tuple(sorted(chosen))
            if key in seen:
                continue
            seen.add(key)
            val = self.score_set(ev, [positions[k] for k in key]).score
            if val > best_val + 1e-9:
                best, best_val = [positions[k] for k in key], val
        return best

    def topology_of(self, cluster: ClusterState, ev: ScoredPart, choice: Choice) -> float:
        """The pair score of a chosen set (the topology scorer's figure where the policy has it)."""
        known = choice.per_scorer.get("topology")
        return set_pair_score(cluster, [int(ev.rows[p]) for p in choice.rows]) if known is None else known


def combined(chosen: Sequence[tuple[ScoredPart, Choice]]) -> float:
    """The score of a placement: its parts' set scores weighted by their device counts."""
    weight = sum(ev.part.count for ev, _ in chosen)
    return sum(ev.part.count * ch.score for ev, ch in chosen) / max(weight, 1)


@lru_cache(maxsize=64)
def _scorer_classes(wanted: tuple[str, ...]) -> dict[str, Any]:
    """Entry-point lookups cost milliseconds; an allocator builds an engine per call, so remember them."""
    classes, failures = load_plugins(SCORER_NAMESPACE, wanted)
    if failures:
        first = next(iter(failures.values()))
        raise InvalidConfig("scorers", f"scorer plugin failed to load: {first.error}")
    return classes


def load_scorer_plugins(names: Sequence[str] | Mapping[str, float]) -> dict[str, Scorer]:
    """Instantiate the named scorers from the ``hami_devices.scorers`` entry points (stevedore)."""
    wanted = list(names)
    classes = _scorer_classes(tuple(sorted(wanted)))
    out: dict[str, Scorer] = {}
    for name in wanted:
        if name in classes:
            scorer = classes[name]()
            if not isinstance(scorer, Scorer):
                raise InvalidConfig("scorers", f"{name!r} is not a Scorer")
            out[name] = scorer
    return out
