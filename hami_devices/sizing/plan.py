"""A precision plan: the precision each operator runs at and each tensor is stored at.

``plan_graph(graph, low)`` runs every ``lowered`` operator at ``low`` (fp16 or bf16;
fp32 gives the all-fp32 plan), every ``fp32`` operator at fp32 whatever ``low`` is,
and every ``neutral`` operator at the widest precision among its floating activation
inputs (at ``low`` when it reads parameters only, as an embedding lookup does).  A
parameter is stored at the widest precision its readers run at.  Where a reader runs
at another precision than the tensor is stored at, the plan inserts one cast per
(tensor, precision) just before the first such reader; every such reader shares it.

The result is a list of steps in execution order (casts and operators), each naming
what it reads and writes, and the stored precision of every floating tensor: enough to
size the memory (``memory``), to cost the time (``speed``) and to build the mixed
model a runtime runs (``mixed``).

``choose_low(traits, task)`` picks ``low`` for a device from its traits: the 16-bit
float with the higher peak rate; on a tie bf16 for training (fp32's range, no loss
scaling) and fp16 for inference (three more mantissa bits); fp32 where the device
supports neither or its traits are unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hami_devices.errors import InvalidRequest
from hami_devices.models import PRECISION_BYTES, DeviceTraits
from hami_devices.sizing.graph import ModelGraph
from hami_devices.sizing.oplists import OpClass

LowPrecision = Literal["fp32", "bf16", "fp16"]
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})  # outputs share their input's storage
WIDTH = {"fp16": 0, "bf16": 1, "fp32": 2}  # bf16 has fp32's exponent: the wider of the two 16-bit formats
ONNX_FLOAT = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
STORED_AS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp32"}


@dataclass(frozen=True)
class Step:
    """One execution step: an operator of the graph (``op`` >= 0) or a cast the plan inserts (``op`` == -1)."""

    name: str
    op: int
    precision: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    workspace: int = 0  # bytes the operator holds only while it runs


def workspace_bytes(graph: ModelGraph, op_index: int, precision: str) -> int:
    """Scratch an operator needs while it runs: a recurrent layer projects its whole input sequence onto
    the gates in one product before stepping through time (cuDNN and onnxruntime both do), and holds it."""
    op = graph.ops[op_index]
    if op.op_type not in ("LSTM", "GRU", "RNN") or len(op.inputs) < 2:
        return 0
    x, w = graph.tensors[op.inputs[0]].shape, graph.tensors[op.inputs[1]].shape
    if len(x) != 3 or len(w) != 3:
        return 0
    seq, batch, _ = x
    directions, gates_hidden, _ = w
    return int(seq * batch * directions * gates_hidden * PRECISION_BYTES[precision])


@dataclass
class PrecisionPlan:
    graph: ModelGraph
    low: LowPrecision
    op_precision: list[str]
    stored: dict[str, str]  # floating tensor (graph's or a cast's) -> precision
    steps: list[Step]
    cast_of: dict[tuple[str, str], str]  # (tensor, precision) -> the cast's output
    aliases: dict[str, str]  # a view's output -> the tensor it views

    def tensor_bytes(self, name: str) -> int:
        """Bytes of tensor ``name`` as this plan stores it (a cast output's size is its source's)."""
        source = name.split("@", 1)[0]
        tensor = self.graph.tensors[source]
        if name in self.stored:
            return int(tensor.numel * PRECISION_BYTES[self.stored[name]])
        return tensor.nbytes

    def input_name(self, op: int, tensor: str) -> str:
        """What op ``op`` reads for ``tensor``: the tensor itself or the cast of it to its precision."""
        return self.cast_of.get((tensor, self.op_precision[op]), tensor)

    @property
    def lowered_fp32_ops(self) -> list[str]:
        """fp32-listed operators the plan runs below fp32 (always empty: the invariant tests check)."""
        return [
            op.name
            for op, p in zip(self.graph.ops, self.op_precision, strict=True)
            if op.op_class is OpClass.FP32 and p != "fp32"
        ]

    def groups(self) -> dict[str, dict[str, object]]:
        """Per operator class: the precision(s) it runs at, and its operator types with counts."""
        out: dict[str, dict[str, object]] = {}
        for op, precision in zip(self.graph.ops, self.op_precision, strict=True):
            group = out.setdefault(op.op_class.value, {"precisions": {}, "op_types": {}})
            for key, value in (("precisions", precision), ("op_types", op.op_type)):
                counts = group[key]
                assert isinstance(counts, dict)
                counts[value] = counts.get(value, 0) + 1
        return out


def _widest(precisions: list[str]) -> str:
    return max(precisions, key=WIDTH.__getitem__)


def plan_graph(graph: ModelGraph, low: str) -> PrecisionPlan:
    """The plan that runs ``graph``'s lowered operators at ``low`` (see the module doc)."""
    if low not in WIDTH:
        raise InvalidRequest("precision", f"a plan lowers to fp16, bf16 or fp32, not {low!r}")
    tensors = graph.tensors
    stored: dict[str, str] = {
        n: STORED_AS[t.dtype] for n, t in tensors.items() if t.floating and t.role == "input"
    }
    op_precision: list[str] = []
    for op in graph.ops:
        if op.op_class is OpClass.LOWERED:
            run = low
        elif op.op_class is OpClass.FP32:
            run = "fp32"
        else:
            carried = [stored[n] for n in op.uses if n in stored and tensors[n].role != "param"]
            run = _widest(carried) if carried else low
        op_precision.append(run)
        for out in op.outputs:
            if tensors[out].floating:
                stored[out] = run
    for index, op in enumerate(graph.ops):  # a parameter is stored at the widest precision its readers run at
        for name in op.uses:
            if tensors[name].role == "param" and tensors[name].floating:
                previous = stored.get(name)
                stored[name] = op_precision[index] if previous is None else _widest([previous, op_precision[index]])

    steps: list[Step] = []
    cast_of: dict[tuple[str, str], str] = {}
    aliases: dict[str, str] = {}
    for index, op in enumerate(graph.ops):
        run = op_precision[index]
        for name in op.uses:
            if name in stored and stored[name] != run and (name, run) not in cast_of:
                cast = f"{name}@{run}"
                cast_of[(name, run)] = cast
                stored[cast] = run
                steps.append(Step(f"cast {name} to {run}", -1, run, (name,), (cast,)))
        reads = tuple(cast_of.get((n, run), n) for n in op.uses)
        steps.append(Step(op.name, index, run, reads, op.outputs, workspace_bytes(graph, index, run)))
        if op.op_type in VIEW_OPS and tensors[op.inputs[0]].role == "activation":
            aliases[op.outputs[0]] = reads[0]
    return PrecisionPlan(graph, low, op_precision, stored, steps, cast_of, aliases)  # type: ignore[arg-type]


def choose_low(traits: DeviceTraits | None, task: str = "inference") -> LowPrecision:
    """The precision a device's plan lowers to (see the module doc)."""
    if traits is None:
        return "fp32"
    rates = {p: traits.peak_tflops.get(p, 0.0) for p in ("bf16", "fp16")}
    best = max(rates.values())
    if best <= 0:
        return "fp32"
    tied = [p for p, r in rates.items() if r == best]
    if len(tied) == 1:
        return tied[0]  # type: ignore[return-value]
    return "bf16" if task == "training" else "fp16"
