"""CEL device selectors with the Kubernetes DRA environment.

The library is ``common-expression-language`` (Python bindings of the cel-rust
interpreter): a maintained, wheel-installed CEL whose per-evaluation cost (a few
microseconds on a prepared context) keeps a claim's selectors over a thousand
devices within the allocation budget; the pure-Python ``cel-python`` measured
about 1.5 ms per evaluation here.

The environment is Kubernetes': one variable ``device`` with ``driver``,
``attributes[domain].name``, ``capacity[domain].name`` and ``allowMultipleAllocations``;
quantities (``quantity("1Gi")``, ``isQuantity``, ``compareTo``, ``isGreaterThan``,
``isLessThan``, ``add``, ``sub``, ``asInteger``, ``asApproximateFloat``, ``sign``,
``isInteger``) and semantic versions (``semver("1.2.3")``, ``isSemver``, ``major``,
``minor``, ``patch`` and the same comparisons), plus the ASCII case helpers of
Kubernetes' string library.  Quantities and versions travel through CEL as one-key
maps in canonical form, so ``==`` compares them by value.

Each expression is compiled once (cached); each device's context is built once, when
the allocator reads the slices (``SelectorEnv.prepare``); and since a device's
attributes do not change within a pool generation, each (expression, device) result
is remembered.  As in Kubernetes, a result that is not a
boolean, or an evaluation error on a device under consideration, aborts the claim's
allocation: ``SelectorError`` names the claim, the request and the expression.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.kubernetes import quantity as q
from hami_devices.kubernetes.dra.attributes import Attributes, Version

QUANTITY = "__quantity__"
SEMVER = "__semver__"


class SelectorError(InvalidRequest):
    """A CEL selector that does not compile, fails on a device, or does not give a boolean."""

    def __init__(self, claim: str, request: str, expression: str, message: str) -> None:
        self.claim = claim
        self.request = request
        self.expression = expression
        super().__init__(f"claim {claim}, request {request}: selector {expression!r}", message)


# ------------------------------------------------------------------ values
def quantity_value(amount: Decimal) -> dict[str, str]:
    return {QUANTITY: format(amount.normalize(), "f")}


def _semver_parts(text: str) -> tuple[int, int, int]:
    core = text.split("+", 1)[0].split("-", 1)[0]
    parts = core.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a semantic version: {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def _decimal(value: Any) -> Decimal:
    if isinstance(value, dict) and QUANTITY in value:
        return Decimal(value[QUANTITY])
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Decimal(value)
    raise ValueError(f"not a quantity: {value!r}")


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        if QUANTITY in value:
            return QUANTITY
        if SEMVER in value:
            return SEMVER
    raise ValueError(f"expected a quantity or a semver, got {value!r}")


def _compare(a: Any, b: Any) -> int:
    kind = _kind(a)
    if kind != _kind(b):
        raise ValueError("compareTo between a quantity and a semver")
    if kind == QUANTITY:
        x, y = _decimal(a), _decimal(b)
    else:
        x, y = _semver_parts(a[SEMVER]), _semver_parts(b[SEMVER])  # type: ignore[assignment]
    return (x > y) - (x < y)


def _quantity(text: str) -> dict[str, str]:
    try:  # Kubernetes' CEL library calls resource.ParseQuantity: no trimming, strings only
        return quantity_value(q.parse_string(text))
    except q.QuantityError as exc:
        raise InvalidRequest("quantity()", f"not a Kubernetes quantity: {text!r} ({exc})") from None


def _is_quantity(text: str) -> bool:
    try:
        q.parse_string(text)
    except q.QuantityError:
        return False
    return True


def _semver(text: str) -> dict[str, str]:
    _semver_parts(text)
    return {SEMVER: text}


def _is_semver(text: str) -> bool:
    try:
        _semver_parts(text)
    except ValueError:
        return False
    return True


def _arith(sign: int) -> Callable[[Any, Any], dict[str, str]]:
    def op(a: Any, b: Any) -> dict[str, str]:
        return quantity_value(_decimal(a) + sign * _decimal(b))

    return op


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "add": _arith(1),
    "sub": _arith(-1),
    "asInteger": lambda a: int(_decimal(a)),
    "asApproximateFloat": lambda a: float(_decimal(a)),
    "sign": lambda a: (_decimal(a) > 0) - (_decimal(a) < 0),
    "isInteger": lambda a: _decimal(a) == _decimal(a).to_integral_value(),
    "major": lambda v: _semver_parts(v[SEMVER])[0],
    "minor": lambda v: _semver_parts(v[SEMVER])[1],
    "patch": lambda v: _semver_parts(v[SEMVER])[2],
    "lowerAscii": lambda s: s.lower() if s.isascii() else "".join(c.lower() if c.isascii() else c for c in s),
    "upperAscii": lambda s: s.upper() if s.isascii() else "".join(c.upper() if c.isascii() else c for c in s),
}


# ------------------------------------------------------------------ devices
def device_variable(
    driver: str,
    attributes: Attributes,
    capacity: dict[str, dict[str, Decimal]],
    allow_multiple: bool,
    domains: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``device`` variable of one device; every domain in ``domains`` is present (empty if the device has none),
    so ``"name" in device.attributes[d]`` works on devices of other drivers."""
    attrs: dict[str, dict[str, Any]] = {d: {} for d in domains}
    for domain, values in attributes.items():
        attrs.setdefault(domain, {}).update(
            {k: ({SEMVER: v.text} if isinstance(v, Version) else v) for k, v in values.items()}
        )
    caps: dict[str, dict[str, Any]] = {d: {} for d in domains}
    for domain, amounts in capacity.items():
        caps.setdefault(domain, {}).update({k: quantity_value(v) for k, v in amounts.items()})
    return {"driver": driver, "attributes": attrs, "capacity": caps, "allowMultipleAllocations": allow_multiple}


