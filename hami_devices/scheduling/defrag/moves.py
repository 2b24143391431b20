"""Carrying out a migration plan: each move a release plus an allocate through the engine, and its event.

For each device the plan empties, each of its tasks is released (``forget``)
and placed again by the engine on the one device the plan chose (a mask of
that row: the engine's rules decide whether it fits, as for any placement),
then booked again under the same id.  If any task of the device finds no
room, the device's moves are undone and the device is left as it was.

Each move is a ``task.migrated`` event with where the task was and where it
went, whether it was checkpointed, and the device-seconds of work it lost:
its runtime so far times its share without a checkpoint, nothing with one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hami_devices.errors import HamiError
from hami_devices.ledger.events import Event, EventKind
from hami_devices.scheduling.cluster import Booking, ClusterState
from hami_devices.scheduling.defrag.instance import Instance
from hami_devices.scheduling.defrag.plan import Solution
from hami_devices.scheduling.engine import Engine

Listener = Callable[[Event], None]


@dataclass(frozen=True)
class Moved:
    booking_id: str
    before: tuple[str, tuple[str, ...]]  # node, device uuids
    after: tuple[str, tuple[str, ...]]
    checkpointed: bool
    lost_device_s: float  # work lost by this move
    lost_without_checkpoint_s: float  # what it would have lost without one


def _where(booking: Booking) -> tuple[str, tuple[str, ...]]:
    return booking.node, tuple(g.uuid for g in booking.grants)


def _share(booking: Booking) -> float:
    return sum(g.cores for g in booking.grants) / 100.0


def carry_out(
    engine: Engine,
    inst: Instance,
    plan: Solution,
    now: float,
    *,
    runtime_of: Callable[[str], float],
    checkpointable: Callable[[str], bool],
    emit: Listener | None = None,
) -> list[Moved]:
    """Make ``plan``'s moves on ``engine.cluster``; returns those made (devices that failed are left as they were)."""
    cluster: ClusterState = engine.cluster
    done: list[Moved] = []
    for source in plan.emptied:
        moved: list[tuple[Booking, Booking]] = []
        ok = True
        for m in inst.by_source[source]:
            mover = inst.movers[m]
            dest = plan.dest.get(m)
            if dest is None or mover.booking_id not in cluster.bookings:
                ok = False
                break
            old = cluster.forget(mover.booking_id)
            assert old.request is not None
            mask = np.zeros(max(cluster.size, dest + 1), dtype=bool)
            mask[dest] = True
            placement = engine.try_place(old.request, candidates=[mask])
            try:
                if placement is None:
                    raise HamiError("no room on the planned device")
                new = cluster.rebook(old, placement.node, placement.grants)
            except HamiError:
                cluster.rebook(old)
                ok = False
                break
            moved.append((old, new))
        if not ok:
            for old, _ in reversed(moved):
                cluster.forget(old.id)
                cluster.rebook(old)
            continue
        for old, new in moved:
            lost_plain = runtime_of(old.id) * _share(old)
            saved = checkpointable(old.id)
            record = Moved(old.id, _where(old), _where(new), saved, 0.0 if saved else lost_plain, lost_plain)
            done.append(record)
            if emit is not None:
                emit(
                    Event(
                        time=now,
                        kind=EventKind.MIGRATED,
                        allocation_id=old.id,
                        node=new.node,
                        uuid=new.grants[0].uuid if new.grants else None,
                        data={
                            "before": {"node": record.before[0], "uuids": list(record.before[1])},
                            "after": {"node": record.after[0], "uuids": list(record.after[1])},
                            "checkpointed": saved,
                            "lost_device_seconds": record.lost_device_s,
                        },
                    )
                )
    return done
