"""Reading a YAML file that a user hands us: one place for the error a missing or malformed file gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hami_devices.errors import InvalidRequest


def read_yaml(path: str | Path, error: type[InvalidRequest] = InvalidRequest) -> Any:
    """The parsed document of ``path``; an unreadable file or bad YAML raises ``error`` naming the file
    (field ``<file>`` or ``<yaml>``), so each loader reports it in its own error type."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise error("<file>", f"cannot read: {exc.strerror}", source=str(file)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error("<yaml>", f"not valid YAML: {exc}", source=str(file)) from None
