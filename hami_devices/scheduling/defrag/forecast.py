"""Predicted demand: the arrival mix learned over time, and the whole devices to keep free ahead of it.

Fed each arrival as it happens (``observe``), never anything later, the
forecast keeps:

* the shapes, with exponential forgetting (``OnlineMix``): the mix the
  defragmentation plans for;
* the arrival rate by hour of day (each day's count folded into a running
  mean per hour) and over the last ``recent_s`` seconds;
* the share of arrivals that take whole devices, and how many each takes.

``expected(now, horizon_s)`` blends the two rates (the hour-of-day profile for
the hours ahead once a day has been seen, the recent rate always).
``reserve`` names whole free devices to keep for the whole-device tasks
expected within the horizon, on the nodes with the most whole free devices, so
that a multi-device task still finds a node: a fractional task is placed
elsewhere when it fits elsewhere (``research.timed`` tries it without those
devices first, then with them).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from hami_devices.models import ResourceRequest
from hami_devices.scheduling.cluster import ClusterState
from hami_devices.scheduling.mix import OnlineMix

DAY = 86400.0
HOUR = 3600.0


def whole_devices(request: ResourceRequest) -> int:
    """Devices the request takes whole (cores 100)."""
    return sum(p.count for p in request.parts if p.cores >= 100)


class DemandForecast:
    def __init__(self, *, recent_s: float = 6 * HOUR, half_life: float = 2048, day_weight: float = 0.3) -> None:
        self.recent_s = recent_s
        self.day_weight = day_weight
        self.learner = OnlineMix(half_life=half_life, refresh=256)
        self._recent: deque[tuple[float, int]] = deque()  # (time, whole devices taken)
        self._hourly = np.zeros(24)  # mean arrivals per hour of day
        self._whole_per_arrival = 0.0  # running mean, forgetting like the mix
        self._day: int | None = None
        self._today = np.zeros(24)
        self.days = 0

    def observe(self, request: ResourceRequest, now: float) -> None:
        day = int(now // DAY)
        if self._day is None:
            self._day = day
        while self._day < day:  # fold the finished day into the hourly profile
            self._hourly = self._today.copy() if self.days == 0 else (
                (1 - self.day_weight) * self._hourly + self.day_weight * self._today
            )
            self._today[:] = 0
            self._day += 1
            self.days += 1
        self._today[int(now % DAY // HOUR)] += 1
        whole = whole_devices(request)
        self._recent.append((now, whole))
        self._whole_per_arrival += (whole - self._whole_per_arrival) / min(self.learner.seen + 1, 512)
        self.learner.observe(request)

    def _trim(self, now: float) -> None:
        while self._recent and self._recent[0][0] < now - self.recent_s:
            self._recent.popleft()

    def rate(self, now: float) -> float:
        """Arrivals per second over the last ``recent_s``."""
        self._trim(now)
        return len(self._recent) / self.recent_s

    def expected(self, now: float, horizon_s: float) -> float:
        """Arrivals expected within ``[now, now + horizon_s)``."""
        recent = self.rate(now) * horizon_s
        if self.days == 0:
            return recent
        hours = np.arange(now, now + horizon_s, HOUR)
        profile = float(sum(self._hourly[int(t % DAY // HOUR)] for t in hours)) * horizon_s / (len(hours) * HOUR)
        return 0.5 * (recent + profile)

    def whole_expected(self, now: float, horizon_s: float) -> float:
        """Whole devices the arrivals expected within the horizon will take."""
        self._trim(now)
        if self._recent:
            recent_share = sum(w for _, w in self._recent) / len(self._recent)
            per_arrival = 0.5 * (recent_share + self._whole_per_arrival)
        else:
            per_arrival = self._whole_per_arrival
        return self.expected(now, horizon_s) * per_arrival

    def reserve(self, cluster: ClusterState, now: float, horizon_s: float) -> list[str]:
        """Whole free devices to keep for the whole-device arrivals expected within ``horizon_s``."""
        want = math.ceil(self.whole_expected(now, horizon_s) - 1e-9)
        if want <= 0:
            return []
        by_node: list[tuple[int, str, list[int]]] = []
        for name, node in cluster.nodes.items():
            free = [r for r in node.devices if cluster.sharers[r] == 0 and cluster.healthy[r]]
            if free:
                by_node.append((-len(free), name, free))
        by_node.sort()
        out: list[str] = []
        for _, _, rows in by_node:
            for r in rows:
                if len(out) >= want:
                    return out
                out.append(cluster.info(r).uuid)
        return out
