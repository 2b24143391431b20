"""A task as the admission loop tracks it: its request, its queue, and where it is in its life."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from hami_devices.models import ResourceRequest
from hami_devices.queueing.resources import Vector
from hami_devices.scheduling.engine import Placement


class TaskState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    EVICTED = "evicted"  # evicted and not requeued (not recomputable, or requeueing off)


@dataclass(eq=False)
class Task:
    name: str
    request: ResourceRequest
    queue: int  # leaf index in the QueueTree
    submitted_at: float
    seq: int  # submission order, breaks ties between equal times
    shape: str = ""  # the request without its name: identical shapes in a queue get identical decisions
    state: TaskState = TaskState.PENDING
    started_at: float | None = None
    first_started_at: float | None = None
    placement: Placement | None = None  # while running, where; after an eviction, where it was
    booking_id: str | None = None
    charge: Vector = field(default_factory=lambda: np.zeros(0))
    estimate: Vector = field(default_factory=lambda: np.zeros(0))
    evictions: int = 0
    wait_reason: str | None = None

    @property
    def priority(self) -> int:
        return self.request.priority

    @property
    def interruptible(self) -> bool:
        return self.request.preemptible

    @property
    def recomputable(self) -> bool:
        return self.request.recomputable

    def order_key(self) -> tuple[int, float, int]:
        """Order inside a queue: higher priority first, then first come first served."""
        return (-self.priority, self.submitted_at, self.seq)

    def runtime(self, now: float) -> float:
        return 0.0 if self.started_at is None else max(0.0, now - self.started_at)

    def device_share(self) -> float:
        """Devices held, as fractions (cores / 100), for runtime-lost figures."""
        if self.placement is None:
            return 0.0
        return sum(g.cores for g in self.placement.grants) / 100.0
