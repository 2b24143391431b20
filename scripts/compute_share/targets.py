"""The targets of issue 36 item 4, judged on measured figures: ``name -> {value, bound, op, met}``.

``op`` says how ``value`` is judged against ``bound``: ``">="``, ``"<="`` or ``"in"`` (``bound`` is then
``[low, high]``).  A value or bound that could not be measured is ``None`` and the target is not met.
Values and bounds are rounded before they are judged, so the JSON judges itself.
"""

from __future__ import annotations

from typing import Any

Target = dict[str, Any]


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def at_least(value: float | None, bound: float | None) -> Target:
    v, b = _r(value), _r(bound)
    return {"value": v, "bound": b, "op": ">=", "met": v is not None and b is not None and v >= b}


def at_most(value: float | None, bound: float | None) -> Target:
    v, b = _r(value), _r(bound)
    return {"value": v, "bound": b, "op": "<=", "met": v is not None and b is not None and v <= b}


def within(value: float | None, low: float, high: float) -> Target:
    v = _r(value)
    return {"value": v, "bound": [low, high], "op": "in", "met": v is not None and low <= v <= high}


def cap_throughput_floor(limit_pct: float, busy: float | None) -> float | None:
    """Issue 36: a stream alone under a cap of L % keeps at least min(1, L / B) of its bare speed, less 5 points,
    where B is the share of device time it uses at bare (so launch-bound work below L % is not slowed)."""
    if busy is None:
        return None
    keep = 1.0 if busy <= 0 else min(1.0, (limit_pct / 100.0) / busy)
    return 100.0 * keep - 5.0
