"""The queue rules as the README ("Queues") and the queue file's documentation write them, for one
resource (``device-cores``), and an exhaustive search of the evictions they allow.

Nothing here imports the queueing package.  A queue file is read as the plain
mapping a user writes; a running task is seen through the public ``Task``
(its request, its grants, when it started).  The rules:

* **Limit**: a queue and every queue above it stay within their limits.
* **Entitled**: a task is entitled at a queue on its path (its leaf or an
  ancestor, the lowest first) when that queue guarantees the resource, the task
  uses it, and the queue's usage plus the task stays within the guarantee; any
  other admission *borrows*.
* **Lending**: a borrowing admission leaves free, in aggregate, what the other
  queues keep back: each queue off the task's path whose parent is on it (or a
  top-level one) keeps ``guarantee - lending-limit`` of its unused guarantee (its
  subtree keeps at least what its children keep).  A task that is not
  interruptible keeps clear of every other queue's whole unused guarantee.
* **Evictions** (only with ``enable-preemptive``), for a pending task that does
  not fit: victims are interruptible tasks that have run their queue's
  ``min-runtime``;
  - *reclaim* (the task's queue allows it): the task is entitled at ``a``;
    victims come from queues outside ``a``'s subtree; every queue on a victim's
    path below its common ancestor with the task keeps its guarantee;
  - *priority*: victims of the task's own queue with a strictly lower
    priority; the queue's limits hold with the victims gone and the task in;
  - *fair-share*, for a borrowing task: victims of other queues; floors as for
    reclaim; where the two paths part, the task's side after admission has a
    weighted share no higher than the victim's side after the evictions and
    strictly lower than the victim's side before.  A queue's weighted share is
    its usage above its guarantee over the cluster's capacity, over its weight.
  The task must then fit the cluster with the victims gone, within its limits,
  and a borrowing task (priority, fair-share) within the lending rule counting
  the victims' capacity free.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations
from typing import Any

from tests.oracles import placement_rules as rules
from tests.oracles.placement_rules import Dev, Held, Host, World

KEY = "device-cores"


@dataclass(frozen=True)
class Queue:
    name: str
    parent: str | None
    guarantee: int | None
    limit: int | None
    lending_limit: int | None
    weight: Fraction
    min_runtime: float
    reclaim: bool
    priority: bool
    fair_share: bool
    strict_fifo: bool
    children: tuple[str, ...] = ()

    @property
    def kept(self) -> int:
        """Unused guarantee this queue never lends."""
        if self.guarantee is None or self.lending_limit is None:
            return 0
        return self.guarantee - self.lending_limit


@dataclass(frozen=True)
class Running:
    name: str
    queue: str
    cores: int
    interruptible: bool
    priority: int
    started_at: float
    grants: tuple[tuple[str, int, int, bool], ...]  # uuid, memory, cores, exclusive


@dataclass
class QueueWorld:
    """The queue tree, what runs, the cluster's devices, and the time."""

    queues: dict[str, Queue]
    running: list[Running]
    devices: list[Dev]
    hosts: list[Host]
    now: float
    preemptive: bool = True
    usage: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.usage = self.usage_without(())

    @property
    def capacity(self) -> int:
        return 100 * len(self.devices)

    def path(self, leaf: str) -> list[str]:
        out = [leaf]
        while self.queues[out[-1]].parent is not None:
            out.append(self.queues[out[-1]].parent or "")
        return out[::-1]  # top-level first

    def usage_without(self, gone: Sequence[Running]) -> dict[str, int]:
        use = dict.fromkeys(self.queues, 0)
        names = {g.name for g in gone}
        for task in self.running:
            if task.name not in names:
                for q in self.path(task.queue):
                    use[q] += task.cores
        return use

    def cluster(self, gone: Sequence[Running] = ()) -> World:
        held: dict[str, Held] = {}
        names = {g.name for g in gone}
        for task in self.running:
            if task.name in names:
                continue
            for uuid, memory, cores, exclusive in task.grants:
                h = held.get(uuid, Held())
                held[uuid] = Held(h.memory_mib + memory, h.cores + cores, h.sharers + 1, h.exclusive or exclusive)
        return World(self.hosts, self.devices, held)


