"""How a pool's devices and counter sets are cut into ResourceSlices, by the rules of the API release served.

- ``"1.34"``: a device may only consume a counter set of its own slice, so a card, its
  counter set and its partitions share a slice, one card a slice (``pack_together``), each
  within the per-slice limits (128 devices, 32 shared counters, 1024 counter consumptions).
- ``"1.35"`` (and newer): a slice holds devices *or* counter sets, never both
  (``only one of sharedCounters or devices is allowed``); a device consumes a set
  published in any slice of its pool.  Counter sets are packed 8 to a slice (32 counters
  each at most), devices 64 to a slice where any consumes counters (else 128).  A card
  with partitions also consumes its whole counter set, booked once while any share of it
  lives: the API has no way to say that a share's capacity and the partitions' counters
  come out of the same memory, so a card is either shared or partitioned, for Kubernetes
  and for our DRA allocator alike (even where the vendor could do both, as vNPU and sMLU
  instances).  1.34's allocator cannot share a device that consumes counters
  (kubernetes#134100), so under 1.34 rules the card consumes none: Kubernetes 1.34 may
  then grant a share and a partition of one card together, which our allocator refuses.

Either way a pool's slices list their count in ``resourceSliceCount``; a consumer waits
until it sees them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hami_devices.errors import InvalidRequest

if TYPE_CHECKING:
    from hami_devices.kubernetes.dra.slices import CardUnit

KUBERNETES_RELEASES = ("1.34", "1.35")
"""The slice rules we publish for: 1.34's, and those of 1.35 and later releases."""
DEFAULT_RELEASE = "1.35"

MAX_DEVICES = 128
MAX_COUNTERS = 32  # 1.34: shared counters per slice, summed over its sets
MAX_CONSUMPTIONS = 1024
MAX_DEVICES_CONSUMING = 64  # 1.35+: devices per slice where one consumes counters
MAX_COUNTER_SETS = 8  # 1.35+: counter sets per slice
MAX_COUNTERS_PER_SET = 32


@dataclass
class SliceContent:
    """What one ResourceSlice carries: devices (API JSON) and/or counter sets (API JSON)."""

    devices: list[dict[str, Any]] = field(default_factory=list)
    counter_sets: list[dict[str, Any]] = field(default_factory=list)


def release(value: str | None) -> str:
    """A Kubernetes release as the slice rules it selects (``"1.36"`` -> ``"1.35"``); InvalidRequest otherwise."""
    text = (value or DEFAULT_RELEASE).strip().lstrip("v")
    parts = text.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]) or (int(parts[0]), int(parts[1])) < (1, 34):
        raise InvalidRequest("kubernetes", f"a Kubernetes release 1.34 or newer, e.g. 1.34 or 1.35; got {value!r}")
    return "1.34" if (int(parts[0]), int(parts[1])) == (1, 34) else "1.35"


def pack(units: Sequence[CardUnit], kubernetes: str = DEFAULT_RELEASE) -> list[SliceContent]:
    """The slices of one pool, under the rules of ``kubernetes`` (see ``release``)."""
    if release(kubernetes) == "1.34":
        return [_together(group) for group in pack_together(units)] or [SliceContent()]
    return _apart(units)


def pack_together(units: Sequence[CardUnit]) -> list[list[CardUnit]]:
    """1.34: one card a slice, with its counter set and partitions, within the limits.

    One card, not as many as fit: 1.34's allocator checks a share's capacity against the
    slice's first device (kubernetes#133705), so a share of any later card of a slice is
    judged by the wrong card's capacity (the mixed-tier example is refused)."""
    for unit in units:
        n, c, k = len(unit.devices), len(unit.counters), unit.consumptions
        if n > MAX_DEVICES or c > MAX_COUNTERS or k > MAX_CONSUMPTIONS:
            raise InvalidRequest("devices", f"card {unit.devices[0].name} alone exceeds the ResourceSlice limits")
    return [[unit] for unit in units]


def _together(group: Sequence[CardUnit]) -> SliceContent:
    return SliceContent(
        devices=[d.to_api() for unit in group for d in unit.devices],
        counter_sets=[u.counter_set_api() for u in group if u.counter_set is not None],
    )


def _apart(units: Sequence[CardUnit]) -> list[SliceContent]:
    """1.35+: the counter sets in slices of their own, then the devices, each within its limits."""
    out: list[SliceContent] = []
    sets = [u.counter_set_api() for u in units if u.counter_set is not None]
    for unit in units:
        if len(unit.counters) > MAX_COUNTERS_PER_SET:
            raise InvalidRequest("sharedCounters", f"card {unit.devices[0].name} has more than "
                                 f"{MAX_COUNTERS_PER_SET} counters")
    for start in range(0, len(sets), MAX_COUNTER_SETS):
        out.append(SliceContent(counter_sets=sets[start:start + MAX_COUNTER_SETS]))
    devices = [api for unit in units for api in _card_devices(unit)]
    limit = MAX_DEVICES_CONSUMING if any("consumesCounters" in d for d in devices) else MAX_DEVICES
    for start in range(0, len(devices), limit):
        out.append(SliceContent(devices=devices[start:start + limit]))
    return out or [SliceContent()]


def _card_devices(unit: CardUnit) -> list[dict[str, Any]]:
    """A card's devices, the card itself consuming its whole counter set (see the module's docstring)."""
    out = [d.to_api() for d in unit.devices]
    if unit.counter_set is not None:
        out[0]["consumesCounters"] = [{"counterSet": unit.counter_set,
                                       "counters": unit.counter_set_api()["counters"]}]
    return out
