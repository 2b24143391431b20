"""A placement: one way to place a request, with the score breakdown that ranked it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hami_devices.models import Grant, ResourceRequest


@dataclass
class Placement:
    """One way to place a request, with why it ranks where it does."""

    request: ResourceRequest
    node: str  # the node that hosts the task (host CPU/memory)
    grants: list[Grant]
    score: float
    breakdown: dict[str, float]  # scorer -> 0..100 (device-count weighted over parts)
    weights: dict[str, float]
    policy: str
    booking_id: str | None = None

    @property
    def nodes(self) -> list[str]:
        return sorted({g.node for g in self.grants})

    def to_dict(self) -> dict[str, Any]:
        return {
            "request": self.request.name,
            "node": self.node,
            "policy": self.policy,
            "score": round(self.score, 3),
            "breakdown": {k: round(v, 3) for k, v in self.breakdown.items()},
            "weights": self.weights,
            "grants": [g.model_dump(mode="json") for g in self.grants],
            "booking_id": self.booking_id,
        }