def queues_of(spec: dict[str, Any]) -> dict[str, Queue]:
    """The queue file's mapping, as the oracle reads it (only ``device-cores`` amounts)."""
    out: dict[str, Queue] = {}

    def walk(entry: dict[str, Any], parent: str | None) -> None:
        preemption = entry.get("preemption", {})
        children = entry.get("children", [])
        out[entry["name"]] = Queue(
            name=entry["name"],
            parent=parent,
            guarantee=entry.get("guarantee", {}).get(KEY),
            limit=entry.get("limit", {}).get(KEY),
            lending_limit=(entry.get("lending-limit") or {}).get(KEY),
            weight=Fraction(entry.get("weight", 1)),
            min_runtime=float(entry.get("min-runtime", 0)),
            reclaim=preemption.get("reclaim", True),
            priority=preemption.get("priority", False),
            fair_share=preemption.get("fair-share", False),
            strict_fifo=entry.get("strict-fifo", False),
            children=tuple(c["name"] for c in children),
        )
        for child in children:
            walk(child, entry["name"])

    for top in spec["queues"]:
        walk(top, None)
    return out


def charge_of(request: Any) -> int:
    return sum(p.count * p.cores for p in request.parts)


# ---------------------------------------------------------------------- the rules
def within_limits(w: QueueWorld, leaf: str, charge: int, usage: dict[str, int]) -> bool:
    return all(w.queues[q].limit is None or usage[q] + charge <= (w.queues[q].limit or 0) for q in w.path(leaf))


def entitled_at(w: QueueWorld, leaf: str, charge: int, usage: dict[str, int]) -> str | None:
    if charge <= 0:
        return None
    for q in reversed(w.path(leaf)):
        guarantee = w.queues[q].guarantee
        if guarantee is not None and usage[q] + charge <= guarantee:
            return q
    return None


def kept_back(w: QueueWorld, q: str, usage: dict[str, int], everything: bool) -> int:
    queue = w.queues[q]
    kept = (queue.guarantee or 0) if everything else queue.kept
    own = max(kept - usage[q], 0)
    if queue.children:
        own = max(own, sum(kept_back(w, c, usage, everything) for c in queue.children))
    return own


def lending_ok(w: QueueWorld, leaf: str, charge: int, usage: dict[str, int], free: int, everything: bool) -> bool:
    if charge <= 0:
        return True
    path = w.path(leaf)
    reserved = 0
    for depth, q in enumerate(path):
        siblings = [n for n, x in w.queues.items() if x.parent == (path[depth - 1] if depth else None)]
        reserved += sum(kept_back(w, s, usage, everything) for s in siblings if s != q)
    return free - charge >= reserved


def borrowing_ok(w: QueueWorld, task: Any, charge: int, usage: dict[str, int], free: int) -> bool:
    """The lending rule for a borrowing admission (and, not interruptible, every unused guarantee)."""
    if not lending_ok(w, task.queue, charge, usage, free, everything=False):
        return False
    return task.preemptible or lending_ok(w, task.queue, charge, usage, free, everything=True)


def share(w: QueueWorld, q: str, used: int) -> Fraction:
    borrowed = max(used - (w.queues[q].guarantee or 0), 0)
    return Fraction(borrowed, max(w.capacity, 1)) / w.queues[q].weight


def below_common(w: QueueWorld, victim_leaf: str, leaf: str) -> list[str]:
    mine, theirs = w.path(leaf), w.path(victim_leaf)
    cut = 0
    while cut < min(len(mine), len(theirs)) and mine[cut] == theirs[cut]:
        cut += 1
    return theirs[cut:]


def floors_hold(w: QueueWorld, leaf: str, victims: Sequence[Running]) -> bool:
    removed: dict[str, int] = {}
    for v in victims:
        for q in below_common(w, v.queue, leaf):
            removed[q] = removed.get(q, 0) + v.cores
    return all(
        w.queues[q].guarantee is None or amount == 0 or w.usage[q] - amount >= (w.queues[q].guarantee or 0)
        for q, amount in removed.items()
    )


