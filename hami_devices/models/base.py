"""The base of every SDK model (typed errors naming the field), and the units shared by all of them.

Units (see DESIGN.md): memory in MiB (int); ``cores`` is a percentage of one
device, 0..100, where 100 means exclusive use.  Vendor-native units appear
only inside ``PartitionProfile.native``.
"""

from __future__ import annotations

from typing import Any, Literal, Self, TypeAlias

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic._internal._model_construction import ModelMetaclass

from hami_devices.errors import InvalidRequest

NOT_AVAILABLE: Literal["n/a"] = "n/a"
"""The explicit value of a metric that a device cannot report (never 0)."""

NotAvailable: TypeAlias = Literal["n/a"]
MetricValue: TypeAlias = float | NotAvailable

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
PRECISION_BYTES: dict[str, float] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


def is_available(value: object) -> bool:
    return value != NOT_AVAILABLE and value is not None


def first_error(exc: ValidationError) -> tuple[str, str]:
    """The dotted location and message of the first pydantic error."""
    return every_error(exc)[0]


def every_error(exc: ValidationError) -> list[tuple[str, str]]:
    """The dotted location and message of every pydantic error, in the order pydantic found them."""
    return [
        (".".join(str(p) for p in err.get("loc", ())) or "<root>", str(err.get("msg", "invalid value")))
        for err in exc.errors()
    ]


class _TypedErrorsMeta(ModelMetaclass):
    """Turns a failed ``Model(...)`` call into ``InvalidRequest``.

    Hooking the metaclass rather than ``__init__`` matters: a model with its own
    ``__init__`` makes pydantic call it for nested values too, which would wrap
    our error again and lose the dotted path.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as exc:
            field, message = first_error(exc)
            raise InvalidRequest(field, message) from None


class HamiModel(BaseModel, metaclass=_TypedErrorsMeta):
    """Base of all SDK models: strict about unknown fields, typed errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            field, message = first_error(exc)
            raise InvalidRequest(field, message) from None

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate_json(json_data, *args, **kwargs)
        except ValidationError as exc:
            field, message = first_error(exc)
            raise InvalidRequest(field, message) from None
