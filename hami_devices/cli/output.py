"""Output helpers shared by the verbs: JSON for scripts, aligned tables for people."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel


def _default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return str(obj)


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=_default, sort_keys=False)
    sys.stdout.write("\n")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, indent: str = "") -> None:
    cells = [[str(h) for h in headers], *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            print(indent + "  ".join("-" * w for w in widths))


def error(message: str) -> None:
    print(f"hami-devices: error: {message}", file=sys.stderr)
