"""Kubernetes resource quantities, read exactly as ``k8s.io/apimachinery``'s ``resource.Quantity`` reads them,
and the SDK's units on top.  The one parser of the extender, DRA and the CLI.

The grammar (``resource.Quantity``'s documentation)::

    <quantity>        ::= <signedNumber><suffix>
    <signedNumber>    ::= <number> | <sign><number>
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <sign>            ::= "+" | "-"
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>    (an integer exponent)

and what the Go parser does beyond it, which the peer tests hold this module to:

- the digits may be absent (``"-"``, ``"."``, ``"Ki"`` are zero) except where the value needs
  arbitrary precision (more than 18 digits, a binary suffix with a fraction, or an exponent below
  -9), where a number without any digit is an error;
- a value finer than 1n (10^-9) is rounded up, away from zero (``0.1n`` is ``1n``);
- a binary-suffixed value larger than 2^63-1 is capped at 2^63-1; a decimal one is not capped;
- exponents are 32-bit: ``ParseInt`` of the exponent must fit 64 bits and is then truncated to
  32, and the scale arithmetic wraps at 32 bits, as Go's does.

``parse`` reads a field of an API object as the API server decodes JSON
(``Quantity.UnmarshalJSON``: a string with surrounding spaces trimmed, or a JSON number);
``parse_string`` is ``resource.ParseQuantity`` itself (CEL's ``quantity()``).

Units on top (HAMi's): a device resource such as ``nvidia.com/gpumem`` is a *count* (of MiB, of
256 MiB units, of percent), whatever suffix carries it: the Go client writes 4000 as ``"4k"``,
and ``"4k"`` is 4000 MiB (``count``).  Only resources that are bytes (a container's ``memory``, DRA
``memory`` capacity) are bytes (``to_mib``).
"""

from __future__ import annotations

import json
import math
import re
from decimal import ROUND_UP, Context, Decimal

from hami_devices.errors import InvalidRequest

MIB = 1024 * 1024
INT64_MAX = (1 << 63) - 1
NANO = Decimal("1e-9")

_NUMBER = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?")
_SUFFIX = re.compile(r"[eEinumkKMGTP]*[+-]?[0-9]*")
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_GO_INT = re.compile(r"[+-]?[0-9]+")
_EMAX = 999_999_999_999_999_999  # Decimal's widest exponent range: Go's exponents are 32-bit


class QuantityError(ValueError):
    """Not a quantity; the message says which part of it is wrong (as Go's ErrFormatWrong, ErrSuffix ...)."""


def _int32(value: int) -> int:
    return (value + (1 << 31)) % (1 << 32) - (1 << 31)


def _suffix(text: str) -> tuple[int, bool]:
    """(exponent, binary) of a suffix, as quantitySuffixer.interpret reads it: 10^exponent, or 2^exponent."""
    if text in _DECIMAL_SI:
        return _DECIMAL_SI[text], False
    if text in _BINARY_SI:
        return _BINARY_SI[text], True
    if len(text) > 1 and text[0] in "eE" and _GO_INT.fullmatch(text[1:]):
        exponent = int(text[1:])
        if -(1 << 63) <= exponent <= INT64_MAX:
            return _int32(exponent), False
    raise QuantityError(f"unable to parse quantity's suffix {text!r}")


def parse_string(text: str) -> Decimal:
    """``resource.ParseQuantity(text)``'s exact value; ``QuantityError`` where it returns an error."""
    if not text:
        raise QuantityError("quantities must match the regular expression (empty)")
    number = _NUMBER.match(text)
    assert number is not None  # every part of the pattern may be empty
    sign, whole, fraction = number.group(1), number.group(2), number.group(3) or ""
    rest = text[number.end():]
    if not _SUFFIX.fullmatch(rest):
        raise QuantityError(f"quantities must match the regular expression: {text!r}")
    exponent, binary = _suffix(rest)
    context = Context(prec=len(whole) + len(fraction) + 40, Emax=_EMAX, Emin=-_EMAX)
    magnitude = _fast(whole.lstrip("0") or "0", fraction, exponent, binary, context)
    if magnitude is None:
        magnitude = _arbitrary(whole, fraction, exponent, binary, context)
    return magnitude.copy_negate() if sign == "-" else magnitude  # exact: no context rounding