def _sides(w: QueueWorld, leaf: str, victim_leaf: str) -> tuple[str, str]:
    mine, theirs = w.path(leaf), w.path(victim_leaf)
    cut = 0
    while mine[cut] == theirs[cut]:
        cut += 1
    return mine[cut], theirs[cut]


def eligible(w: QueueWorld, v: Running) -> bool:
    return v.interruptible and w.now - v.started_at >= w.queues[v.queue].min_runtime


RULES = ("reclaim", "priority", "fair-share")


def fits_now(w: QueueWorld, task: Any, victims: Sequence[Running] = ()) -> bool:
    """Whether the brute-force placer finds room for ``task`` with ``victims`` gone."""
    return next(rules.feasible(w.cluster(victims), task), None) is not None


def _rule_applies(w: QueueWorld, rule: str, task: Any, entitled: str | None) -> bool:
    own = w.queues[task.queue]
    if rule == "reclaim":
        return own.reclaim and entitled is not None
    if rule == "priority":
        return own.priority
    return own.fair_share and entitled is None


def admission_allowed(w: QueueWorld, task: Any, rule: str, victims: Sequence[Running]) -> bool:
    """Whether the rules let ``task`` in now by ``rule`` ("fits": no eviction) evicting exactly ``victims``."""
    charge = charge_of(task)
    if not within_limits(w, task.queue, charge, w.usage):
        return False
    entitled = entitled_at(w, task.queue, charge, w.usage)
    fits = fits_now(w, task)
    if rule == "fits":
        free = w.capacity - sum(t.cores for t in w.running)
        return not victims and fits and (entitled is not None or borrowing_ok(w, task, charge, w.usage, free))
    if fits or not w.preemptive or not victims or not _rule_applies(w, rule, task, entitled):
        return False  # a task that fits is admitted or waits: evictions are for tasks that do not fit
    if not all(eligible(w, v) and _candidate(w, rule, task, v, entitled) for v in victims):
        return False
    return _allowed(w, rule, task, charge, list(victims))


def admissions(w: QueueWorld, task: Any) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Every way the rules let the pending ``task`` (a ``ResourceRequest``) in now: (rule, victims)."""
    if admission_allowed(w, task, "fits", ()):
        yield "fits", ()
        return
    charge = charge_of(task)
    if not w.preemptive or not within_limits(w, task.queue, charge, w.usage) or fits_now(w, task):
        return
    entitled = entitled_at(w, task.queue, charge, w.usage)
    for rule in RULES:
        if not _rule_applies(w, rule, task, entitled):
            continue
        candidates = [v for v in w.running if eligible(w, v) and _candidate(w, rule, task, v, entitled)]
        for size in range(1, len(candidates) + 1):
            for victims in combinations(candidates, size):
                if _allowed(w, rule, task, charge, list(victims)):
                    yield rule, tuple(v.name for v in victims)


def _candidate(w: QueueWorld, rule: str, task: Any, v: Running, entitled: str | None) -> bool:
    if rule == "reclaim":
        return entitled is not None and entitled not in w.path(v.queue)
    if rule == "priority":
        return bool(v.queue == task.queue and v.priority < task.priority)
    return bool(v.queue != task.queue)


def _allowed(w: QueueWorld, rule: str, task: Any, charge: int, victims: list[Running]) -> bool:
    after = w.usage_without(victims)
    free = w.capacity - sum(t.cores for t in w.running)
    if not within_limits(w, task.queue, charge, after):
        return False
    if rule in ("reclaim", "fair-share") and not floors_hold(w, task.queue, victims):
        return False
    if rule == "fair-share":
        for v in victims:
            mine, theirs = _sides(w, task.queue, v.queue)
            mine_after = share(w, mine, after[mine] + charge)
            if not (mine_after <= share(w, theirs, after[theirs]) and mine_after < share(w, theirs, w.usage[theirs])):
                return False
    if rule != "reclaim" and entitled_at(w, task.queue, charge, w.usage) is None:
        freed = sum(v.cores for v in victims)
        if not borrowing_ok(w, task, charge, after, free + freed):
            return False
    return fits_now(w, task, victims)
