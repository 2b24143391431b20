"""Size a model for a device: its precision plan, memory at that plan, the MiB to request, expected speed.

``size_model`` reads the graph at the batch, picks the plan's precision from the
device's traits (``plan.choose_low``; a generic 16-bit plan when no device is named),
estimates the memory for the task, and adds ``headroom`` for what a runtime adds on
top of the live tensors (allocator rounding and fragmentation, an execution order that
differs from the graph's; ``bench/precision.py`` measures how much that is), then the
framework's workspaces (``allowance``); the runtime context per process is shown, and booked
by the scheduler beside the share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.models import DeviceTraits
from hami_devices.sizing.allowance import Allowance, allowance
from hami_devices.sizing.graph import ModelGraph, read_onnx
from hami_devices.sizing.memory import MIB, MemoryEstimate, Optimizer, Task, estimate, weights_only
from hami_devices.sizing.plan import PrecisionPlan, choose_low, plan_graph
from hami_devices.sizing.speed import relative_speed
from hami_devices.traits import all_traits, normalize_model_name

DEFAULT_HEADROOM = 0.2
"""Added to the estimate: above the largest under-estimate bench/precision.py measures on its corpus."""


def traits_named(name: str) -> DeviceTraits:
    """The catalog entry for a device model name (or alias) of any vendor."""
    wanted = normalize_model_name(name)
    for traits in all_traits():
        if wanted in {normalize_model_name(n) for n in (traits.model, *traits.aliases)}:
            return traits
    known = ", ".join(sorted(t.model for t in all_traits()))
    raise InvalidRequest("device_model", f"{name!r} is not in the traits catalog (known: {known})")


@dataclass(frozen=True)
class SizingReport:
    graph: ModelGraph
    plan: PrecisionPlan
    estimate: MemoryEstimate
    fp32: MemoryEstimate
    device: DeviceTraits | None
    headroom: float
    speed: float | None
    allowance: Allowance

    @property
    def memory_mib(self) -> int:
        """MiB to request: the estimate plus the headroom, rounded up, plus the framework's workspaces."""
        return max(1, math.ceil(self.estimate.total * (1.0 + self.headroom) / MIB)) + self.allowance.workspace_mib

    @property
    def saving(self) -> float:
        """Memory the plan saves against the all-fp32 plan, as a fraction of the latter."""
        return 1.0 - self.estimate.total / self.fp32.total if self.fp32.total else 0.0

    def plan_document(self) -> dict[str, Any]:
        """What a workload reads from ``HAMI_PRECISION_PLAN``: the precision of every operator."""
        return {
            "model": self.graph.name,
            "source": self.graph.source,
            "device_model": self.device.model if self.device else None,
            "precision": self.plan.low,
            "groups": self.plan.groups(),
            "operators": {op.name: p for op, p in zip(self.graph.ops, self.plan.op_precision, strict=True)},
        }

    def to_dict(self, operators: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.graph.name,
            "batch": self.graph.batch,
            "task": self.estimate.task,
            "device_model": self.device.model if self.device else None,
            "precision": self.plan.low,
            "groups": self.plan.groups(),
            "fp32_ops_lowered": self.plan.lowered_fp32_ops,
            "parameters": self.graph.param_count,
            "estimate_mib": round(self.estimate.total_mib, 3),
            "breakdown_mib": self.estimate.breakdown_mib(),
            "peak_at": self.estimate.peak_at,
            "fp32_estimate_mib": round(self.fp32.total_mib, 3),
            "saving_vs_fp32": round(self.saving, 4),
            "weights_only_mib": round(weights_only(self.plan, self.estimate.task) / MIB, 3),
            "relative_speed": None if self.speed is None else round(self.speed, 3),
            "headroom": self.headroom,
            "memory_mib": self.memory_mib,
            "allowance": self.allowance.to_dict(),
        }
        if self.estimate.optimizer:
            out["optimizer"] = self.estimate.optimizer
        if operators:
            precision = dict(zip((op.name for op in self.graph.ops), self.plan.op_precision, strict=True))
            out["operators"] = [dict(row, planned=precision[row["name"]]) for row in self.graph.report()]
        return out


def size_graph(
    graph: ModelGraph,
    task: Task = "inference",
    *,
    device: DeviceTraits | None = None,
    precision: str | None = None,
    optimizer: Optimizer = "adam",
    headroom: float = DEFAULT_HEADROOM,
    framework: str = "pytorch",
) -> SizingReport:
    """Plan and size ``graph`` (``precision`` forces the plan's lowered precision) for a process of
    ``framework`` (``allowance``)."""
    if headroom < 0:
        raise InvalidRequest("headroom", f"must be zero or more, got {headroom}")
    low: str
    if precision is None:
        low = choose_low(device, task) if device is not None else "fp16"
    else:
        low = precision
        if device is not None and low != "fp32" and not device.supports(low):
            raise InvalidRequest("precision", f"{device.model} has no {low} matrix math")
    plan = plan_graph(graph, low)
    fp32 = plan if low == "fp32" else plan_graph(graph, "fp32")
    speed = relative_speed(plan, device) if device is not None else None
    return SizingReport(
        graph, plan, estimate(plan, task, optimizer), estimate(fp32, task, optimizer), device, headroom, speed,
        allowance(framework, device),
    )


def size_model(
    source: str | Path | bytes | Any,
    batch: int = 1,
    task: Task = "inference",
    *,
    device_model: str | None = None,
    precision: str | None = None,
    optimizer: Optimizer = "adam",
    headroom: float = DEFAULT_HEADROOM,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    framework: str = "pytorch",
) -> SizingReport:
    """Read an ONNX model at ``batch`` and size it for ``device_model`` (see the module doc)."""
    graph = read_onnx(source, batch, input_shapes=input_shapes)
    device = traits_named(device_model) if device_model else None
    return size_graph(graph, task, device=device, precision=precision, optimizer=optimizer, headroom=headroom,
                      framework=framework)