def _fast(digits: str, fraction: str, exponent: int, binary: bool, context: Context) -> Decimal | None:
    """Go's 64-bit path (exact: no rounding, no cap), or None where Go leaves it for arbitrary precision."""
    if binary:
        if fraction or 15 - len(digits) - int(exponent * 3 / 10) - 1 < 0:
            return None
        value = int(digits) << exponent
        return Decimal(value) if value <= INT64_MAX else None
    scale = _int32(exponent - len(fraction))
    if 18 - (len(digits) + len(fraction)) < 0 or scale < -9:
        return None
    return Decimal(int(digits + fraction)).scaleb(scale, context)


def _arbitrary(whole: str, fraction: str, exponent: int, binary: bool, context: Context) -> Decimal:
    """Go's inf.Dec path: any precision, rounded up to 1n, binary values capped at 2^63-1."""
    if not (whole or fraction):  # inf.Dec reads at least one digit
        raise QuantityError("unable to parse numeric part of quantity")
    magnitude = int((whole or "0") + fraction)
    if binary:
        amount = Decimal(magnitude << exponent).scaleb(-len(fraction), context)
    else:  # inf.Dec's scale is 32 bits, and so is the arithmetic on it
        amount = Decimal(magnitude).scaleb(-_int32(len(fraction) + _int32(-exponent)), context)
    places = amount.as_tuple().exponent
    if amount and isinstance(places, int) and places < -9:
        amount = amount.quantize(NANO, rounding=ROUND_UP, context=context)
    if binary and amount > INT64_MAX:
        amount = Decimal(INT64_MAX)
    return amount


def parse(value: str | int | float, field: str = "quantity") -> Decimal:
    """A quantity field's exact value, as the API server decodes it; ``InvalidRequest`` naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidRequest(field, f"not a Kubernetes quantity: {value!r} (a string or a number)")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRequest(field, f"not a Kubernetes quantity: {value!r}")
        text = json.dumps(value)  # the JSON number the API server would be sent
    elif isinstance(value, int):
        text = str(value)
    else:
        # UnmarshalJSON trims the raw JSON text between the quotes, escapes undecoded: of the white space
        # strings.TrimSpace knows, only the plain space stands unescaped in a JSON string ("\t4k" is no quantity)
        text = value.strip(" ")
    try:
        return parse_string(text)
    except QuantityError as exc:
        raise InvalidRequest(field, f"not a Kubernetes quantity: {value!r} ({exc})") from None


def _bounded(amount: Decimal, value: object, field: str) -> Decimal:
    if amount < 0:
        raise InvalidRequest(field, f"must not be negative: {value!r}")
    if amount > INT64_MAX:
        raise InvalidRequest(field, f"{value!r} is larger than Kubernetes counts (2^63-1)")
    return amount


def to_mib(value: str | int | float, field: str = "quantity") -> int:
    """A quantity of bytes (``memory``) -> whole MiB, rounded up (a request never gets less than it asked for)."""
    return math.ceil(_bounded(parse(value, field), value, field) / MIB)


def to_int(value: str | int | float, field: str = "quantity") -> int:
    """A plain amount rounded up to a whole number (``cpu`` in cores, DRA ``cores``)."""
    return math.ceil(_bounded(parse(value, field), value, field))


def count(value: str | int | float, field: str = "quantity") -> int:
    """A count of the resource's own unit, whatever suffix carries it (``nvidia.com/gpumem: 4k`` = 4000 MiB).

    Kubernetes takes only whole numbers for extended resources, so a fraction is refused too.
    """
    amount = _bounded(parse(value, field), value, field)
    if amount != amount.to_integral_value():
        raise InvalidRequest(field, f"must be a whole number, got {value!r}")
    return int(amount)


def mib(value: int) -> str:
    """MiB as a quantity string of bytes (``16384Mi``)."""
    return f"{int(value)}Mi"


def plain(value: int) -> str:
    """A whole number as a quantity string."""
    return str(int(value))
