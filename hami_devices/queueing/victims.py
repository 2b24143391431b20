"""Choosing victims: the fewest and cheapest evictions that let a task fit, asked of the engine itself.

Given a task that does not fit and the running tasks the rules allow to evict
(``Candidate``), ``search`` returns a set of victims and the engine's placement
for the task once they are gone, or None.

* **Cheapest first.** Candidates are ranked by cost: lower priority first, then
  recomputable before not, then borrowed before nominal (a queue's *nominal*
  tasks are its oldest ones within its nominal share, see
  ``AdmissionLoop._nominal``; the rest run on lent capacity), then the least work
  lost (device-seconds run so far), then the queue furthest above its weighted
  share.  Cost *tiers* (priority, recomputable, nominal) are opened one at a time:
  a task of a higher tier is never evicted while a set from lower tiers would do.
* **Per node, exactly.** On each promising node (``prefilter``) the candidates
  there are forgotten from the cluster in cost order until ``Engine.try_place``
  finds a placement; then each chosen victim is restored in turn, the most
  expensive first, and kept off the list if the task still fits without evicting
  it.  So every victim is needed: none could be spared and still let the task in.
  Everything forgotten is restored before the function returns; the cluster is
  unchanged.
* **Least lost, then fewest.** Among the nodes examined (at most ``max_nodes``:
  half those that miss the least now, half those holding the cheapest
  candidates), the set that throws away the least work wins, then the one with
  the fewest victims.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hami_devices.models import ResourceRequest
from hami_devices.queueing.prefilter import fits_now, promising_nodes
from hami_devices.queueing.resources import Vector
from hami_devices.queueing.tasks import Task
from hami_devices.scheduling.cluster import Booking, ClusterState
from hami_devices.scheduling.engine import Engine, Placement

MAX_NODES = 8


@dataclass(eq=False)
class Candidate:
    """A running task the rules allow to evict for the task at hand."""

    task: Task
    booking: Booking
    charge: Vector
    lost: float  # device-seconds of work an eviction now throws away
    share: float = 0.0  # its queue's weighted share: between equals, the queue furthest above its share gives
    nominal: bool = False  # within its queue's guarantee (the queue's oldest tasks), not on borrowed capacity

    @property
    def tier(self) -> tuple[int, bool, bool]:
        return (self.task.priority, not self.task.recomputable, self.nominal)

    @property
    def cost(self) -> tuple[int, bool, bool, float, float, int]:
        return (*self.tier, self.lost, -self.share, -self.task.seq)


@dataclass
class Choice:
    victims: list[Candidate]
    placement: Placement

    @property
    def key(self) -> tuple[tuple[int, bool, bool], float, int, float]:
        worst = max(v.tier for v in self.victims)
        return (worst, sum(v.lost for v in self.victims), len(self.victims), -sum(v.share for v in self.victims))


Admissible = Callable[[Sequence[Candidate]], bool]
"""The rules on a set of victims taken together (floors, limits, shares): may all of them go?"""


def _forget(cluster: ClusterState, victim: Candidate) -> None:
    cluster.forget(victim.booking.id)


def _restore(cluster: ClusterState, victim: Candidate) -> None:
    victim.booking = cluster.rebook(victim.booking)


def _try(engine: Engine, request: ResourceRequest, node: int) -> Placement | None:
    if not fits_now(engine.cluster, request, node):
        return None
    return engine.try_place(request)


def _on_node(
    engine: Engine, request: ResourceRequest, node: int, pool: list[Candidate], admissible: Admissible
) -> Choice | None:
    cluster = engine.cluster
    chosen: list[Candidate] = []
    placement: Placement | None = None
    try:
        for victim in sorted(pool, key=lambda v: v.cost):
            if not admissible([*chosen, victim]):
                continue
            _forget(cluster, victim)
            chosen.append(victim)
            placement = _try(engine, request, node)
            if placement is not None:
                break
        if placement is None:
            return None
        # Spare every victim the task can do without, the most expensive first.
        for victim in sorted(chosen[:-1], key=lambda v: v.cost, reverse=True):
            _restore(cluster, victim)
            again = _try(engine, request, node)
            if again is not None:
                chosen.remove(victim)
                placement = again
            else:
                _forget(cluster, victim)
        if not admissible(chosen):  # the rules on the final set (a subset of an admissible one, so rarely)
            return None
        return Choice(list(chosen), placement)
    finally:
        for victim in chosen:
            _restore(cluster, victim)


def search(
    engine: Engine,
    request: ResourceRequest,
    arrays: dict[str, npt.NDArray[Any]],
    slots: npt.NDArray[np.int64],
    make: Callable[[int], Candidate],
    admissible: Admissible,
    *,
    lost: npt.NDArray[np.float64],
    nominal: npt.NDArray[np.bool_] | None = None,
    max_nodes: int = MAX_NODES,
) -> Choice | None:
    """The cheapest victims that let ``request`` fit, with its placement once they are gone (None: no set does).

    ``arrays``: the running tasks' footprints (``Footprints.arrays``); ``slots``: those the
    rules allow to evict; ``make(slot)`` builds the candidate of a slot; ``lost``: work an
    eviction throws away, per slot; ``nominal``: per slot, within its queue's nominal share.
    ``request`` must not fit now.  The cluster is left as it was found.
    """
    if slots.size == 0:
        return None
    cluster = engine.cluster
    a = arrays
    priority = a["slot_priority"][slots]
    fixed = ~a["slot_recomputable"][slots]
    kept = np.zeros(slots.size, dtype=bool) if nominal is None else nominal[slots]
    grant_node = cluster.node[a["grant_row"]]
    made: dict[int, Candidate] = {}

    def get(slot: int) -> Candidate:
        hit = made.get(slot)
        if hit is None:
            hit = made[slot] = make(slot)
        return hit

    # Tiers in cost order: (priority, not recomputable, nominal), lexicographically.
    tiers, tier_of = np.unique(np.stack([priority, fixed, kept]), axis=1, return_inverse=True)
    tier_of = tier_of.reshape(-1)
    for top in range(tiers.shape[1]):
        in_tier = tier_of <= top
        pool = slots[in_tier]
        member = np.zeros(a["slot_alive"].size, dtype=bool)
        member[pool] = True
        grants = member[a["grant_slot"]]
        hosts = member[a["host_slot"]]
        victim_nodes = np.unique(np.concatenate([grant_node[grants], a["host_node"][hosts]]))
        nodes = promising_nodes(
            cluster,
            request,
            a["grant_row"][grants],
            a["grant_mem"][grants],
            a["grant_cores"][grants],
            a["grant_excl"][grants],
            a["host_node"][hosts],
            a["host_cpu"][hosts],
            a["host_mem"][hosts],
            victim_nodes.tolist(),
        )
        # Half the nodes examined miss the least now, half hold the cheapest candidates; the cheapest
        # first, and none whose cheapest candidate alone throws away more work than the best set found.
        cheap_at = np.full(len(cluster.node_names), np.inf)
        np.minimum.at(cheap_at, grant_node[grants], lost[a["grant_slot"][grants]])
        np.minimum.at(cheap_at, a["host_node"][hosts], lost[a["host_slot"][hosts]])
        rank = {n: i for i, n in enumerate(nodes)}
        by_cost = sorted(nodes, key=lambda n: (cheap_at[n], rank[n]))
        examine = list(dict.fromkeys([*nodes[: max(1, max_nodes // 2)], *by_cost]))[:max_nodes]
        examine.sort(key=lambda n: (cheap_at[n], rank[n]))
        best: Choice | None = None
        for node in examine:
            if best is not None and cheap_at[node] >= best.key[1]:
                break
            on = np.unique(
                np.concatenate(
                    [a["grant_slot"][grants & (grant_node == node)], a["host_slot"][hosts & (a["host_node"] == node)]]
                )
            )
            choice = _on_node(engine, request, node, [get(int(x)) for x in on], admissible)
            if choice is not None and (best is None or choice.key < best.key):
                best = choice
        if best is not None:
            return best
    return None
