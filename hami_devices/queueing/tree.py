"""The queue tree at run time: guarantees, limits, lending limits, weights and usage as arrays.

The rules, in one place (the admission loop and the victim search only ask):

* **Limit.** A queue and every queue above it stay within their limits.
* **Entitled.** A task is *entitled* at queue ``a`` (its leaf or an ancestor) when
  ``a``'s usage plus the task stays within ``a``'s guarantee on every resource ``a``
  guarantees, and the task uses at least one of them.  Resources ``a`` does not
  guarantee neither entitle nor block.  An entitled task may reclaim; any other
  admission borrows.
* **Floor.** An eviction never takes a queue below its guarantee: every queue on
  the victim's path that is not shared with the task it makes room for keeps at
  least its guarantee on every resource it guarantees and the victim uses.
* **Lending.** A borrowing admission leaves free, in aggregate, the part of each
  other queue's unused guarantee that its lending limit keeps back.  A task that
  is not interruptible could never be reclaimed, so it borrows only what no other
  queue is guaranteed: it leaves every other queue's whole unused guarantee free.
* **Share.** A queue's weighted share is its dominant borrowed share (usage above
  its guarantee over the cluster's capacity, the largest over the resources the
  queue file names) divided by its weight; idle capacity goes to the lowest first,
  level by level down the tree.
* **Reclaimable.** Other queues never evict tasks of a queue that is not
  ``reclaimable`` (nor of one below it); so that guarantees still hold, such
  tasks borrow like tasks that are not interruptible.
* **State.** A queue's ``state`` and ``stop-policy`` (its own or an ancestor's)
  say whether it takes new tasks, admits those waiting, and keeps those running
  (``switches``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hami_devices.errors import InvalidRequest
from hami_devices.queueing.resources import Resources, Vector
from hami_devices.queueing.spec import QueueFile, QueueSpec
from hami_devices.queueing.switches import QueueSwitches

EPS = 1e-9
"""Amounts are floats (cores, MiB, milli-CPU summed over tasks): comparisons allow this much rounding."""


def exceeds(amount: Vector, bound: Vector) -> npt.NDArray[np.bool_]:
    """Per resource: ``amount`` is above ``bound`` (a limit, a guarantee).  Every queue rule compares so."""
    return amount > bound + EPS


def falls_short(amount: Vector, bound: Vector) -> npt.NDArray[np.bool_]:
    """Per resource: ``amount`` is below ``bound`` (a guarantee, as a floor)."""
    return amount < bound - EPS


def collect_keys(spec: QueueFile) -> set[str]:
    """Every resource key a queue of ``spec`` guarantees, limits or lends."""
    keys: set[str] = set()

    def walk(q: QueueSpec) -> None:
        keys.update(q.guarantee, q.limit, q.lending_limit or {})
        for c in q.children:
            walk(c)

    for q in spec.queues:
        walk(q)
    return keys


@dataclass
class QueueNode:
    index: int
    name: str
    spec: QueueSpec
    parent: int | None
    path: tuple[int, ...]  # from the top-level queue down to this one
    children: list[int] = field(default_factory=list)

    @property
    def leaf(self) -> bool:
        return not self.children


class QueueTree:
    def __init__(self, spec: QueueFile, resources: Resources) -> None:
        self.spec = spec
        self.resources = resources
        self.nodes: list[QueueNode] = []
        self.by_name: dict[str, QueueNode] = {}
        for top in spec.queues:
            self._add(top, None, ())
        n, k = len(self.nodes), len(resources)
        self.guarantee = np.zeros((n, k))
        self.guarded = np.zeros((n, k), dtype=bool)
        self.limit = np.full((n, k), np.inf)
        self.kept = np.zeros((n, k))  # guarantee minus lending limit: never lent
        self.weight = np.ones(n)
        self.min_runtime = np.array([float(node.spec.min_runtime) for node in self.nodes])
        self.usage = np.zeros((n, k))
        for node in self.nodes:
            s = node.spec
            for key, value in s.guarantee.items():
                self.guarantee[node.index, resources.index[key]] = value
                self.guarded[node.index, resources.index[key]] = True
            for key, value in s.limit.items():
                self.limit[node.index, resources.index[key]] = value
            if s.lending_limit is not None:
                for key, value in s.lending_limit.items():
                    i = resources.index[key]
                    self.kept[node.index, i] = self.guarantee[node.index, i] - value
            self.weight[node.index] = s.weight
        self.lends_all = not self.kept.any()
        self.reclaimable = np.array([all(self.nodes[q].spec.reclaimable for q in n.path) for n in self.nodes])
        self.switches = QueueSwitches(self.nodes, self.by_name)  # state and stop-policy, changed at run time
        named = self.guarded.any(axis=0) | np.isfinite(self.limit).any(axis=0)
        if not named.any():
            named[resources.index["device-cores"]] = True
        self.share_keys = np.flatnonzero(named)
        self._capacity = resources.capacity()

    def _add(self, spec: QueueSpec, parent: int | None, path: tuple[int, ...]) -> None:
        index = len(self.nodes)
        node = QueueNode(index, spec.name, spec, parent, (*path, index))
        self.nodes.append(node)
        self.by_name[spec.name] = node
        if parent is not None:
            self.nodes[parent].children.append(index)
        for child in spec.children:
            self._add(child, index, node.path)

    # ------------------------------------------------------------------ lookup
    def leaf(self, name: str) -> QueueNode:
        node = self.by_name.get(name)
        if node is None:
            raise InvalidRequest("queue", f"unknown queue {name!r}; queues: {', '.join(self.leaves())}")
        if not node.leaf:
            raise InvalidRequest("queue", f"{name!r} has child queues; submit to one of its leaves")
        return node

    def leaves(self) -> list[str]:
        return [n.name for n in self.nodes if n.leaf]

    def __iter__(self) -> Iterator[QueueNode]:
        return iter(self.nodes)

    def refresh_capacity(self) -> None:
        self._capacity = self.resources.capacity()

    @property
    def capacity(self) -> Vector:
        return self._capacity

    def reclaimable_by_others(self, leaf: int, interruptible: bool) -> bool:
        """Whether another queue could ever evict a task of ``leaf`` (else it borrows only unguaranteed capacity)."""
        return interruptible and bool(self.reclaimable[leaf])

    # ------------------------------------------------------------------ usage
    def charge(self, leaf: int, amount: Vector) -> None:
        for q in self.nodes[leaf].path:
            self.usage[q] += amount

    def uncharge(self, leaf: int, amount: Vector) -> None:
        for q in self.nodes[leaf].path:
            self.usage[q] -= amount

    # ------------------------------------------------------------------ rules
    def over_limit(self, leaf: int, amount: Vector, removed: Mapping[int, Vector] | None = None) -> str | None:
        """Why admitting ``amount`` to ``leaf`` would break a limit (None: it would not)."""
        for q in self.nodes[leaf].path:
            after = self.usage[q] + amount - (removed[q] if removed and q in removed else 0)
            bad = np.flatnonzero(exceeds(after, self.limit[q]))
            if bad.size:
                k = int(bad[0])
                return (
                    f"queue {self.nodes[q].name} would use {_n(after[k])} {self.resources.keys[k]}, "
                    f"over its limit {_n(self.limit[q, k])}"
                )
        return None

    def entitled_at(self, leaf: int, amount: Vector, removed: Mapping[int, Vector] | None = None) -> int | None:
        """The lowest queue on ``leaf``'s path whose guarantee covers ``amount`` (None: borrowing): now, or once
        ``removed`` (per queue) is gone."""
        for q in reversed(self.nodes[leaf].path):
            guarded = self.guarded[q]
            if not guarded.any() or not (amount[guarded] > 0).any():
                continue
            if self.covers(q, self.usage[q] - (removed[q] if removed and q in removed else 0) + amount):
                return q
        return None

    def covers(self, q: int, usage: Vector) -> bool:
        """Whether queue ``q``'s guarantee covers ``usage`` on every resource it guarantees."""
        return not exceeds(usage, self.guarantee[q])[self.guarded[q]].any()

    def borrowing(self, q: int) -> npt.NDArray[np.bool_]:
        """Per resource: queue ``q`` uses more than it is guaranteed."""
        return exceeds(self.usage[q], self.guarantee[q])

    def below_guarantee(self, q: int) -> list[str]:
        """Keys on which queue ``q`` uses less than its guarantee."""
        short = falls_short(self.usage[q], self.guarantee[q])  # an unguarded key's guarantee is 0: never short
        return [self.resources.keys[k] for k in np.flatnonzero(short)]

    def lca(self, a: int, b: int) -> int | None:
        """The lowest queue on both paths (paths run from the top, so the shared queues are a prefix)."""
        shared = [q for q in self.nodes[a].path if q in self.nodes[b].path]
        return shared[-1] if shared else None

    def below_lca(self, victim_leaf: int, other_leaf: int) -> tuple[int, ...]:
        """The queues on ``victim_leaf``'s path that ``other_leaf`` does not share."""
        path = self.nodes[victim_leaf].path
        common = self.lca(victim_leaf, other_leaf)
        return path if common is None else path[path.index(common) + 1 :]

    def floor_broken(self, q: int, removed: Vector) -> str | None:
        """Why taking ``removed`` from queue ``q`` would take it below its guarantee (None: it would not)."""
        touched = removed > 0  # an unguarded key's guarantee is 0: taking never breaks it
        after = self.usage[q] - removed
        bad = np.flatnonzero(touched & falls_short(after, self.guarantee[q]))
        if bad.size:
            k = int(bad[0])
            return (
                f"queue {self.nodes[q].name} would fall to {_n(after[k])} {self.resources.keys[k]}, "
                f"below its guarantee {_n(self.guarantee[q, k])}"
            )
        return None

    def kept_back(self, q: int, *, everything: bool) -> Vector:
        """Unused guarantee that queue ``q``'s subtree keeps back from borrowers.

        Lending limits keep back ``guarantee - lending-limit``; with ``everything`` the
        whole unused guarantee is kept (what a borrower that cannot be evicted must leave).
        """
        kept = self.guarantee[q] if everything else self.kept[q]
        own: Vector = np.maximum(kept - self.usage[q], 0.0)
        children = self.nodes[q].children
        if children:
            below = np.sum([self.kept_back(c, everything=everything) for c in children], axis=0)
            own = np.maximum(own, below)
        return own

    def lending_blocked(self, leaf: int, amount: Vector, free: Vector, *, everything: bool = False) -> str | None:
        """Why a borrowing admission would eat into capacity other queues keep back (None: it would not).

        ``free``: what the cluster has free now, per key, in aggregate.
        """
        if self.lends_all and not everything:
            return None
        reserved = np.zeros_like(amount)
        path = self.nodes[leaf].path
        tops = [n.index for n in self.nodes if n.parent is None]
        for depth, q in enumerate(path):
            siblings = tops if depth == 0 else self.nodes[path[depth - 1]].children
            for s in siblings:
                if s != q:
                    reserved += self.kept_back(s, everything=everything)
        bad = np.flatnonzero((amount > 0) & falls_short(free - amount, reserved))
        if bad.size:
            k = int(bad[0])
            return (
                f"{_n(free[k])} {self.resources.keys[k]} are free and other queues keep back {_n(reserved[k])} of them"
            )
        return None

    def unhonoured(self) -> list[tuple[str, float, float]]:
        """Resources whose top-level guarantees add up to more than the cluster holds:
        (key, guaranteed, capacity), for ``queues check``; the shortfall is the difference."""
        tops = [n.index for n in self.nodes if n.parent is None]
        total = self.guarantee[tops].sum(axis=0)  # an unguaranteed resource sums to 0, which never exceeds
        over = np.flatnonzero(exceeds(total, self._capacity))
        return [(self.resources.keys[k], float(total[k]), float(self._capacity[k])) for k in over]

    # ------------------------------------------------------------------ fair share
    def share(self, q: int, extra: Vector | None = None) -> float:
        usage = self.usage[q] if extra is None else self.usage[q] + extra
        borrowed = np.maximum(usage - self.guarantee[q], 0.0)[self.share_keys]
        cap = self._capacity[self.share_keys]
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where((cap > 0) & np.isfinite(cap), borrowed / cap, 0.0)
        return float(frac.max()) / float(self.weight[q])  # share_keys is never empty

    def share_path(self, leaf: int) -> tuple[float, ...]:
        """Shares from the top-level queue down: compared as tuples, this picks the next borrower level by level."""
        return tuple(self.share(q) for q in self.nodes[leaf].path)


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
