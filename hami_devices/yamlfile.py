"""Reading a YAML file that a user hands us: one place for the error a missing or malformed file gets, and for
the line a bad value sits on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from hami_devices.errors import InvalidRequest


def read_yaml(path: str | Path, error: type[InvalidRequest] = InvalidRequest) -> Any:
    """The parsed document of ``path``; an unreadable file or bad YAML raises ``error`` naming the file and
    the line (field ``<file>`` or ``<yaml>``), so each loader reports it in its own error type."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise error("<file>", f"cannot read: {exc.strerror}", source=str(file)) from None
    except UnicodeDecodeError as exc:
        raise error("<file>", f"not a text file ({exc.reason})", source=str(file)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise error("<yaml>", f"not valid YAML: {_yaml_problem(exc)}", source=str(file), line=line) from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's reason on one line, without the ``in "<unicode string>"`` it names the text by."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem is None:
        return str(exc).splitlines()[0]
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    context = getattr(exc, "context", None)
    return f"{problem}{where}" + (f", {context}" if context else "")


def line_of(path: str | Path, field: str) -> int | None:
    """The line (1-based) of the value a dotted field names in a YAML file (``nodes.0.devices.1.modle``), or
    of the deepest part of it the file has; ``None`` when the file cannot tell."""
    try:
        node = yaml.compose(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    line = None
    for step in field.split("."):
        if isinstance(node, yaml.MappingNode):
            found = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == step]
            if not found:
                break
            key, node = found[0]
            line = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and step.isdigit() and int(step) < len(node.value):
            node = node.value[int(step)]
            line = node.start_mark.line + 1
        else:
            break
    return line


@contextmanager
def located(path: str | Path) -> Iterator[None]:
    """A validation error about the YAML file ``path`` gets the line of the field it names."""
    try:
        yield
    except InvalidRequest as exc:
        if exc.source != str(path) or exc.line is not None or exc.field.startswith("<"):
            raise
        line = line_of(path, exc.field)
        if line is None:
            raise
        raise type(exc)(exc.field, exc.message, source=exc.source, line=line, more=exc.errors[1:]) from None
