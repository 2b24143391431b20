"""The inputs every entry point accepts, in the same forms everywhere.

A request is a ``ResourceRequest`` or a mapping of its fields; a configuration is a
``HamiConfig``, a mapping of its keys, or the path of its YAML file (``None``: the
defaults); an inventory is an ``Inventory`` or the path of its file.  Anything else is an
``InvalidRequest`` (an ``InvalidConfig`` for a configuration) that names the argument and
the type it got, instead of an ``AttributeError`` from deep inside.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hami_devices.config import HamiConfig, load_config, parse_config
from hami_devices.errors import InvalidConfig, InvalidRequest
from hami_devices.inventory import Inventory
from hami_devices.models import ResourceRequest

__all__ = ["as_config", "as_request", "check_inventory"]


def as_request(value: Any, argument: str = "<request>") -> ResourceRequest:
    """``value`` as a ``ResourceRequest``; a mapping is validated (its own errors name the field).  A wrong type
    names ``<request>``, the request as a whole (as a wrong field names ``parts.0.memory_mib``)."""
    if isinstance(value, ResourceRequest):
        return value
    if isinstance(value, Mapping):
        return ResourceRequest.model_validate(dict(value))
    raise InvalidRequest(argument, f"expected a ResourceRequest or a mapping of its fields, got {_kind(value)}")


def as_config(value: Any, argument: str = "config") -> HamiConfig:
    """``value`` as a ``HamiConfig``: the object itself, a mapping of its keys, a YAML path, or None (defaults)."""
    if isinstance(value, HamiConfig):
        return value
    if value is None:
        return HamiConfig()
    if isinstance(value, str | Path):
        return load_config(value)
    if isinstance(value, Mapping):
        return parse_config(dict(value), source=f"<{argument}>")
    raise InvalidConfig(argument, f"expected a HamiConfig, a mapping or the path of a YAML file, got {_kind(value)}")


def check_inventory(value: Any, argument: str = "inventory") -> str | Path | Inventory:
    """``value`` when it is an ``Inventory`` or a path, else ``InvalidRequest`` naming ``argument``."""
    if isinstance(value, Inventory | str | Path):
        return value
    raise InvalidRequest(argument, f"expected an Inventory or the path of an inventory file, got {_kind(value)}")


def _kind(value: Any) -> str:
    return "None" if value is None else type(value).__name__
