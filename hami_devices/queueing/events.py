"""What the admission loop decided, as events a caller can subscribe to or iterate over."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EventKind(StrEnum):
    SUBMITTED = "submitted"
    ADMITTED = "admitted"
    WAITING = "waiting"
    EVICTED = "evicted"
    REQUEUED = "requeued"
    FINISHED = "finished"
    CANCELLED = "cancelled"


class EvictionReason(StrEnum):
    RECLAIM = "reclaim"  # a queue takes back its guarantee from a borrower
    PRIORITY = "priority"  # a higher-priority task of the same queue
    FAIR_SHARE = "fair-share"  # a queue below its weighted share of idle capacity
    BORROW_WITHIN_COHORT = "borrow-within-cohort"  # a higher-priority borrower takes another queue's borrowed room
    STOP_POLICY = "stop-policy"  # the queue's stop-policy is hold-and-drain


class WaitReason(StrEnum):
    QUEUE_LIMIT = "queue-limit"
    LENDING_LIMIT = "lending-limit"
    GUARANTEES_RESERVED = "guarantees-reserved"  # not interruptible: may borrow only what nobody is guaranteed
    NO_CAPACITY = "no-capacity"  # does not fit now, and no eviction is allowed or would help
    STRICT_FIFO = "strict-fifo"  # behind an earlier task of a strict-FIFO queue
    QUEUE_CLOSED = "queue-closed"  # its queue (or one above) is closed
    QUEUE_HELD = "queue-held"  # its queue (or one above) has a stop-policy


@dataclass(frozen=True)
class Event:
    kind: EventKind
    time: float
    task: str
    queue: str
    reason: str | None = None  # EvictionReason / WaitReason value, or "borrowing" / "guaranteed" for admissions
    detail: str | None = None  # the readable why
    by: str | None = None  # evictions: the task they make room for
    nodes: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": str(self.kind), "time": self.time, "task": self.task, "queue": self.queue}
        for key in ("reason", "detail", "by"):
            value = getattr(self, key)
            if value is not None:
                out[key] = str(value)
        if self.nodes:
            out["nodes"] = list(self.nodes)
        if self.data:
            out.update(self.data)
        return out

    def __str__(self) -> str:
        text = f"t={self.time:g} {self.kind} {self.queue}/{self.task}"
        if self.reason:
            text += f" [{self.reason}]"
        if self.by:
            text += f" for {self.by}"
        if self.detail:
            text += f": {self.detail}"
        return text


Listener = Callable[[Event], None]


class EventBus:
    """Callbacks run as each event happens; the iterator yields what was not yet drained."""

    def __init__(self, keep: int | None = 100_000) -> None:
        self._listeners: list[Listener] = []
        self._buffer: deque[Event] = deque(maxlen=keep)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def emit(self, event: Event) -> None:
        self._buffer.append(event)
        for listener in list(self._listeners):
            listener(event)

    def drain(self) -> Iterator[Event]:
        while self._buffer:
            yield self._buffer.popleft()
