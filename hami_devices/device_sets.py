"""What ``hd.allocate`` derives from one list of devices, kept between calls, and what the ledger holds on them.

A node agent passes the same device list to every allocation: its index by uuid, its adapters, its engines
and one cluster state of what the ledger holds on those devices are built once (``device_set``) and kept
in step with the ledger by its change log inside each commit's transaction (``booked``).
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from hami_devices.adapter import VendorAdapter
from hami_devices.device import FACTS, Device
from hami_devices.errors import InvalidRequest
from hami_devices.following import follow_ledger
from hami_devices.ledger import Ledger, LedgerView
from hami_devices.ledger.conflicts import note_conflicts
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.engine import Engine

__all__ = ["KEPT_DEVICE_SETS", "DeviceSet", "booked", "device_set"]


@dataclass
class DeviceSet:
    """What ``allocate`` derives from one list of devices, kept between calls (see ``device_set``)."""

    devices: tuple[Device, ...]
    facts: tuple[int, ...]  # the id of each device's info: a device whose facts changed (health) has a new one
    generation: int  # ``device.FACTS`` when ``facts`` were last confirmed
    ledger: Ledger
    by_uuid: dict[str, Device]
    adapters: dict[str, VendorAdapter]
    engines: dict[tuple[str, str], Engine] = field(default_factory=dict)
    cluster: ClusterState | None = None  # what the ledger holds on these devices: every engine's, and the re-check's
    # One commit at a time uses ``cluster`` in this process, whatever the ledger's own locking (a PostgreSQL
    # ledger may run two transactions at once); taken before the ledger's lock, never inside it.
    lock: threading.Lock = field(default_factory=threading.Lock)
    others_wrote: bool = True  # the last commit found allocations another writer committed
    fetched: int = 0  # allocations the last ``booked`` read that this set had not booked
    key: tuple[int, ...] = ()
    sequence: Sequence[Device] | None = None  # the list last given for it, held so that its id stays its own
    prepare_on_node: bool = False  # regions and host paths left to ``hami-devices prepare`` on the node (handoff)


KEPT_DEVICE_SETS = 8
"""Device lists whose derived state ``device_set`` keeps (least recently used dropped first)."""
_KEPT: OrderedDict[tuple[int, ...], DeviceSet] = OrderedDict()
_BY_SEQUENCE: dict[int, DeviceSet] = {}  # id of the list each kept set was last given as -> that set
_KEPT_LOCK = threading.Lock()


def device_set(devices: Sequence[Device]) -> DeviceSet:
    """The devices' ledger, their index by uuid, their adapters and engines, kept between calls.

    Keyed by identity: an entry holds its devices (and its engines' cluster their facts), so while it
    is kept no other object can take one of their ids.  A node agent that allocates from thousands of
    devices then pays for the cluster state once, not per allocation.
    """
    generation = FACTS.value
    with _KEPT_LOCK:
        # A node agent passes the same list each time: know it again by identity, element by element,
        # without building and hashing a key of thousands of ids.
        kept = _BY_SEQUENCE.get(id(devices))
        if (
            kept is not None
            and kept.sequence is devices
            and kept.generation == generation
            and len(devices) == len(kept.devices)
            and all(map(operator.is_, devices, kept.devices))
        ):
            _KEPT.move_to_end(kept.key)
            return kept
    key = tuple(map(id, devices))
    with _KEPT_LOCK:
        kept = _KEPT.pop(key, None)
        if kept is not None and kept.generation != generation:
            if kept.facts == tuple(id(d.info) for d in devices):
                kept.generation = generation
            else:
                kept = None
        if kept is None:
            ledger = devices[0].ledger
            if any(d.ledger is not ledger for d in devices):
                raise InvalidRequest("devices", "devices must share one ledger to be allocated together")
            kept = DeviceSet(
                tuple(devices),
                tuple(id(d.info) for d in devices),
                generation,
                ledger,
                {d.uuid: d for d in devices},
                {d.info.vendor: d.adapter for d in devices},
            )
        kept.key, kept.sequence = key, devices
        _KEPT[key] = kept
        while len(_KEPT) > KEPT_DEVICE_SETS:
            _KEPT.popitem(last=False)
        _BY_SEQUENCE.clear()
        _BY_SEQUENCE.update((id(k.sequence), k) for k in _KEPT.values() if k.sequence is not None)
    return kept


def booked(kept: DeviceSet, view: LedgerView, *, note: bool = True) -> ClusterState:
    """The cluster state of the devices, in step with what the ledger holds in ``view`` right now.

    The one place a commit, and every engine of the device set, reads what the ledger holds:
    brought up to date by the ledger's change log (``following.follow_ledger``), so a commit reads
    only the allocations that changed since the last one, and nothing when the last change was its
    own.  Allocations the ledger holds past a limit are booked all the same and recorded once
    (``ledger.conflicts``; not with ``note``, in a read-only snapshot).  Call inside the transaction.
    """
    cluster = kept.cluster
    if cluster is None:
        cluster = kept.cluster = ClusterState.from_devices(kept.devices)
    kept.fetched = follow_ledger(cluster, kept.ledger, view)
    if note and cluster.conflicts:
        note_conflicts(view, cluster.conflicts)
    return cluster
