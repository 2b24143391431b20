"""Victim search for the preempt verb, behind a small interface.

``VictimSearch.victims(pod, node, proposed)`` gets the preemptor, one node and the
victims kube-scheduler chose there (UIDs; they free the CPU and memory it counts), and
returns the UIDs to evict so that the pod fits our devices on that node, or None
when no eviction we may make lets it fit.  ``LowestPriorityVictims`` is the engine's
answer today; the queue-aware search of ``hami_devices.queueing`` (quotas, borrowing,
reclaim) will implement the same interface and replace it.

The search works on a scratch ``ClusterState`` holding only that node and what is
booked on it, never on the live state: kube-scheduler's victims are removed first; if
the pod still does not fit, our preemptible bookings of lower priority are removed,
lowest priority first, until it fits; then each of those is put back, highest
priority first, if the pod fits without evicting it (kube-scheduler's "reprieve").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from hami_devices.kubernetes.extender.leases import POD_UID
from hami_devices.kubernetes.extender.pods import PodRequest
from hami_devices.scheduling.cluster import Booking, ClusterState
from hami_devices.scheduling.engine import Engine
from hami_devices.scheduling.policies import Policy


class VictimSearch(Protocol):
    def victims(self, pod: PodRequest, node: str, proposed: Sequence[str]) -> list[str] | None: ...


def uid_of(booking: Booking) -> str | None:
    return booking.request.labels.get(POD_UID) if booking.request is not None else None


class LowestPriorityVictims:
    """Fewest preemptible, lower-priority pods whose eviction lets the pod fit, checked by placing on a scratch state.

    ``cluster`` and ``policy`` give the live state and the engine policy; the caller
    holds whatever lock guards the cluster while ``victims`` runs.
    """

    def __init__(self, cluster: Callable[[], ClusterState], policy: Callable[[], Policy]) -> None:
        self._cluster = cluster
        self._policy = policy

    def victims(self, pod: PodRequest, node: str, proposed: Sequence[str]) -> list[str] | None:
        live = self._cluster()
        if node not in live.nodes:
            return None
        here = [b for b in live.bookings.values() if _touches(b, node)]
        scratch = _scratch(live, node, here)
        engine = Engine(scratch, self._policy())
        proposed_set = set(proposed)
        for booking in here:
            if uid_of(booking) in proposed_set:
                scratch.forget(booking.id)

        def fits() -> bool:
            return engine.try_place(pod.request) is not None

        if fits():
            return list(proposed)
        mine = [
            b for b in here
            if uid_of(b) is not None and uid_of(b) not in proposed_set and b.preemptible
            and b.request is not None and b.request.priority < pod.request.priority
        ]
        mine.sort(key=lambda b: (b.request.priority if b.request else 0, -_size(b), b.id))
        evicted: list[Booking] = []
        for booking in mine:
            scratch.forget(booking.id)
            evicted.append(booking)
            if fits():
                break
        else:
            return None
        for booking in sorted(evicted, key=lambda b: (-(b.request.priority if b.request else 0), b.id)):
            _rebook(scratch, node, booking)
            if fits():
                evicted.remove(booking)
            else:
                scratch.forget(booking.id)
        return list(proposed) + [uid for b in evicted if (uid := uid_of(b)) is not None]


def _touches(booking: Booking, node: str) -> bool:
    return node in (booking.host_nodes or (booking.node,)) or any(g.node == node for g in booking.grants)


def _size(booking: Booking) -> int:
    return sum(g.memory_mib for g in booking.grants)


def _scratch(live: ClusterState, node: str, bookings: list[Booking]) -> ClusterState:
    """A cluster of one node: its devices, host capacity and what ``bookings`` hold on it."""
    state = ClusterState(live.memory_overcommit, live.vendor_rules)
    spec = live.nodes[node]
    state.add_node(node, spec.cpu_milli, spec.memory_mib, [live.info(r) for r in spec.devices], spec.labels)
    for booking in bookings:
        _rebook(state, node, booking)
    return state


def _rebook(state: ClusterState, node: str, booking: Booking) -> None:
    """``booking`` back on ``node`` with its grants there (the scratch cluster holds that node only)."""
    state.rebook(booking, node, [g for g in booking.grants if g.node == node])
