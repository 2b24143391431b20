"""The implementations of the catalog's checks, registered by id.

Each check is a function of a fresh :class:`~hami_conformance.bench.Bench`.  It
fails by raising ``CheckFailed`` (see ``expect``), declines by raising
``NotApplicable`` with the reason (a failure when the check's capability is
declared; ``ConfiguredOff`` when the configuration switched the feature off),
and passes by returning.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar

from hami_conformance.bench import Bench

CheckFn = Callable[[Bench], None]
F = TypeVar("F", bound=CheckFn)

IMPLEMENTATIONS: dict[str, CheckFn] = {}

MODULES = (
    "identity",
    "allocation",
    "release",
    "orders",
    "restart",
    "monitoring",
    "perdevice",
    "environment",
    "concurrency",
    "verbs",
    "stateful",
    "badinput",
    "partitions",
    "dimensions",
    "limiter",
    "faults",
)


def check(check_id: str) -> Callable[[F], F]:
    def register(fn: F) -> F:
        known = IMPLEMENTATIONS.get(check_id)
        # The same function coming back is a re-import (pytester's in-process runs
        # restore sys.modules between runs); only a different one is a clash.
        if known is not None and (known.__module__, known.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"check {check_id!r} is implemented twice")
        IMPLEMENTATIONS[check_id] = fn
        return fn

    return register


def load_all() -> dict[str, CheckFn]:
    for name in MODULES:
        importlib.import_module(f"hami_conformance.checks.{name}")
    return IMPLEMENTATIONS
