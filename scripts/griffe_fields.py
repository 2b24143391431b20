"""A griffe extension for the API reference: a pydantic field's ``Field(description=...)`` is its docstring.

The models describe their fields either way (an attribute docstring, or ``description=`` where the field already
calls ``Field``); pydantic puts both into the JSON Schemas, and this puts both into the reference, read from the
source without importing it.
"""

from __future__ import annotations

import ast
from typing import Any

from griffe import Attribute, Docstring, Extension


def _description(node: Any) -> str | None:
    value = getattr(node, "value", None)
    if not isinstance(value, ast.Call) or getattr(value.func, "id", None) != "Field":
        return None
    for keyword in value.keywords:
        if keyword.arg == "description":
            try:
                text = ast.literal_eval(keyword.value)
            except ValueError:
                return None
            return text if isinstance(text, str) else None
    return None


class FieldDescriptions(Extension):
    """Gives a field without a docstring the description its ``Field(...)`` call carries."""

    def on_attribute_instance(self, *, node: ast.AST | Any, attr: Attribute, agent: Any, **kwargs: Any) -> None:
        if attr.docstring is not None or not isinstance(node, ast.AnnAssign):
            return
        text = _description(node)
        if text:
            attr.docstring = Docstring(text[:1].upper() + text[1:] + ("" if text.endswith(".") else "."), parent=attr)
