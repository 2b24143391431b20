"""Locality: prefer nodes whose labels match the request's (zone, cloud/edge ...).

The request's ``labels`` are wishes, not constraints: each label the node
carries with the same value adds an equal share of 100.  A request without
labels scores every device 100, so the scorer never skews it.
"""

from __future__ import annotations

import numpy as np

from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.scorers.base import FloatArray, HostContext, IntArray, ScoreContext, Scorer


class LocalityScorer(Scorer):
    name = "locality"

    def constant(self, ctx: ScoreContext) -> float | None:
        return None if ctx.request.labels else 100.0

    def score(self, ctx: ScoreContext) -> FloatArray:
        wanted = ctx.request.labels
        if not wanted:
            return np.full(ctx.rows.shape, 100.0)
        nodes, where = np.unique(ctx.cluster.node[ctx.rows], return_inverse=True)
        return _node_scores(ctx.cluster, nodes, wanted)[where]

    def score_host(self, ctx: HostContext) -> FloatArray | None:
        if not ctx.request.labels:
            return np.full(ctx.nodes.shape, 100.0)
        return _node_scores(ctx.cluster, ctx.nodes, ctx.request.labels)


def _node_scores(cluster: ClusterState, nodes: IntArray, wanted: dict[str, str]) -> FloatArray:
    """Each label of ``wanted`` the node carries with the same value adds an equal share of 100."""
    hits = np.zeros(nodes.size, dtype=np.int64)
    for key, value in wanted.items():
        hits += cluster.label_matches(key, value)[nodes]
    return 100.0 * hits / len(wanted)
