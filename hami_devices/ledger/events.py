"""What the ledger keeps besides live allocations: lifecycle events, observer state and usage samples.

Events are written in the same transaction as the change they describe (a
grant, a release, an eviction), so a crash can neither lose one nor leave one
behind for a change that did not commit.  Transitions that only an observer can
see (a workload process started or exited, a device's health changed) are
recorded together with the observer's last-seen state, in one transaction, so
two observers never record the same transition twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import Field

from hami_devices.models import HamiModel


class EventKind(StrEnum):
    """The kinds the SDK writes.  ``Event.kind`` is a plain string so later kinds never break older readers."""

    GRANTED = "allocation.granted"
    REFUSED = "allocation.refused"
    RELEASED = "allocation.released"
    EVICTED = "allocation.evicted"
    REVOKED = "allocation.revoked"  # released while processes used it: their limiter refuses them from now on
    PROCESS_STARTED = "process.started"
    PROCESS_EXITED = "process.exited"
    HEALTH_CHANGED = "device.health"
    LIMITER_REFUSALS = "limiter.refused"  # refusals counted in a region since the last event (data: count, refusal)
    REGION_REMOVED = "region.orphan_removed"
    MIGRATED = "task.migrated"  # a defragmentation move: data has before/after, checkpointed, lost work
    CONFLICT = "ledger.conflict"  # an allocation the ledger holds past a limit (ledger.conflicts)


ENDS_ALLOCATION = frozenset({EventKind.RELEASED, EventKind.EVICTED})
LIFECYCLE = frozenset({EventKind.GRANTED, *ENDS_ALLOCATION})


class Event(HamiModel):
    """One lifecycle event.  ``seq`` is given by the ledger: commit order, strictly increasing."""

    seq: int | None = None
    time: float = Field(default_factory=time.time)
    kind: str = Field(pattern=r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_.]*$")
    allocation_id: str | None = None
    uuid: str | None = None
    node: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class UsageSample:
    """Measured use of one allocation's grant on one device, summed over part of one time bucket.

    ``seconds`` is the time the observer covered; the other figures are integrals
    over that time (MiB x s, ratio x s), so any number of samples adds up exactly.
    Utilization is only summed where the limiter measured it (``utilization_seconds``).
    """

    bucket: float
    allocation_id: str
    uuid: str
    seconds: float
    memory_mib_seconds: float
    utilization_seconds: float = 0.0
    utilization_ratio_seconds: float = 0.0

    def plus(self, other: UsageSample) -> UsageSample:
        return UsageSample(
            self.bucket,
            self.allocation_id,
            self.uuid,
            self.seconds + other.seconds,
            self.memory_mib_seconds + other.memory_mib_seconds,
            self.utilization_seconds + other.utilization_seconds,
            self.utilization_ratio_seconds + other.utilization_ratio_seconds,
        )


USAGE_BUCKET_SECONDS = 300.0
"""Width of a usage bucket: samples are summed per (bucket, allocation, device) to keep the ledger small."""


def bucket_of(t: float) -> float:
    return float(int(t // USAGE_BUCKET_SECONDS) * USAGE_BUCKET_SECONDS)
