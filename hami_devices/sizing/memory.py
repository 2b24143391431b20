"""Memory a model needs under a precision plan, with its breakdown.

Inference: the parameters at their planned precision, plus the peak of the live
activations (inputs, intermediates, casts, outputs) over the plan's steps
(``liveness``).

Training, as mixed-precision training keeps it (Micikevicius et al., 2018; the
accounting of the ZeRO paper): the working weights at their planned precision, their
gradients at the same precision, an fp32 master copy of every parameter the plan
lowers, and the optimizer's fp32 state per parameter (Adam: two moments; SGD with
momentum: one; plain SGD: none).  Activations: what the forward pass saves for the
backward pass (``saved_for_backward``), plus the largest gradient pair the backward
pass holds at once (an operator's output gradient while it writes its input
gradient), or the forward pass's own peak if that is larger.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from hami_devices.errors import InvalidRequest
from hami_devices.sizing.liveness import Liveness, peak_live
from hami_devices.sizing.oplists import OpClass
from hami_devices.sizing.plan import PrecisionPlan

MIB = 1 << 20
Task = Literal["inference", "training"]
Optimizer = Literal["adam", "sgd-momentum", "sgd"]
OPTIMIZER_STATES = {"adam": 2, "sgd-momentum": 1, "sgd": 0}  # fp32 values per parameter

# operators whose backward pass needs their output, not their input
SAVES_OUTPUT = frozenset({"Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Exp", "Sqrt", "Reciprocal"})
# operators whose backward pass needs neither (a sum, a view, a copy, a mean over a window)
SAVES_NOTHING = frozenset(
    {
        "Add", "Sub", "Neg", "Identity", "Cast", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze",
        "Concat", "Split", "Slice", "Expand", "Tile", "Pad", "Shape", "Size", "Gather", "GlobalAveragePool",
        "AveragePool", "ReduceMean", "ReduceSum", "Dropout", "ConstantOfShape", "Range", "Equal", "Where",
    }
)  # fmt: skip


@dataclass(frozen=True)
class MemoryEstimate:
    task: Task
    precision: str  # the plan's lowered precision
    weights: int  # bytes, as are the rest
    activations: int
    gradients: int = 0
    optimizer_states: int = 0
    master_weights: int = 0
    optimizer: Optimizer | None = None
    peak_at: str = ""  # the step where the activation peak is reached
    details: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.weights + self.activations + self.gradients + self.optimizer_states + self.master_weights

    @property
    def total_mib(self) -> float:
        return self.total / MIB

    def breakdown_mib(self) -> dict[str, float]:
        parts = {
            "weights": self.weights,
            "activations": self.activations,
            "gradients": self.gradients,
            "optimizer_states": self.optimizer_states,
            "master_weights": self.master_weights,
        }
        return {k: round(v / MIB, 3) for k, v in parts.items()}


def inference_liveness(plan: PrecisionPlan) -> Liveness:
    graph = plan.graph
    resident = [t.name for t in graph.tensors.values() if t.role in ("param", "input")]
    return peak_live(plan.steps, plan.tensor_bytes, resident, kept=graph.outputs, aliases=plan.aliases)


def _weight_bytes(plan: PrecisionPlan) -> int:
    return sum(plan.tensor_bytes(t.name) for t in plan.graph.params)


def saved_for_backward(plan: PrecisionPlan) -> set[str]:
    """Tensors the forward pass keeps for the backward pass (as the plan stores them)."""
    graph = plan.graph
    saved: set[str] = set()
    for index, op in enumerate(graph.ops):
        if op.op_type in SAVES_NOTHING:
            continue
        if op.op_type in SAVES_OUTPUT:
            saved.update(n for n in op.outputs if graph.tensors[n].floating)
            continue
        for name in op.inputs:
            tensor = graph.tensors[name]
            if tensor.role != "param" and (tensor.floating or op.op_class is OpClass.LOWERED):
                saved.add(plan.input_name(index, name))
    return saved


def _backward_pair(plan: PrecisionPlan) -> int:
    """The largest (output gradient + input gradients) of one operator: both exist while it runs backward."""
    graph = plan.graph
    best = 0
    for index, op in enumerate(graph.ops):
        grads = [n for n in (*op.outputs, *op.inputs) if graph.tensors[n].floating and graph.tensors[n].role != "param"]
        best = max(best, sum(plan.tensor_bytes(plan.input_name(index, n)) for n in grads))
    return best


def estimate(plan: PrecisionPlan, task: Task = "inference", optimizer: Optimizer = "adam") -> MemoryEstimate:
    """The memory of running ``plan`` for ``task`` (see the module doc)."""
    if task not in ("inference", "training"):
        raise InvalidRequest("task", f"must be inference or training, not {task!r}")
    if optimizer not in OPTIMIZER_STATES:
        raise InvalidRequest("optimizer", f"must be one of {sorted(OPTIMIZER_STATES)}, not {optimizer!r}")
    live = inference_liveness(plan)
    weights = _weight_bytes(plan)
    at = plan.steps[live.peak_step].name if plan.steps else ""
    if task == "inference":
        return MemoryEstimate("inference", plan.low, weights, live.peak - weights, peak_at=at)
    graph = plan.graph
    floats = [t for t in graph.params if t.floating]
    saved = saved_for_backward(plan)
    saved_bytes = sum(plan.tensor_bytes(n) for n in saved)
    inputs = sum(t.nbytes for t in graph.tensors.values() if t.role == "input")
    backward = inputs + saved_bytes + _backward_pair(plan)
    forward = live.peak - weights
    lowered = [t for t in floats if plan.stored[t.name] != "fp32"]
    return MemoryEstimate(
        "training",
        plan.low,
        weights,
        max(forward, backward),
        gradients=sum(plan.tensor_bytes(t.name) for t in floats),
        optimizer_states=OPTIMIZER_STATES[optimizer] * 4 * sum(t.numel for t in floats),
        master_weights=4 * sum(t.numel for t in lowered),
        optimizer=optimizer,
        peak_at="backward" if backward >= forward else at,
        details={"saved_for_backward": saved_bytes, "backward_gradients": backward - inputs - saved_bytes},
    )


def weights_only(plan: PrecisionPlan, task: Task = "inference", optimizer: Optimizer = "adam") -> int:
    """The Accelerate-style figure: parameter bytes at the precision, times about four for Adam training."""
    weights = _weight_bytes(plan)
    if task == "inference":
        return weights
    return weights * (4 if optimizer == "adam" else 3 if optimizer == "sgd-momentum" else 2)
