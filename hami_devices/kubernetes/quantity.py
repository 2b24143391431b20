"""Kubernetes resource quantities <-> the SDK's units (MiB ints, percent ints).

Parsing is the official client's (``kubernetes.utils.quantity``), so suffixes,
exponents and decimal forms mean exactly what the API server means by them.
"""

from __future__ import annotations

import math
from decimal import Decimal

from hami_devices.errors import InvalidRequest

MIB = 1024 * 1024


def parse(value: str | int | float, field: str = "quantity") -> Decimal:
    """A quantity as an exact Decimal; ``InvalidRequest`` naming ``field`` when it is not one."""
    from kubernetes.utils.quantity import parse_quantity

    try:
        return Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise InvalidRequest(field, f"not a Kubernetes quantity: {value!r} ({exc})") from None


def to_mib(value: str | int | float, field: str = "quantity") -> int:
    """Bytes as a quantity -> whole MiB, rounded up (a request never gets less than it asked for)."""
    amount = parse(value, field)
    if amount < 0:
        raise InvalidRequest(field, f"must not be negative: {value!r}")
    return math.ceil(amount / MIB)


def to_int(value: str | int | float, field: str = "quantity") -> int:
    """A plain count (cores percent), rounded up."""
    amount = parse(value, field)
    if amount < 0:
        raise InvalidRequest(field, f"must not be negative: {value!r}")
    return math.ceil(amount)


def mib(value: int) -> str:
    """MiB as a canonical quantity string (``16384Mi``)."""
    return f"{int(value)}Mi"


def count(value: int) -> str:
    return str(int(value))
