"""The workload mix FGD plans for: learned online from the requests seen, or declared.

A real scheduler does not know its future tasks.  ``OnlineMix`` learns the
mix of request shapes from the requests it has seen: each request adds its
shapes with weight 1, and every weight decays by half over ``half_life``
requests, so the mix follows a drifting workload.  It starts from a neutral
prior (a spread of fractional and whole-device tasks with no CPU or memory)
that counts as ``prior_weight`` requests and decays like them.

The mix keeps the most frequent shapes covering 95 % of the weight, at most
``max_shapes`` of them (FGD's "typical" tasks; a very diverse workload is
planned for by its most frequent shapes, which bounds each decision's cost).
The mix a policy plans with is re-derived after 1, 2, 4, ... requests up to
``refresh`` and then every ``refresh`` requests, not on every request, and
kept when the new one is within 0.05 of it in total variation distance:
per-node fragmentation caches stay valid between refreshes, and a mix of
thousands of requests barely moves with one more.  A declared mix (FGD's "target
workload") never changes.  Either can be saved and loaded as JSON.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Protocol

from hami_devices.errors import InvalidConfig
from hami_devices.models import ResourceRequest
from hami_devices.scheduling.fgd import MILLI, Shape, WorkloadMix

PER_CONSTRAINT_SET = 2  # shapes each constrained model set keeps within the budget (see _within_budget)

NEUTRAL = (
    Shape(0, 100, 1, None, 0.10),
    Shape(0, 250, 1, None, 0.20),
    Shape(0, 500, 1, None, 0.20),
    Shape(0, 1000, 1, None, 0.30),
    Shape(0, 1000, 2, None, 0.10),
    Shape(0, 1000, 4, None, 0.06),
    Shape(0, 1000, 8, None, 0.04),
)
"""Used until requests have been seen: fractional and whole-device tasks, no CPU or memory."""

MEMORY_VALUES = 64  # distinct host memory values weighed per shape (the rest fold into the nearest)


def shapes_of(request: ResourceRequest) -> list[Shape]:
    """One shape per part with devices (each with the request's host CPU and memory), or one host-only shape."""
    cpu, mem = request.host_cpu_milli, request.host_memory_mib
    if not request.parts:
        return [Shape(cpu, 0, 0, None, 1.0, mem)]
    out = []
    for part in request.parts:
        models = frozenset(part.models) if part.models else None
        if part.exclusive:
            out.append(Shape(cpu, MILLI, part.count, models, 1.0, mem))
        elif part.memory_mib is not None:
            out.append(Shape(cpu, part.cores * 10, part.count, models, 1.0, mem, part.memory_mib))
        else:
            share = MILLI if part.memory_percent is None else math.ceil(part.memory_percent * 10 - 1e-9)
            out.append(Shape(cpu, min(MILLI, max(share, part.cores * 10)), part.count, models, 1.0, mem))
    return out


def _weighted_median(values: dict[int, float]) -> int:
    ordered = sorted(values.items())
    half = sum(w for _, w in ordered) / 2.0
    running = 0.0
    for value, weight in ordered:
        running += weight
        if running >= half:
            return value
    return ordered[-1][0]


def _close(a: WorkloadMix, b: WorkloadMix, tolerance: float = 0.05) -> bool:
    """Within ``tolerance`` in total variation distance (half the summed frequency differences, a shape
    missing from one mix counting with frequency 0)."""
    pa = {(*_key(s), s.mem_mib): float(w) for s, w in zip(a.shapes, a.weight, strict=True)}
    pb = {(*_key(s), s.mem_mib): float(w) for s, w in zip(b.shapes, b.weight, strict=True)}
    distance = 0.5 * sum(abs(pa.get(k, 0.0) - pb.get(k, 0.0)) for k in pa.keys() | pb.keys())
    return distance <= tolerance


def _shape_fields(key: tuple[Any, ...]) -> dict[str, Any]:
    cpu, milli, num, models, gpu_mem = key
    models_list = sorted(models) if models is not None else None
    return {"cpu_milli": cpu, "gpu_milli": milli, "num_gpu": num, "models": models_list, "gpu_mem_mib": gpu_mem}


def _key_of(row: dict[str, Any]) -> tuple[Any, ...]:
    models = frozenset(row["models"]) if row["models"] is not None else None
    return (int(row["cpu_milli"]), int(row["gpu_milli"]), int(row["num_gpu"]), models, int(row["gpu_mem_mib"]))


def _key(shape: Shape) -> tuple[Any, ...]:
    return (shape.cpu_milli, shape.gpu_milli, shape.num_gpu, shape.models, shape.gpu_mem_mib)


class OnlineMix:
    """Shape frequencies learned from requests, with exponential forgetting and a neutral prior."""

    def __init__(
        self,
        *,
        half_life: float = 4096,
        prior: tuple[Shape, ...] = NEUTRAL,
        prior_weight: float = 16.0,
        refresh: int = 1024,
        coverage: float = 0.95,
        max_shapes: int = 48,
    ) -> None:
        if half_life <= 0 or refresh < 1 or not 0 < coverage <= 1:
            raise InvalidConfig("workload-mix", "half-life > 0, refresh >= 1 and 0 < coverage <= 1 are required")
        self.half_life = half_life
        self.refresh = refresh
        self.coverage = coverage
        self.max_shapes = max_shapes
        self.prior = prior
        self.seen = 0
        self._growth = 2.0 ** (1.0 / half_life)
        self._unit = 1.0  # the weight of a request seen now; older ones keep what they were given
        self._prior_weight = prior_weight  # in the same scaled units as the counts
        self._counts: dict[tuple[Any, ...], float] = {}
        # per shape, host memory value -> weight (decaying like the counts); the mix uses the weighted median
        self._memory: dict[tuple[Any, ...], dict[int, float]] = {}
        self._mix = self._derive()
        self.version = 0

    @property
    def mix(self) -> WorkloadMix:
        return self._mix

    def observe(self, request: ResourceRequest) -> bool:
        """Count one request; True when the mix in use was re-derived (caches keyed on it go stale)."""
        self.seen += 1
        self._unit *= self._growth
        for shape in shapes_of(request):
            key = _key(shape)
            weight = self._unit / len(request.parts or [None])
            self._counts[key] = self._counts.get(key, 0.0) + weight
            values = self._memory.setdefault(key, {})
            value = shape.mem_mib
            if value not in values and len(values) >= MEMORY_VALUES:
                value = min(values, key=lambda v: abs(v - shape.mem_mib))
            values[value] = values.get(value, 0.0) + weight
        if self._unit > 1e100:  # keep the scaled counts finite: divide everything by the unit
            self._counts = {k: v / self._unit for k, v in self._counts.items()}
            self._memory = {k: {m: w / self._unit for m, w in v.items()} for k, v in self._memory.items()}
            self._prior_weight /= self._unit
            self._unit = 1.0
        due = (self.seen < self.refresh and (self.seen & (self.seen - 1)) == 0) or self.seen % self.refresh == 0
        if not due:
            return False
        fresh = self._derive()
        if _close(fresh, self._mix):
            return False  # the workload did not move: keep the mix, and every cache keyed on it
        self._mix = fresh
        self.version += 1
        return True

    def derive(self) -> WorkloadMix:
        """The mix of everything observed so far, derived now (outside the refresh schedule)."""
        self._mix = self._derive()
        self.version += 1
        return self._mix

    def _derive(self) -> WorkloadMix:
        weighted: list[tuple[Shape, float]] = []
        for key, count in self._counts.items():
            cpu, milli, num, models, gpu_mem = key
            weighted.append((Shape(cpu, milli, num, models, 1.0, _weighted_median(self._memory[key]), gpu_mem), count))
        prior_total = sum(s.weight for s in self.prior) or 1.0
        weighted += [(s, self._prior_weight * s.weight / prior_total) for s in self.prior]
        typical = WorkloadMix.typical(weighted, self.coverage)
        total = sum(w for _, w in weighted) or 1.0
        constrained: dict[frozenset[str], float] = {}
        for shape, weight in weighted:
            if shape.models and shape.num_gpu:
                constrained[shape.models] = constrained.get(shape.models, 0.0) + weight / total
        shapes = _within_budget(typical.shapes, self.max_shapes)
        return WorkloadMix(shapes, cpu_only_all_idle=True, constraints=tuple(constrained.items()))

    # -- persistence ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The whole learned state, exactly (floats round-trip through JSON), and the mix in use.

        A scheduler that loads it continues as if it had never stopped: the same counts,
        the same refresh schedule, the same mix until the next refresh.
        """
        return {
            "half_life": self.half_life,
            "refresh": self.refresh,
            "coverage": self.coverage,
            "max_shapes": self.max_shapes,
            "seen": self.seen,
            "version": self.version,
            "unit": self._unit,
            "prior_weight": self._prior_weight,
            "shapes": [
                {
                    **_shape_fields(k),
                    "weight": v,
                    "host_memory_mib": [[m, w] for m, w in self._memory[k].items()],
                }
                for k, v in self._counts.items()
            ],
            "in_use": {
                "shapes": [
                    {**_shape_fields(_key(s)), "weight": s.weight, "mem_mib": s.mem_mib} for s in self._mix.shapes
                ],
                "constraints": [[sorted(m), w] for m, w in self._mix.constraints],
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OnlineMix:
        try:
            mix = cls(
                half_life=float(data["half_life"]),
                refresh=int(data["refresh"]),
                coverage=float(data["coverage"]),
                max_shapes=int(data["max_shapes"]),
            )
            mix.seen, mix.version = int(data["seen"]), int(data["version"])
            mix._unit, mix._prior_weight = float(data["unit"]), float(data["prior_weight"])
            for row in data["shapes"]:
                key = _key_of(row)
                mix._counts[key] = float(row["weight"])
                mix._memory[key] = {int(m): float(w) for m, w in row["host_memory_mib"]}
            in_use = data["in_use"]
            shapes = tuple(
                Shape(k[0], k[1], k[2], k[3], float(row["weight"]), int(row["mem_mib"]), k[4])
                for row in in_use["shapes"]
                for k in [_key_of(row)]
            )
            constraints = tuple((frozenset(m), float(w)) for m, w in in_use["constraints"])
            mix._mix = WorkloadMix(shapes, cpu_only_all_idle=True, constraints=constraints)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidConfig("workload-mix", f"not a saved mix: {exc}") from None
        return mix

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> OnlineMix:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidConfig("<file>", f"cannot read a saved mix: {exc}", source=str(path)) from None
        return cls.from_dict(data)


LEDGER_KEY = "scheduler.workload-mix"
"""Where a node's ledger keeps the mix its allocations have taught (``LedgerView`` observations)."""


class _Observations(Protocol):
    def observations(self, prefix: str) -> dict[str, tuple[float, Any]]: ...

    def set_observation(self, key: str, observed_at: float, value: Any | None) -> None: ...


def _within_budget(shapes: tuple[Shape, ...], budget: int) -> tuple[Shape, ...]:
    """The ``budget`` shapes to plan for, from ``shapes`` (by falling weight).

    The most frequent, except that each set of models that constrained shapes ask for keeps its
    ``PER_CONSTRAINT_SET`` most frequent shapes, within a quarter of the budget.  A model that only a
    rare kind of task accepts is otherwise invisible to the fragmentation of its nodes, and the policy
    spends it on work that could run anywhere (gpuspec20: 101 typical shapes, 49 of them constrained
    to one of 6 model sets, 3 of which the 48 most frequent shapes do not mention).
    """
    if len(shapes) <= budget:
        return shapes
    per_set: dict[frozenset[str], int] = {}
    for shape in shapes[:budget]:
        if shape.models and shape.num_gpu:
            per_set[shape.models] = per_set.get(shape.models, 0) + 1
    wanted: list[int] = []
    for i in range(budget, len(shapes)):
        models = shapes[i].models
        if models and shapes[i].num_gpu and per_set.get(models, 0) < PER_CONSTRAINT_SET:
            per_set[models] = per_set.get(models, 0) + 1
            wanted.append(i)
    wanted = wanted[: budget // 4]
    return shapes[: budget - len(wanted)] + tuple(shapes[i] for i in wanted)


def load_from(view: _Observations) -> OnlineMix | None:
    """The learned mix a ledger keeps, if any."""
    saved = view.observations(LEDGER_KEY).get(LEDGER_KEY)
    return OnlineMix.from_dict(saved[1]) if saved is not None else None


def save_to(view: _Observations, learner: OnlineMix) -> None:
    """Keep the learned mix in the ledger (in the caller's transaction)."""
    view.set_observation(LEDGER_KEY, time.time(), learner.to_dict())


def declared_mix(shapes: list[dict[str, Any]], source: str = "<config>") -> WorkloadMix:
    """A mix given by the user (FGD's target workload): each entry a shape with a weight."""
    out = []
    for i, row in enumerate(shapes):
        try:
            models = row.get("models")
            out.append(
                Shape(
                    int(row.get("cpu_milli", 0)),
                    int(row.get("gpu_milli", 0)),
                    int(row.get("num_gpu", 0)),
                    frozenset(models) if models else None,
                    float(row.get("weight", 1.0)),
                    int(row.get("host_memory_mib", 0)),
                    int(row.get("gpu_mem_mib", 0)),
                )
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise InvalidConfig(f"workload-mix.shapes.{i}", str(exc), source=source) from None
    if not out:
        raise InvalidConfig("workload-mix.shapes", "a declared mix needs at least one shape", source=source)
    return WorkloadMix(tuple(out), cpu_only_all_idle=True)
