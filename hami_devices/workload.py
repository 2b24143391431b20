"""Workload YAML -> the list of ResourceRequests a scheduler is asked to place."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.models import ResourceRequest
from hami_devices.yamlfile import located, read_yaml


@dataclass(frozen=True)
class TimedTask:
    """A request that arrives at ``arrival`` (seconds) and runs ``duration`` seconds (None: until the end)."""

    request: ResourceRequest
    arrival: float = 0.0
    duration: float | None = None

    @property
    def name(self) -> str:
        return self.request.name or ""


def parse_workload(data: Any, source: str = "<workload>") -> list[ResourceRequest]:
    """``tasks:`` is a list of requests; ``replicas: N`` on a task repeats it as name-0 .. name-N-1."""
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
        raise InvalidRequest("tasks", "a workload is a mapping with a 'tasks' list", source=source)
    requests: list[ResourceRequest] = []
    for t, task in enumerate(data["tasks"]):
        if not isinstance(task, dict):
            raise InvalidRequest(f"tasks.{t}", "each task is a mapping", source=source)
        body = dict(task)
        replicas = body.pop("replicas", 1)
        if not isinstance(replicas, int) or replicas < 1:
            raise InvalidRequest(f"tasks.{t}.replicas", "must be a positive integer", source=source)
        base = body.get("name") or f"task-{t}"
        for r in range(replicas):
            body["name"] = base if replicas == 1 else f"{base}-{r}"
            try:
                requests.append(ResourceRequest.model_validate(body))
            except InvalidRequest as exc:
                raise InvalidRequest(f"tasks.{t}.{exc.field}", exc.message, source=source) from None
    return requests


def load_workload(path: str | Path) -> list[ResourceRequest]:
    """Read a workload file (``tasks:``, each a request; see ``examples/workload.yaml``), as
    ``hami-devices schedule --workload`` does.

    Args:
        path: the YAML file.

    Returns:
        One validated request per task, in the file's order.

    Raises:
        InvalidRequest: the file cannot be read, is not YAML, or a task does not validate; ``field`` names the
            task and the field.
    """
    with located(path):
        return parse_workload(read_yaml(path), source=str(path))
