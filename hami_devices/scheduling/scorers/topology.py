"""Topology: the mean pair score (0..100, NVLink high, cross-socket PCIe low) within a device set.

Pair scores come from ``DeviceInfo.topology`` as the vendor adapter reports
them.  A single device has no pairs; it scores 100 so that single-device
parts are not penalised.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np

from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.scorers.base import FloatArray, ScoreContext, Scorer


def pair_score(cluster: ClusterState, a: int, b: int) -> float:
    return cluster.pair_score(a, b)  # cached there; cleared when devices come or go


def set_pair_score(cluster: ClusterState, rows: Sequence[int]) -> float:
    if len(rows) < 2:
        return 100.0
    pairs = list(combinations(rows, 2))
    return sum(pair_score(cluster, a, b) for a, b in pairs) / len(pairs)


class TopologyScorer(Scorer):
    name = "topology"

    def score(self, ctx: ScoreContext) -> FloatArray:
        # Per device there is nothing to judge; the set score decides.
        return np.full(ctx.rows.shape, 100.0)

    def constant(self, ctx: ScoreContext) -> float | None:
        return 100.0

    def score_set(self, ctx: ScoreContext, rows: Sequence[int], device_scores: FloatArray) -> float:
        return set_pair_score(ctx.cluster, rows)