@lru_cache(maxsize=4096)
def compile_expression(expression: str) -> Any:
    """The compiled program (cached per expression); ``ValueError`` with the parser's message."""
    import cel

    return cel.compile(expression)


class SelectorEnv:
    """Selectors over a fixed list of devices, each result computed once."""

    def __init__(self, variables: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
        self._variables = list(variables)
        self._names = list(names)
        self._contexts: list[Any] = [None] * len(self._variables)
        self._results: dict[str, dict[int, bool | str]] = {}
        self._lock = threading.Lock()  # cel.Context is not thread-safe

    def prepare(self) -> None:
        """Build every device's context now (a tenth of a millisecond each), not inside the first claims:
        the first selector evaluated runs on every device of the driver anyway."""
        with self._lock:
            for i in range(len(self._variables)):
                self._context(i)

    def _context(self, i: int) -> Any:
        ctx = self._contexts[i]
        if ctx is None:
            import cel

            ctx = cel.Context()
            for name, fn in FUNCTIONS.items():
                ctx.add_function(name, fn)
            ctx.add_variable("device", self._variables[i])
            self._contexts[i] = ctx
        return ctx

    def check(self, expression: str, claim: str, request: str) -> Any:
        try:
            return compile_expression(expression)
        except (ValueError, RuntimeError) as exc:
            raise SelectorError(claim, request, expression, f"does not compile: {exc}") from None

    def select(self, expression: str, rows: Sequence[int], claim: str, request: str) -> list[int]:
        """The rows (of ``rows``) the expression selects; ``SelectorError`` at the first failing device."""
        program = self.check(expression, claim, request)
        with self._lock:
            known = self._results.setdefault(expression, {})
            out = []
            for i in rows:
                result = known.get(i)
                if result is None:
                    result = self._evaluate(program, i)
                    known[i] = result
                if isinstance(result, str):
                    raise SelectorError(claim, request, expression, result)
                if result:
                    out.append(i)
            return out

    def _evaluate(self, program: Any, i: int) -> bool | str:
        try:
            value = program.execute(self._context(i))
        except Exception as exc:  # the binding raises KeyError, ValueError, RuntimeError ... for CEL errors
            return f"evaluation failed on device {self._names[i]}: {type(exc).__name__}: {exc}"
        if not isinstance(value, bool):
            return f"gave {value!r}, not a boolean"
        return value
