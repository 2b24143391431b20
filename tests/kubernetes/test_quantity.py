"""The quantity parser against the Quantity grammar's definitions (the Go parser itself checks it in
``tests/kubernetes/peers/test_quantity_peer.py``), and HAMi's units on top of it."""

from __future__ import annotations

from decimal import Decimal

import pytest

from hami_devices.errors import InvalidRequest
from hami_devices.kubernetes import quantity as q

# (text, value): each value worked out from the grammar's suffix table, by hand
DEFINED = [
    ("4k", 4 * 10**3),
    ("16Ki", 16 * 2**10),
    ("1e3", 10**3),
    ("1E3", 10**3),
    ("1E", 10**18),  # the decimal suffix E, not an exponent
    ("500m", Decimal("0.5")),
    ("5n", Decimal("5e-9")),
    ("7u", Decimal("7e-6")),
    ("1.5Gi", 3 * 2**29),
    ("-3M", -3 * 10**6),
    ("+2T", 2 * 10**12),
    (".5", Decimal("0.5")),
    ("5.", 5),
    ("0.1n", Decimal("1e-9")),  # finer than 1n: rounded up
    ("-0.1n", Decimal("-1e-9")),  # ... away from zero
    ("1e-12", Decimal("1e-9")),
    ("8Ei", 2**63 - 1),  # binary values are capped at 2^63-1
    ("10E", 10**19),  # decimal ones are not
    ("123456789012345678901234567890", 123456789012345678901234567890),
    ("1.5e2000000000", Decimal("1.5e2000000000")),
    ("-0435388817633982958038660.876194648E3", Decimal("-435388817633982958038660876.194648")),  # every digit
]


@pytest.mark.parametrize(("text", "value"), DEFINED)
def test_values_from_the_grammar(text: str, value: int | Decimal) -> None:
    assert q.parse_string(text) == Decimal(value)


NOT_QUANTITIES = ["", "one", "1.2.3", "1e", "1Ki5", "1KI", "1 k", "1e3m", "1ee3", "--1", "1e99999999999999999999"]


@pytest.mark.parametrize("text", NOT_QUANTITIES)
def test_not_quantities(text: str) -> None:
    with pytest.raises(q.QuantityError):
        q.parse_string(text)


def test_api_json_decoding_trims_space_and_reads_numbers() -> None:
    assert q.parse(" 4k ") == 4000  # Quantity.UnmarshalJSON trims; ParseQuantity does not
    with pytest.raises(InvalidRequest):
        q.parse("\t4k")  # the JSON text holds the escape, which UnmarshalJSON does not decode
    with pytest.raises(q.QuantityError):
        q.parse_string(" 4k")
    assert q.parse(4000) == 4000
    assert q.parse(1e20) == 10**20
    assert q.parse(0.25) == Decimal("0.25")
    for bad in (True, None, float("inf"), [1]):
        with pytest.raises(InvalidRequest, match="field-x"):
            q.parse(bad, "field-x")  # type: ignore[arg-type]


def test_device_resources_are_counts_whatever_the_suffix() -> None:
    assert q.count("4k", "nvidia.com/gpumem") == 4000
    assert q.count("16Ki", "nvidia.com/gpumem") == 16384
    assert q.count("4000") == 4000
    with pytest.raises(InvalidRequest, match="whole number"):
        q.count("1500m")
    with pytest.raises(InvalidRequest, match="negative"):
        q.count("-1")
    with pytest.raises(InvalidRequest, match="larger than"):
        q.count("1e30")


def test_bytes_become_mib_rounded_up() -> None:
    assert q.to_mib("8Gi") == 8192
    assert q.to_mib("1") == 1
    assert q.to_mib("1M") == 1  # 10^6 bytes is less than 1 MiB: never less than asked for
    assert q.to_int("1500m") == 2
