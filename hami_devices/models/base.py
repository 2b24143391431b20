"""The base of every SDK model (typed errors naming the field), and the units shared by all of them.

Units (see DESIGN.md): memory in MiB (int); ``cores`` is a percentage of one
device, 0..100, where 100 means exclusive use.  Vendor-native units appear
only inside ``PartitionProfile.native``.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, Literal, Self, TypeAlias, get_args

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


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's type holds (``list[Part]``, ``dict[str, Class]``, ``Part | None`` ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _field_of(model: type[BaseModel], key: str) -> Any | None:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info
    return None


def known_keys(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The keys the mapping holding ``loc``'s last key accepts, as a file spells them (aliases and names)."""
    current = [model]
    for step in loc[:-1]:
        found = [info for m in current if isinstance(step, str) and (info := _field_of(m, step)) is not None]
        if found:
            current = [m for info in found for m in _models_in(info.annotation)]
        # else: a list index, a mapping's own key or a union member's tag: the same models go on
        if not current:
            return []
    return sorted({key for m in current for name, info in m.model_fields.items() for key in (name, info.alias)
                   if key})


def _dotted(loc: Sequence[str | int]) -> str:
    return ".".join(str(p) for p in loc) or "<root>"


def every_error(exc: ValidationError, model: type[BaseModel] | None = None) -> list[tuple[str, str]]:
    """The dotted location and message of every problem, in the order pydantic found them.

    With ``model``, an unknown key gets the closest key the model accepts at that place ("did you mean
    'model'?"), and the "field required" that the misspelling caused is not reported twice.
    """
    problems: list[tuple[str, str]] = []
    meant: set[str] = set()
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        message = str(err.get("msg", "invalid value"))
        if err.get("type") == "extra_forbidden" and model is not None and loc and isinstance(loc[-1], str):
            close = difflib.get_close_matches(loc[-1], known_keys(model, loc), n=1, cutoff=0.6)
            message += f"; did you mean {close[0]!r}?" if close else ""
            meant.update(_dotted((*loc[:-1], c)) for c in close)
        problems.append((_dotted(loc), message))
    required = {_dotted(tuple(e.get("loc", ()))) for e in exc.errors() if e.get("type") == "missing"}
    return [(f, m) for f, m in problems if not (f in required and f in meant)] or problems


def first_error(exc: ValidationError, model: type[BaseModel] | None = None) -> tuple[str, str]:
    """The dotted location of the first problem, and every problem in one message (see ``every_error``)."""
    problems = every_error(exc, model)
    field, message = problems[0]
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more: " + "; ".join(f"{f}: {m}" for f, m in problems[1:]) + ")"
    return field, message


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
            model = cls if isinstance(cls, type) and issubclass(cls, BaseModel) else None
            field, message = first_error(exc, model)
            raise InvalidRequest(field, message) from None


class HamiModel(BaseModel, metaclass=_TypedErrorsMeta):
    """Base of all SDK models: strict about unknown fields, typed errors."""

    # use_attribute_docstrings: a field's docstring is its description, in the JSON Schemas and the API reference
    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, populate_by_name=True, use_attribute_docstrings=True
    )

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            field, message = first_error(exc, cls)
            raise InvalidRequest(field, message) from None

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate_json(json_data, *args, **kwargs)
        except ValidationError as exc:
            field, message = first_error(exc, cls)
            raise InvalidRequest(field, message) from None
