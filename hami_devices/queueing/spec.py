"""The queue file: a tree of queues, each with a guarantee, a limit, a lending limit and a weight.

YAML, validated by pydantic; every error names the dotted key and the file::

    classes:                       # optional: named groups of devices for per-class quotas
      big: {vendors: [nvidia], models: [A100-80GB, H100]}
    priority-classes: {batch: 10, urgent: 1000}   # optional: a request's priority_class picks one
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
            reclaimable: false     # other queues never evict its tasks
            state: open            # closed / draining: takes no new task
            stop-policy: none      # hold / hold-and-drain
            preemption:
              reclaim-within-cohort: any          # never / lower-priority / any
              within-queue: lower-priority        # never / lower-priority / lower-or-newer-equal-priority
              borrow-within-cohort: {policy: lower-priority, max-priority-threshold: 100}

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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

from hami_devices.errors import InvalidConfig
from hami_devices.models import every_error
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


ReclaimMode = Literal["never", "lower-priority", "any"]
WithinQueueMode = Literal["never", "lower-priority", "lower-or-newer-equal-priority"]


class BorrowWithinCohort(_Section):
    """Kueue's ``borrowWithinCohort``: may a task that borrows evict other queues' borrowed tasks?"""

    policy: Literal["never", "lower-priority"] = Field(
        default="never",
        description="lower-priority: a borrowing task evicts interruptible tasks of strictly lower priority that "
        "other queues run above their guarantee",
    )
    max_priority_threshold: int | None = Field(
        default=None,
        alias="max-priority-threshold",
        description="only tasks whose priority is at most this may be evicted so (none: any lower priority)",
    )


class PreemptionSpec(_Section):
    """What a queue's pending tasks may evict (only when ``enable-preemptive`` is on).

    ``reclaim`` and ``priority`` are the older on/off forms of ``reclaim-within-cohort`` (true: any,
    false: never) and ``within-queue`` (true: lower-priority, false: never).
    """

    reclaim_within_cohort: ReclaimMode = Field(
        default="any",
        alias="reclaim-within-cohort",
        description="Kueue's reclaimWithinCohort: a task within this queue's guarantee evicts interruptible "
        "tasks of queues above theirs: never; lower-priority (only tasks of strictly lower priority); any",
    )
    within_queue: WithinQueueMode = Field(
        default="never",
        alias="within-queue",
        description="Kueue's withinClusterQueue: a task evicts interruptible tasks of this same queue: never; "
        "lower-priority; lower-or-newer-equal-priority (also tasks of equal priority submitted later, when "
        "the task is then within its queue's guarantee)",
    )
    borrow_within_cohort: BorrowWithinCohort = Field(default_factory=BorrowWithinCohort,
                                                     alias="borrow-within-cohort")
    fair_share: bool = Field(
        default=False,
        alias="fair-share",
        description="a borrowing task evicts other queues' borrowed tasks while its queue's weighted share, "
        "after admission, stays at most theirs after the eviction",
    )
    reclaim: bool | None = Field(default=None, description="shorthand: true = reclaim-within-cohort any, false = never")
    priority: bool | None = Field(default=None, description="shorthand: true = within-queue lower-priority")

    @model_validator(mode="after")
    def _shorthands(self) -> PreemptionSpec:
        given = self.model_fields_set
        if self.reclaim is not None:
            mode = "any" if self.reclaim else "never"
            if "reclaim_within_cohort" in given and self.reclaim_within_cohort != mode:
                raise ValueError(f"reclaim: {self.reclaim} contradicts reclaim-within-cohort: "
                                 f"{self.reclaim_within_cohort}")
            self.__dict__["reclaim_within_cohort"] = mode
        if self.priority is not None:
            if "within_queue" not in given:
                self.__dict__["within_queue"] = "lower-priority" if self.priority else "never"
            elif self.priority != (self.within_queue != "never"):
                raise ValueError(f"priority: {self.priority} contradicts within-queue: {self.within_queue}")
        return self


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
    reclaimable: bool = Field(
        default=True,
        description="Volcano's reclaimable: false keeps other queues from evicting this queue's tasks (reclaim, "
        "borrowing, fair share); its tasks then borrow only what no queue is guaranteed",
    )
    state: Literal["open", "closed", "draining"] = Field(
        default="open",
        description="Volcano's queue state: open; closed (refuses new tasks and admits none of those waiting); "
        "draining (refuses new tasks, admits those already waiting); running tasks run on in each",
    )
    stop_policy: Literal["none", "hold", "hold-and-drain"] = Field(
        default="none",
        alias="stop-policy",
        description="Kueue's stopPolicy: hold (accepts tasks but admits none); hold-and-drain (also evicts its "
        "running tasks, requeued when recomputable)",
    )
    children: list[QueueSpec] = Field(default_factory=list)


class QueueFile(_Section):
    classes: dict[str, DeviceClass] = Field(default_factory=dict)
    priority_classes: dict[str, int] = Field(
        default_factory=dict,
        alias="priority-classes",
        description="named priorities (Kueue's WorkloadPriorityClass): a request's priority_class takes its value",
    )
    queues: list[QueueSpec] = Field(min_length=1)


Problems = list[tuple[str, str]]


def _check_amounts(amounts: dict[str, int], path: str, problems: Problems) -> None:
    for key, value in amounts.items():
        match = _KEY.match(key)
        if match is None or match["base"] not in BASE_RESOURCES:
            problems.append((f"{path}.{key}", f"unknown resource; use one of {', '.join(BASE_RESOURCES)} "
                             "(or KEY@SCOPE)"))
            continue
        if match["scope"] is not None and match["base"] not in DEVICE_RESOURCES:
            problems.append((f"{path}.{key}", "only device resources take a @scope"))
        if value < 0:
            problems.append((f"{path}.{key}", "must be a whole number >= 0 in the SDK's units"))


def _check_queue(queue: QueueSpec, path: str, problems: Problems) -> None:
    for section in ("guarantee", "limit", "lending_limit"):
        amounts = getattr(queue, section)
        if amounts is not None:
            _check_amounts(amounts, f"{path}.{section.replace('_', '-')}", problems)
    for key, value in queue.guarantee.items():
        cap = queue.limit.get(key)
        if cap is not None and value > cap:
            problems.append((f"{path}.guarantee.{key}", f"guarantee {value} is above the limit {cap}"))
    for key, value in (queue.lending_limit or {}).items():
        if value > queue.guarantee.get(key, 0):
            problems.append((
                f"{path}.lending-limit.{key}",
                f"lending limit {value} is above the guarantee {queue.guarantee.get(key, 0)}: "
                "a queue lends only its unused guarantee",
            ))
    if queue.children:
        for key, value in queue.guarantee.items():
            total = sum(c.guarantee.get(key, 0) for c in queue.children)
            if total > value:
                problems.append((f"{path}.guarantee.{key}",
                                 f"the children's guarantees add up to {total}, above this queue's {value}"))


def _validate(spec: QueueFile) -> Problems:
    """Every rule the queue file breaks beyond its types, each with its dotted key."""
    problems: Problems = []
    seen: dict[str, str] = {}
    borrowing: list[str] = []
    fair: list[str] = []

    def walk(queue: QueueSpec, path: str) -> None:
        if queue.name in seen:
            problems.append((f"{path}.name", f"queue {queue.name!r} already defined at {seen[queue.name]}"))
        seen[queue.name] = path
        _check_queue(queue, path, problems)
        if queue.preemption.borrow_within_cohort.policy != "never":
            borrowing.append(f"{path}.preemption.borrow-within-cohort")
        if queue.preemption.fair_share:
            fair.append(f"{path}.preemption.fair-share")
        for i, child in enumerate(queue.children):
            walk(child, f"{path}.children.{i}")

    for i, queue in enumerate(spec.queues):
        walk(queue, f"queues.{i}")
    if borrowing and fair:  # Kueue likewise allows borrowWithinCohort only without fair sharing
        problems.append((borrowing[0], f"borrow-within-cohort and fair-share ({fair[0]}) evict for opposite "
                         "reasons and could undo each other: use one of them"))
    for name, cls in spec.classes.items():
        if not _KEY.match(f"devices@{name}") or "/" in name:
            problems.append((f"classes.{name}", "a class name is letters, digits, '.', '_' or '-'"))
        if not cls.vendors and not cls.models:
            problems.append((f"classes.{name}", "name at least one vendor or model"))
    return problems


def parse_queues(data: Any, source: str = "<queues>") -> QueueFile:
    """Validate a queue file's data; ``InvalidConfig`` names every dotted key that is wrong, and ``source``."""
    if not isinstance(data, dict):
        raise InvalidConfig("<root>", "a queue file is a mapping with a 'queues' list", source=source)
    try:
        spec = QueueFile.model_validate(data)
    except ValidationError as exc:
        raise InvalidConfig.all_of(every_error(exc, QueueFile), source=source) from None
    problems = _validate(spec)
    if problems:
        raise InvalidConfig.all_of(problems, source=source)
    return spec


def load_queues(path: str | Path) -> QueueFile:
    with located(path):
        return parse_queues(read_yaml(path, InvalidConfig), source=str(path))


def queues_schema() -> dict[str, Any]:
    """The queue file's JSON Schema (``hami-devices queues schema``)."""
    schema = QueueFile.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "hami-devices queue file"
    return schema
