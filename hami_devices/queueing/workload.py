"""Timed workloads: the workload file of ``hami-devices schedule`` plus when each task arrives and how long it runs.

Each task is a ``ResourceRequest`` with three more keys::

    tasks:
      - name: train
        queue: research
        preemptible: true
        arrival: 0          # seconds from the start of the replay (default 0)
        duration: 600       # seconds of running it needs (default: runs until the end)
        replicas: 4         # name-0 .. name-3
        every: 30           # replica r arrives at arrival + r * every (default 0)
        parts: [{count: 1, cores: 100}]

A file without these keys is a valid timed workload (everything arrives at 0 and
runs until the end), so ``schedule``'s files replay as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.models import ResourceRequest
from hami_devices.workload import TimedTask
from hami_devices.yamlfile import located, read_yaml

__all__ = ["TIMING_KEYS", "TimedTask", "load_timed_workload", "parse_timed_workload"]

TIMING_KEYS = ("arrival", "duration", "replicas", "every")


def _number(body: dict[str, Any], key: str, default: float | None, path: str, source: str) -> float | None:
    value = body.pop(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise InvalidRequest(f"{path}.{key}", "must be a number of seconds >= 0", source=source)
    return float(value)


def parse_timed_workload(data: Any, source: str = "<workload>") -> list[TimedTask]:
    """``tasks:`` as in ``workload.parse_workload``, each with optional ``arrival``, ``duration`` and ``every``."""
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
        raise InvalidRequest("tasks", "a workload is a mapping with a 'tasks' list", source=source)
    out: list[TimedTask] = []
    names: set[str] = set()
    for t, task in enumerate(data["tasks"]):
        path = f"tasks.{t}"
        if not isinstance(task, dict):
            raise InvalidRequest(path, "each task is a mapping", source=source)
        body = dict(task)
        arrival = _number(body, "arrival", 0.0, path, source) or 0.0
        duration = _number(body, "duration", None, path, source)
        every = _number(body, "every", 0.0, path, source) or 0.0
        replicas = body.pop("replicas", 1)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise InvalidRequest(f"{path}.replicas", "must be a positive integer", source=source)
        base = body.get("name") or f"task-{t}"
        for r in range(replicas):
            body["name"] = base if replicas == 1 else f"{base}-{r}"
            if body["name"] in names:
                raise InvalidRequest(f"{path}.name", f"task name {body['name']!r} used twice", source=source)
            names.add(body["name"])
            try:
                request = ResourceRequest.model_validate(body)
            except InvalidRequest as exc:
                raise InvalidRequest(f"{path}.{exc.field}", exc.message, source=source) from None
            out.append(TimedTask(request, arrival + r * every, duration))
    return sorted(out, key=lambda x: x.arrival)


def load_timed_workload(path: str | Path) -> list[TimedTask]:
    with located(path):
        return parse_timed_workload(read_yaml(path), source=str(path))
