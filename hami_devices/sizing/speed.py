"""Expected speed of a plan on a device, from its traits: a roofline per step.

A step takes the longer of its arithmetic at the device's peak rate and its memory
traffic (what it reads and writes, as the plan stores it) at the device's memory
bandwidth.  Lowered operators run on the matrix units at the plan's precision; every
other step (fp32 and neutral operators, casts) is costed at the fp32 rate, which is
what the vector units deliver for them, and is in practice bound by its traffic.
The relative speed of a plan is the all-fp32 plan's time over its own, on the same
device; None where the device has no fp32 matrix rate to compare with (Ascend 310P).
"""

from __future__ import annotations

from hami_devices.models import DeviceTraits
from hami_devices.sizing.oplists import OpClass
from hami_devices.sizing.plan import PrecisionPlan, plan_graph


def plan_seconds(plan: PrecisionPlan, traits: DeviceTraits) -> float | None:
    """Roofline time of one pass of ``plan`` on ``traits`` (None when a step's precision has no rate)."""
    peak = traits.peak_tflops
    vector = peak.get("fp32") or max(peak.values())
    bandwidth = traits.memory_bandwidth_gbps * 1e9
    total = 0.0
    for step in plan.steps:
        traffic = sum(plan.tensor_bytes(n) for n in (*step.reads, *step.writes))
        if step.op < 0:
            total += traffic / bandwidth
            continue
        op = plan.graph.ops[step.op]
        rate = peak.get(step.precision, 0.0) if op.op_class is OpClass.LOWERED else vector  # type: ignore[call-overload]
        if not rate:
            return None
        total += max(op.flops / (rate * 1e12), traffic / bandwidth)
    return total


def relative_speed(plan: PrecisionPlan, traits: DeviceTraits) -> float | None:
    """The all-fp32 plan's time over ``plan``'s on the same device (>1: faster)."""
    mine = plan_seconds(plan, traits)
    base = plan_seconds(plan if plan.low == "fp32" else plan_graph(plan.graph, "fp32"), traits)
    if mine is None or base is None or mine <= 0:
        return None
    return base / mine
