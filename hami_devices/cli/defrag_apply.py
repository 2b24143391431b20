"""``defrag apply``'s moves on a ledger: each a release and an allocate on the planned device, through
``hd.allocate`` (the one placement path), under the same id, with a ``task.migrated`` event and a
progress bar on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hami_devices.adapter import VendorAdapter
from hami_devices.allocation import allocate, release_from
from hami_devices.device import Device
from hami_devices.errors import HamiError
from hami_devices.ledger import Event, EventKind, Ledger
from hami_devices.models import DeviceHandle, ResourceRequest
from hami_devices.scheduling.defrag.moves import Moved

BAR = 30


@dataclass
class Outcome:
    moved: list[str] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)  # allocation id -> why it stayed where it was

    def to_dict(self) -> dict[str, object]:
        return {"moved": self.moved, "left": self.left}


def on_devices(request: ResourceRequest, uuids: Sequence[str]) -> ResourceRequest:
    """``request`` held to ``uuids`` (its one part: the planner moves only single-part requests)."""
    parts = [p.model_copy(update={"uuids": list(uuids)}) for p in request.parts]
    return request.model_copy(update={"parts": parts})


def apply_moves(devices: Sequence[Device], ledger: Ledger, moves: Sequence[Moved]) -> Outcome:
    adapters = {d.info.vendor: d.adapter for d in devices}
    outcome = Outcome()
    for done, move in enumerate(moves, 1):
        why = _move(devices, ledger, adapters, move)
        if why is None:
            outcome.moved.append(move.booking_id)
        else:
            outcome.left[move.booking_id] = why
        _progress(done, len(moves), move.booking_id)
    return outcome


def _move(devices: Sequence[Device], ledger: Ledger, adapters: Mapping[str, VendorAdapter], move: Moved) -> str | None:
    """None when moved, else why the allocation stayed (it is then where it was)."""
    try:
        old = ledger.get(move.booking_id)
        release_from(ledger, old, adapters, reason=f"defrag: to {','.join(move.after[1])}")
    except HamiError as exc:  # gone meanwhile, or its processes run: a live workload is not moved under it
        return f"{type(exc).__name__}: {exc}"
    try:
        new = allocate(devices, on_devices(old.request, move.after[1]), metadata=old.metadata, handle_id=old.id)
    except HamiError as exc:
        _restore(devices, old)
        return f"not granted on {','.join(move.after[1])} ({type(exc).__name__}: {exc}); put back"
    ledger.record_event(Event(
        time=time.time(), kind=EventKind.MIGRATED, allocation_id=old.id, node=new.grants[0].node,
        uuid=new.grants[0].uuid,
        data={"before": {"node": move.before[0], "uuids": list(move.before[1])},
              "after": {"node": new.grants[0].node, "uuids": [g.uuid for g in new.grants]},
              "checkpointed": False, "lost_device_seconds": 0.0, "by": "hami-devices defrag apply"},
    ))
    return None


def _restore(devices: Sequence[Device], old: DeviceHandle) -> None:
    allocate(devices, on_devices(old.request, [g.uuid for g in old.grants]), metadata=old.metadata,
             handle_id=old.id)


def _progress(done: int, total: int, label: str) -> None:
    filled = BAR * done // total if total else BAR
    end = "\r" if sys.stderr.isatty() and done < total else "\n"
    sys.stderr.write(f"[{'#' * filled}{'.' * (BAR - filled)}] {done}/{total} {label}{end}")
    sys.stderr.flush()
