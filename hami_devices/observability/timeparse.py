"""Times on the command line: ISO 8601, Unix seconds, ``now``, or an age such as ``90s``, ``15m``, ``2h``, ``7d``."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from hami_devices.errors import InvalidRequest

_AGE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(text: str, field: str, *, now: float | None = None) -> float:
    """Unix time of ``text``; an age counts back from ``now``.  A naive ISO time is taken as UTC."""
    value = text.strip()
    current = time.time() if now is None else now
    if value == "now":
        return current
    age = _AGE.match(value)
    if age:
        return current - float(age.group(1)) * _UNIT_S[age.group(2)]
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(
            field, f"{text!r} is not a time: use ISO 8601 (2024-05-01T12:00:00Z), Unix seconds, now, or 15m/2h/7d ago"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
