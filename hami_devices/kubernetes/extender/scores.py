"""Prioritize's node scores: the engine's placement score, and how full each node's devices are.

The engine scores a node by the best placement it finds there, device by device: under
spread, a task lands on the emptiest *card* of a node.  A node with one busy card and
three empty ones then scores exactly as an empty node does (its best card is empty too),
and kube-scheduler, seeing equal scores, may stack every pod on one node.  HAMi's node
policy looks at the node as a whole, so prioritize adds the node's device occupancy in
the direction of the policy's own fit scorers: ``spread`` prefers the emptier node,
``binpack`` the fuller one, each in proportion to its weight.  A policy with neither
(``topology-aware`` has a little binpack; a user policy may have none) keeps the engine's
scores alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from hami_devices.kubernetes.extender import wire
from hami_devices.scheduling.cluster import ClusterState

FIT_SCORERS = ("spread", "binpack")


def occupancy(cluster: ClusterState, nodes: Sequence[str]) -> dict[str, float]:
    """Per node: the mean of the used fractions of its devices' memory and cores (0 empty .. 1 full)."""
    rows = cluster.live_rows()
    owner = cluster.node[rows]
    size = len(cluster.node_names)
    used_mem = np.bincount(owner, weights=cluster.mem_used[rows], minlength=size)
    cap_mem = np.bincount(owner, weights=cluster.mem_cap[rows], minlength=size)
    used_cores = np.bincount(owner, weights=cluster.cores_used[rows], minlength=size)
    cap_cores = np.bincount(owner, weights=cluster.core_cap[rows], minlength=size)
    share = 0.5 * used_mem / np.maximum(cap_mem, 1) + 0.5 * used_cores / np.maximum(cap_cores, 1)
    index = cluster.node_rows(nodes)
    return {n: float(np.clip(share[i], 0.0, 1.0)) for n, i in zip(nodes, index.tolist(), strict=True) if i >= 0}


def node_scores(
    cluster: ClusterState, weights: Mapping[str, float], placement: Mapping[str, float]
) -> dict[str, float]:
    """The engine's placement scores (0..100) blended half and half with the policy's node occupancy score."""
    spread, binpack = (float(weights.get(name, 0.0)) for name in FIT_SCORERS)
    if spread + binpack <= 0 or not placement:
        return dict(placement)
    full = occupancy(cluster, list(placement))
    out = {}
    for node, score in placement.items():
        node_term = 100.0 * (spread * (1.0 - full[node]) + binpack * full[node]) / (spread + binpack)
        out[node] = 0.5 * score + 0.5 * node_term
    return out


def scaled(scores: Mapping[str, float], nodes: Sequence[str]) -> dict[str, int]:
    """Scores (0..100) -> 1..10 over the candidates, best 10; 0 where the pod does not fit.

    Stretched between the lowest and highest candidate so the engine's preference
    survives the coarse 0..10 scale; equal scores all get their plain tenth.
    """
    if not scores:
        return dict.fromkeys(nodes, wire.MIN_PRIORITY)
    low, high = min(scores.values()), max(scores.values())
    out = {}
    for node in nodes:
        score = scores.get(node)
        if score is None:
            out[node] = wire.MIN_PRIORITY
        elif high - low > 1e-9:
            out[node] = 1 + round((wire.MAX_PRIORITY - 1) * (score - low) / (high - low))
        else:
            out[node] = max(1, min(wire.MAX_PRIORITY, round(score / 10)))
    return out
