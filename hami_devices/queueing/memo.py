"""What the admission loop remembers so that a tick with nothing new costs nothing.

A shape (the request of a task, its name left out) that did not fit can only fit
once capacity is freed, and only on the nodes where it was: the loop logs the
node rows it frees, and a "did not fit" note stays good until one of those nodes
could take the shape.  ``epoch`` bumps when the cluster changed in ways the loop
did not see (then every note is void).  A shape no eviction could help is
remembered until the cluster's version moves or a candidate victim grows old
enough to be eligible.
"""

from __future__ import annotations

import numpy as np

from hami_devices.models import ResourceRequest
from hami_devices.queueing.prefilter import fits_any
from hami_devices.scheduling.cluster import ClusterState

MAX_FREED_LOG = 200_000  # past this many freed rows the log is dropped and every note voided


class Memo:
    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.epoch = 0
        self.freed: list[int] = []  # node rows freed by the loop, in order
        self.no_fit: dict[str, tuple[int, int]] = {}  # shape -> (epoch, len(freed)) when it last did not fit
        self.no_eviction: dict[str, tuple[int, float]] = {}  # shape -> (cluster version, valid until)
        self.seen_version = cluster.version
        self.dirty = True  # something changed that a tick has not looked at
        self.wake_at = float("inf")  # when a remembered "no eviction" runs out on its own

    # ------------------------------------------------------------------ what changed
    def changed(self) -> None:
        """Something the next tick must look at (a submission, a release, an eviction, a queue's state)."""
        self.dirty = True

    def saw_cluster(self) -> None:
        """The loop itself changed the cluster (a booking made or forgotten): nothing it did not see."""
        self.seen_version = self.cluster.version

    def freed_rows(self, rows: list[int]) -> None:
        self.freed.extend(rows)
        if len(self.freed) > MAX_FREED_LOG:
            self.freed.clear()
            self.epoch += 1

    def due(self, now: float, *, force: bool) -> bool:
        """Whether a tick at ``now`` has anything to look at; when it has, the tick starts afresh."""
        if force:
            self.dirty = True
            self.no_eviction.clear()
            self.no_fit.clear()
        if self.cluster.version != self.seen_version:  # the cluster changed under us (nodes, health, bookings)
            self.epoch += 1
            self.seen_version = self.cluster.version
            self.dirty = True
        if not self.dirty and now < self.wake_at:
            return False
        self.dirty = False
        self.wake_at = float("inf")
        return True

    # ------------------------------------------------------------------ did not fit
    def did_not_fit(self, shape: str) -> None:
        self.no_fit[shape] = (self.epoch, len(self.freed))

    def known_not_to_fit(self, shape: str, request: ResourceRequest) -> bool:
        """It did not fit, and no node freed since could take it."""
        note = self.no_fit.get(shape)
        if note is None or note[0] != self.epoch:
            return False
        seen = note[1]
        if seen < len(self.freed):
            nodes = np.unique(np.array(self.freed[seen:], dtype=np.int64))
            if fits_any(self.cluster, request, nodes):
                return False
            self.did_not_fit(shape)
        return True

    # ------------------------------------------------------------------ no eviction helps
    def no_eviction_helps(self, shape: str, now: float) -> bool:
        note = self.no_eviction.get(shape)
        return note is not None and note[0] == self.cluster.version and now < note[1]

    def no_eviction_until(self, shape: str, wake: float) -> None:
        self.no_eviction[shape] = (self.cluster.version, wake)
        self.wake_at = min(self.wake_at, wake)

    def hopeless(self, shape: str, request: ResourceRequest, now: float, *, preemptive: bool) -> bool:
        """Known not to fit, and no eviction could change that now."""
        if not self.known_not_to_fit(shape, request):
            return False
        return not preemptive or self.no_eviction_helps(shape, now)
