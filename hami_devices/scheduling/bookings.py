"""What one placement holds in a cluster state (a booking), and whose limit a ledger row is blamed for."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from hami_devices.errors import ReasonCode
from hami_devices.models import Grant, ResourceRequest

__all__ = ["Booking", "PlacementState", "takes_none"]

_AMOUNT_OF = {ReasonCode.CARD_INSUFFICIENT_MEMORY: "memory_mib", ReasonCode.CARD_INSUFFICIENT_CORE: "cores"}


def takes_none(grant: Grant, code: ReasonCode) -> bool:
    """Whether ``grant`` takes none of the amount ``code`` limits (then it is not what broke it)."""
    amount = _AMOUNT_OF.get(code)
    return amount is not None and getattr(grant, amount) == 0


class PlacementState(StrEnum):
    ASSUMED = "assumed"
    CONFIRMED = "confirmed"


@dataclass
class Booking:
    """What one placement holds in the cluster (the engine's ``Placement`` carries the why).

    ``node`` hosts the task; ``host_nodes`` are every node charged the host CPU and
    memory, once each (a placement split over nodes runs a process on each).
    """

    id: str
    node: str
    grants: list[Grant]
    host_cpu_milli: int
    host_memory_mib: int
    preemptible: bool
    state: PlacementState
    request: ResourceRequest | None = None
    host_nodes: tuple[str, ...] = ()

    @classmethod
    def confirmed(
        cls, id: str, node: str, grants: list[Grant], request: ResourceRequest, host_nodes: tuple[str, ...]
    ) -> Booking:
        """What an allocation of the ledger holds: its request's host charge on each of ``host_nodes``."""
        return cls(id, node, grants, request.host_cpu_milli, request.host_memory_mib, request.preemptible,
                   PlacementState.CONFIRMED, request, host_nodes)
