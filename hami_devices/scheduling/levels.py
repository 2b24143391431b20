"""Two levels of choice: a node policy picks the node, a device policy the devices on it.

HAMi schedules in two steps, each with its own policy: ``nodeSchedulerPolicy``
(binpack: the fullest node; spread: the emptiest) picks the node, then
``gpuSchedulerPolicy`` picks the devices on it.  With ``scheduler.node-policy``
and ``scheduler.device-policy`` (or a request's own ``policy``) set apart, the
engine does the same:

* each node is judged by the node policy as a whole: the mean of the node
  policy's device score over the part's candidate devices there (weighted by
  the parts' counts), so a node whose devices are mostly empty scores high under
  spread, whatever its single emptiest device;
* the nodes are tried best first (ties: the node name), and on each the device
  policy chooses the set exactly as it does on its own (``Chooser.on_node``);
  the first node where every part gets its devices wins.

When both levels name the same policy the engine never comes here: one policy
ranks devices and nodes together, as before.
"""

from __future__ import annotations

import numpy as np

from hami_devices.rules.columns import BoolArray, FloatArray
from hami_devices.scheduling.choosing import Chooser, Ranked
from hami_devices.scheduling.scoring import ScoredPart, combined


def node_scores(evals: list[ScoredPart], n_nodes: int) -> FloatArray:
    """Per node row: the node policy's view of the node, 0..100 (0 where a part has no candidate there)."""
    total = np.zeros(n_nodes)
    weight = sum(ev.part.count for ev in evals) or 1
    for ev in evals:
        counts = np.bincount(ev.nodes, minlength=n_nodes)
        sums = np.bincount(ev.nodes, weights=ev.device_total, minlength=n_nodes)
        total += ev.part.count * sums / np.maximum(counts, 1)
    return total / weight


def _order(chooser: Chooser, nodes: np.ndarray, score: FloatArray) -> list[int]:
    rank = chooser.cluster.name_rank()
    return [int(n) for n in nodes[np.lexsort((rank[nodes], -np.round(score[nodes], 9)))]]


def same_node(
    chooser: Chooser, evals: list[ScoredPart], node_evals: list[ScoredPart], host_ok: BoolArray, limit: int
) -> list[Ranked]:
    """The first ``limit`` nodes, in the node policy's order, where the device policy places every part."""
    c = chooser.cluster
    n = len(c.node_names)
    feasible = host_ok.copy()
    for ev in evals:
        feasible &= np.bincount(ev.nodes, minlength=n) >= ev.part.count
    score = node_scores(node_evals, n)
    out: list[Ranked] = []
    for node in _order(chooser, np.flatnonzero(feasible), score):
        placed = chooser.on_node(evals, node)
        if placed is None:
            continue
        used, chosen = placed
        out.append((combined(chosen), c.node_name(node), sorted(used), chosen))
        if len(out) >= limit:
            break
    return out


def split(
    chooser: Chooser, evals: list[ScoredPart], node_evals: list[ScoredPart], host_ok: BoolArray
) -> Ranked | None:
    """Each part on its own node (``same_node: false``): the node policy's best node where the device
    policy finds the part a set, in turn; host charged on the first part's node."""
    c = chooser.cluster
    n = len(c.node_names)
    used: set[int] = set()
    chosen = []
    placed_on: dict[int, int] = {}
    for i, (ev, node_ev) in enumerate(zip(evals, node_evals, strict=True)):
        allowed = host_ok & chooser.apart_ok(i, placed_on)
        have = np.bincount(ev.nodes, minlength=n) >= ev.part.count
        score = node_scores([node_ev], n)
        choice = None
        for node in _order(chooser, np.flatnonzero(allowed & have), score):
            choice = chooser.node_choice(ev, node, used)
            if choice is not None:
                placed_on[i] = node
                break
        if choice is None:
            return None
        used.update(int(ev.rows[p]) for p in choice.rows)
        chosen.append((ev, choice))
    return combined(chosen), c.node_name(placed_on[0]), sorted(used), chosen
