"""A queue's run-time switches: its ``state`` and ``stop-policy``, its own or an ancestor's.

``state``: ``open`` takes and admits tasks, ``draining`` admits those waiting but takes no new one,
``closed`` does neither.  ``stop-policy``: ``hold`` admits none of those waiting, ``hold-and-drain``
also evicts those running.  They start as the queue file says and change while the loop runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hami_devices.errors import InvalidRequest

if TYPE_CHECKING:  # the tree owns the switches; they read its nodes
    from hami_devices.queueing.tree import QueueNode

STATES = ("open", "closed", "draining")
STOP_POLICIES = ("none", "hold", "hold-and-drain")


class QueueSwitches:
    def __init__(self, nodes: Sequence[QueueNode], by_name: Mapping[str, QueueNode]) -> None:
        self.nodes = nodes
        self.by_name = by_name
        self.state: list[str] = [n.spec.state for n in nodes]
        self.stop_policy: list[str] = [n.spec.stop_policy for n in nodes]

    def set(self, name: str, state: str | None = None, stop_policy: str | None = None) -> None:
        """Change a queue's ``state`` and/or ``stop-policy`` at run time (checked as the queue file checks them)."""
        q = self.by_name.get(name)
        if q is None:
            raise InvalidRequest("queue", f"unknown queue {name!r}")
        if state is not None:
            if state not in STATES:
                raise InvalidRequest("state", f"{state!r} is not open, closed or draining")
            self.state[q.index] = state
        if stop_policy is not None:
            if stop_policy not in STOP_POLICIES:
                raise InvalidRequest("stop-policy", f"{stop_policy!r} is not none, hold or hold-and-drain")
            self.stop_policy[q.index] = stop_policy

    def refuses(self, leaf: int) -> str | None:
        """Why the leaf takes no new task (a queue on its path is closed or draining), or None."""
        for q in self.nodes[leaf].path:
            if self.state[q] != "open":
                return f"queue {self.nodes[q].name} is {self.state[q]}: it takes no new tasks"
        return None

    def held(self, leaf: int) -> tuple[str, str] | None:
        """(wait reason, why) when the leaf admits none of its waiting tasks now, else None."""
        for q in self.nodes[leaf].path:
            name = self.nodes[q].name
            if self.state[q] == "closed":
                return "queue-closed", f"queue {name} is closed"
            if self.stop_policy[q] != "none":
                return "queue-held", f"queue {name} has stop-policy {self.stop_policy[q]}"
        return None

    def drains(self, leaf: int) -> bool:
        """Whether the leaf's running tasks are to be evicted (``stop-policy: hold-and-drain`` on its path)."""
        return any(self.stop_policy[q] == "hold-and-drain" for q in self.nodes[leaf].path)
