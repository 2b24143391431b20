"""The queue file: a tree of queues, each with a guarantee, a limit, a lending limit and a weight.

YAML, validated by pydantic; every error names the dotted key and the file::

    classes:                       # optional: named groups of devices for per-class quotas
      big: {vendors: [nvidia], models: [A100-80GB, H100]}
    queues:
      - name: platform             # a parent: its children share its guarantee first
        guarantee: {device-cores: 1600}
        children:
          - name: online
            guarantee: {device-cores: 1200, device-cores@big: 400}
            min-runtime: 0
          - name: research
            weight: 2
            limit: {device-cores: 3000}
            min-runtime: 300
            preemption: {priority: true}

Resources are the SDK's units: ``devices`` (whole devices held exclusively),
``device-cores`` (percent of one device; 100 = a device), ``device-memory-mib``,
``host-cpu-milli``, ``host-memory-mib``; ``KEY@SCOPE`` counts only devices of a
vendor (``@nvidia``), a vendor's model (``@nvidia/A100``) or a declared class
(``@big``).  A resource a queue gives no guarantee for is not guarded: it
neither entitles the queue to reclaim nor blocks a reclaim.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from hami_devices.errors import InvalidConfig
from hami_devices.models import first_error
from hami_devices.yamlfile import located, read_yaml

BASE_RESOURCES = ("devices", "device-cores", "device-memory-mib", "host-cpu-milli", "host-memory-mib")
"""Keys every queue is charged on; ``KEY@SCOPE`` narrows a device key to some devices."""
DEVICE_RESOURCES = ("devices", "device-cores", "device-memory-mib")
_KEY = re.compile(r"^(?P<base>[a-z-]+)(?:@(?P<scope>[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._ -]*)?))?$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class DeviceClass(_Section):
    """Devices of any of ``vendors`` (empty: any vendor) whose model is any of ``models`` (empty: any)."""

    vendors: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)


class PreemptionSpec(_Section):
    """What a queue's pending tasks may evict (only when ``enable-preemptive`` is on)."""

    reclaim: bool = Field(
        default=True,
        description="a task within this queue's guarantee evicts interruptible tasks of queues above theirs",
    )
    priority: bool = Field(
        default=False,
        description="a task evicts interruptible tasks of strictly lower priority in this same queue",
    )
    fair_share: bool = Field(
        default=False,
        alias="fair-share",
        description="a borrowing task evicts other queues' borrowed tasks while its queue's weighted share, "
        "after admission, stays at most theirs after the eviction",
    )


class QueueSpec(_Section):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    guarantee: dict[str, StrictInt] = Field(default_factory=dict, description="capacity the queue can always reclaim")
    limit: dict[str, StrictInt] = Field(default_factory=dict, description="most the queue may use, borrowing included")
    lending_limit: dict[str, StrictInt] | None = Field(
        default=None,
        alias="lending-limit",
        description="most of the unused guarantee others may borrow (default: all of it)",
    )
    weight: float = Field(default=1.0, gt=0, description="share of idle capacity, against sibling queues")
    min_runtime: float = Field(
        default=0.0, ge=0, alias="min-runtime", description="seconds a task of this queue runs before it may be evicted"
    )
    strict_fifo: bool = Field(
        default=False,
        alias="strict-fifo",
        description="a task that cannot be admitted holds back every later task of this queue",
    )
    preemption: PreemptionSpec = Field(default_factory=PreemptionSpec)
    children: list[QueueSpec] = Field(default_factory=list)


class QueueFile(_Section):
    classes: dict[str, DeviceClass] = Field(default_factory=dict)
    queues: list[QueueSpec] = Field(min_length=1)


def _check_amounts(amounts: dict[str, int], path: str, source: str) -> None:
    for key, value in amounts.items():
        match = _KEY.match(key)
        if match is None or match["base"] not in BASE_RESOURCES:
            raise InvalidConfig(
                f"{path}.{key}",
                f"unknown resource; use one of {', '.join(BASE_RESOURCES)} (or KEY@SCOPE)",
                source=source,
            )
        scope = match["scope"]
        if scope is not None and match["base"] not in DEVICE_RESOURCES:
            raise InvalidConfig(f"{path}.{key}", "only device resources take a @scope", source=source)
        if value < 0:
            raise InvalidConfig(f"{path}.{key}", "must be a whole number >= 0 in the SDK's units", source=source)


def _validate(spec: QueueFile, source: str) -> None:
    seen: dict[str, str] = {}

    def walk(queue: QueueSpec, path: str) -> None:
        if queue.name in seen:
            raise InvalidConfig(
                f"{path}.name", f"queue {queue.name!r} already defined at {seen[queue.name]}", source=source
            )
        seen[queue.name] = path
        for section in ("guarantee", "limit", "lending_limit"):
            amounts = getattr(queue, section)
            if amounts is not None:
                _check_amounts(amounts, f"{path}.{section.replace('_', '-')}", source)
        for key, value in queue.guarantee.items():
            cap = queue.limit.get(key)
            if cap is not None and value > cap:
                raise InvalidConfig(
                    f"{path}.guarantee.{key}", f"guarantee {value} is above the limit {cap}", source=source
                )
        for key, value in (queue.lending_limit or {}).items():
            if value > queue.guarantee.get(key, 0):
                raise InvalidConfig(
                    f"{path}.lending-limit.{key}",
                    f"lending limit {value} is above the guarantee {queue.guarantee.get(key, 0)}: "
                    "a queue lends only its unused guarantee",
                    source=source,
                )
        if queue.children:
            for key, value in queue.guarantee.items():
                total = sum(c.guarantee.get(key, 0) for c in queue.children)
                if total > value:
                    raise InvalidConfig(
                        f"{path}.guarantee.{key}",
                        f"the children's guarantees add up to {total}, above this queue's {value}",
                        source=source,
                    )
        for i, child in enumerate(queue.children):
            walk(child, f"{path}.children.{i}")

    for i, queue in enumerate(spec.queues):
        walk(queue, f"queues.{i}")
    for name, cls in spec.classes.items():
        if not _KEY.match(f"devices@{name}") or "/" in name:
            raise InvalidConfig(f"classes.{name}", "a class name is letters, digits, '.', '_' or '-'", source=source)
        if not cls.vendors and not cls.models:
            raise InvalidConfig(f"classes.{name}", "name at least one vendor or model", source=source)


def parse_queues(data: Any, source: str = "<queues>") -> QueueFile:
    """Validate a queue file's data; ``InvalidConfig`` names the dotted key and ``source``."""
    if not isinstance(data, dict):
        raise InvalidConfig("<root>", "a queue file is a mapping with a 'queues' list", source=source)
    try:
        spec = QueueFile.model_validate(data)
    except ValidationError as exc:
        field, message = first_error(exc, QueueFile)
        raise InvalidConfig(field, message, source=source) from None
    _validate(spec, source)
    return spec


def load_queues(path: str | Path) -> QueueFile:
    with located(path):
        return parse_queues(read_yaml(path, InvalidConfig), source=str(path))
