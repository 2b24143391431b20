"""Arithmetic on completion logs: rates over windows, shares of a solo speed, convergence after an arrival.

A completion log is a list of ``(t, n)`` pairs: ``n`` kernels (or tokens) had completed by host-monotonic time
``t``; the first pair is the start of the run with ``n == 0``.  Every process on a host reads the same
``CLOCK_MONOTONIC``, so logs of several processes share one time axis.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

Log = Sequence[tuple[float, int]]

SAMPLE_S = 0.1  # the arrival case samples throughput every 100 ms (issue 36) ...
WINDOW_S = 0.3  # ... each sample over the trailing 300 ms: one 4096 matmul is ~1 point of a 300 ms window


def completed_by(log: Log, t: float) -> int:
    """Kernels completed at time ``t`` (0 before the run started)."""
    i = bisect.bisect_right([p[0] for p in log], t)
    return log[i - 1][1] if i else 0


def rate(log: Log, start: float, end: float) -> float | None:
    """Completions per second over ``[start, end]``; None for an empty window or one that ends after the log's
    last completion (what came after it is unknown).  Before the log's start nothing had completed."""
    if end <= start or not log or end > log[-1][0]:
        return None
    return (completed_by(log, end) - completed_by(log, start)) / (end - start)


def whole_rate(log: Log) -> float | None:
    """Completions per second from the start of the run to its last completion."""
    return rate(log, log[0][0], log[-1][0]) if len(log) >= 2 else None


def pct(part: float | None, whole: float | None) -> float | None:
    """``part`` as a percentage of ``whole``; None when either is unknown or ``whole`` is not positive."""
    if part is None or whole is None or whole <= 0:
        return None
    return 100.0 * part / whole


def sampled_shares(logs: Sequence[Log], solo: float, arrival: float, end: float) -> list[list[float | None]]:
    """``[[t - arrival, share_0 %, share_1 %, ...], ...]`` every ``SAMPLE_S`` after ``arrival`` up to ``end``.

    Each share is the rate over the trailing ``WINDOW_S`` (clipped at ``arrival``, so a sample says what happened
    after the arrival only) as a percentage of ``solo``.
    """
    rows: list[list[float | None]] = []
    k = 1
    while arrival + k * SAMPLE_S <= end + 1e-9:
        t = arrival + k * SAMPLE_S
        start = max(arrival, t - WINDOW_S)
        rows.append([round(k * SAMPLE_S, 3), *(pct(rate(log, start, t), solo) for log in logs)])
        k += 1
    return rows


def converge_time(rows: Sequence[Sequence[float | None]], shares: Sequence[float], tolerance: float) -> float | None:
    """The first sample time from which every later sample has every tenant within ``tolerance`` points of its
    share; None when the last sample is still off (or unknown)."""
    first: float | None = None
    for row in rows:
        held = all(v is not None and abs(v - s) <= tolerance for v, s in zip(row[1:], shares, strict=True))
        if not held:
            first = None
        elif first is None:
            first = row[0]
    return first


def busy_fraction(device_s: float | None, per_s: float | None) -> float | None:
    """The share of device time a stream uses: device time per kernel times kernels per second."""
    if device_s is None or per_s is None:
        return None
    return device_s * per_s
