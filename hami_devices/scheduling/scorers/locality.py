"""Locality: prefer nodes whose labels match the request's (zone, cloud/edge ...).

The request's ``labels`` are wishes, not constraints: each label the node
carries with the same value adds an equal share of 100.  A request without
labels scores every device 100, so the scorer never skews it.
"""

from __future__ import annotations

import numpy as np

from hami_devices.scheduling.scorers.base import FloatArray, ScoreContext, Scorer


class LocalityScorer(Scorer):
    name = "locality"

    def constant(self, ctx: ScoreContext) -> float | None:
        return None if ctx.request.labels else 100.0

    def score(self, ctx: ScoreContext) -> FloatArray:
        wanted = ctx.request.labels
        if not wanted:
            return np.full(ctx.rows.shape, 100.0)
        c = ctx.cluster
        per_node: dict[int, float] = {}
        for node_row in np.unique(c.node[ctx.rows]):
            labels = c.nodes[c.node_name(int(node_row))].labels
            hits = sum(1 for k, v in wanted.items() if labels.get(k) == v)
            per_node[int(node_row)] = 100.0 * hits / len(wanted)
        lookup = np.vectorize(per_node.__getitem__, otypes=[float])
        return lookup(c.node[ctx.rows])  # type: ignore[no-any-return]
