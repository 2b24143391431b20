"""How many moves a defragmentation round may make: per hour, as a share of the running tasks.

A move disturbs a running task (a checkpoint and restore at best, a restart
at worst), so an operator bounds them: within any hour of (simulated or real)
time at most ``share_per_hour`` of the tasks running, and at most
``max_per_hour``.  ``allowed`` answers for now; ``spend`` records the moves
made; ``within`` says whether every round kept to the budget.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from hami_devices.errors import InvalidConfig

HOUR = 3600.0


@dataclass
class MoveBudget:
    share_per_hour: float = 0.05
    max_per_hour: int | None = None
    window_s: float = HOUR
    _made: deque[tuple[float, int]] = field(default_factory=deque, repr=False)
    worst_share: float = 0.0  # the most moves in a trailing window over the running tasks then

    def __post_init__(self) -> None:
        if not 0.0 <= self.share_per_hour <= 1.0:
            raise InvalidConfig("share_per_hour", f"must be within 0..1, not {self.share_per_hour}")
        if self.max_per_hour is not None and self.max_per_hour < 0:
            raise InvalidConfig("max_per_hour", f"must be >= 0, not {self.max_per_hour}")
        if self.window_s <= 0:
            raise InvalidConfig("window_s", "must be > 0")

    def _recent(self, now: float) -> int:
        while self._made and self._made[0][0] <= now - self.window_s:
            self._made.popleft()
        return sum(n for _, n in self._made)

    def cap(self, running: int) -> int:
        cap = math.floor(self.share_per_hour * running * self.window_s / HOUR)
        return cap if self.max_per_hour is None else min(cap, self.max_per_hour)

    def allowed(self, now: float, running: int) -> int:
        """Moves a round may make now, with ``running`` tasks running."""
        return max(0, self.cap(running) - self._recent(now))

    def spend(self, now: float, moves: int, running: int) -> None:
        if moves <= 0:
            return
        self._made.append((now, moves))
        recent = self._recent(now)
        self.worst_share = max(self.worst_share, recent / max(running, 1) * HOUR / self.window_s)

    def within(self) -> bool:
        return self.worst_share <= self.share_per_hour + 1e-12
