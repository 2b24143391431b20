"""A model graph read from ONNX, sized for one batch: every tensor's shape and bytes, every operator.

``read_onnx(source, batch)`` fixes the first dimension of each graph input to ``batch``
(other symbolic dimensions come from ``input_shapes``), runs ONNX shape inference, and
keeps what sizing needs: the operators in topological order with their class
(``oplists``) and operation count (``flops``), and each tensor's shape, element type
and role (a parameter, a graph input, an activation).  Constant nodes become
parameters, as runtimes fold them into initializers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.extras import require
from hami_devices.sizing.flops import op_flops
from hami_devices.sizing.oplists import OpClass, allowed_precisions, classify

FLOAT_TYPES = frozenset({"float32", "float16", "bfloat16", "float64"})


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy's name: float32, int64, ...
    itemsize: int
    role: str  # "param", "input" or "activation"

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def floating(self) -> bool:
        return self.dtype in FLOAT_TYPES


@dataclass(frozen=True)
class Op:
    name: str
    op_type: str
    inputs: tuple[str, ...]  # present inputs only
    outputs: tuple[str, ...]
    op_class: OpClass
    flops: float
    uses: tuple[str, ...] = ()  # inputs plus outer-scope names its subgraphs read

    @property
    def precisions(self) -> tuple[str, ...]:
        return allowed_precisions(self.op_class)


@dataclass
class ModelGraph:
    name: str
    batch: int
    ops: list[Op]
    tensors: dict[str, Tensor]
    inputs: list[str]
    outputs: list[str]
    source: str = ""
    opset: int = 0
    _first_user: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for index, op in enumerate(self.ops):
            for name in op.uses:
                self._first_user.setdefault(name, index)

    @property
    def params(self) -> list[Tensor]:
        return [t for t in self.tensors.values() if t.role == "param"]

    @property
    def param_bytes(self) -> int:
        return sum(t.nbytes for t in self.params)

    @property
    def param_count(self) -> int:
        return sum(t.numel for t in self.params if t.floating)

    def op_param_bytes(self, index: int) -> int:
        """Bytes of the parameters first read by op ``index`` (a shared parameter counts once)."""
        return sum(
            self.tensors[n].nbytes
            for n in self.ops[index].uses
            if self.tensors[n].role == "param" and self._first_user.get(n) == index
        )

    def op_activation_bytes(self, index: int) -> int:
        return sum(self.tensors[n].nbytes for n in self.ops[index].outputs)

    def report(self) -> list[dict[str, Any]]:
        """Per operator: type, class, allowed precisions, parameter and activation bytes, operations."""
        return [
            {
                "name": op.name,
                "op_type": op.op_type,
                "class": op.op_class.value,
                "precisions": list(op.precisions),
                "param_bytes": self.op_param_bytes(i),
                "activation_bytes": self.op_activation_bytes(i),
                "flops": op.flops,
            }
            for i, op in enumerate(self.ops)
        ]


def _onnx() -> Any:
    return require("onnx", "reading ONNX model graphs")


def load_model(source: str | Path | bytes | Any) -> Any:
    """An ``onnx.ModelProto`` from a path, serialized bytes or a ModelProto."""
    onnx = _onnx()
    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, bytes):
        return onnx.load_from_string(source)
    path = Path(source)
    if not path.is_file():
        raise InvalidRequest("model.path", f"{path} is not a file")
    try:
        return onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError and friends, with no common base
        raise InvalidRequest("model.path", f"{path} is not an ONNX model: {exc}") from None


def _dims(type_proto: Any) -> list[int | str | None] | None:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for d in type_proto.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dims


def _fix_input_shapes(model: Any, batch: int, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    """Set every graph input's shape: ``input_shapes`` where given, else its own with dimension 0 = batch."""
    initializers = {t.name for t in model.graph.initializer}
    fixed: dict[str, tuple[int, ...]] = {}
    unknown = set(input_shapes) - {i.name for i in model.graph.input}
    if unknown:
        raise InvalidRequest("input_shapes", f"the model has no input named {sorted(unknown)[0]!r}")
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if value.name in input_shapes:
            shape = tuple(int(d) for d in input_shapes[value.name])
            if any(d <= 0 for d in shape):
                raise InvalidRequest(f"input_shapes.{value.name}", f"dimensions must be positive, got {list(shape)}")
        else:
            dims = _dims(value.type)
            if dims is None:
                raise InvalidRequest("input_shapes", f"input {value.name!r} has no shape; give it in input_shapes")
            shape_list: list[int] = []
            for axis, d in enumerate(dims):
                if axis == 0 and not isinstance(d, int):
                    shape_list.append(batch)
                elif axis == 0 and d != batch:
                    raise InvalidRequest(
                        "batch", f"input {value.name!r} has a fixed batch dimension {d}; export it with a symbolic one"
                    )
                elif isinstance(d, int):
                    shape_list.append(d)
                else:
                    raise InvalidRequest(
                        "input_shapes", f"input {value.name!r} dimension {axis} ({d!r}) is symbolic; give its shape"
                    )
            shape = tuple(shape_list)
        fixed[value.name] = shape
        tensor_type = value.type.tensor_type
        tensor_type.shape.ClearField("dim")
        for d in shape:
            tensor_type.shape.dim.add().dim_value = d
    return fixed


def _outer_names(graph: Any, local: set[str]) -> set[str]:
    """Names a subgraph reads from its enclosing scope."""
    defined = set(local) | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    used: set[str] = set()
    for node in graph.node:
        used.update(n for n in node.input if n)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                used |= _outer_names(sub, defined)
        defined.update(node.output)
    return used - defined


def _topological(nodes: Sequence[Any], available: set[str]) -> list[Any]:
    """``nodes`` in an order where each runs after its producers (ONNX requires one; not all exporters keep it)."""
    producer = {out: i for i, n in enumerate(nodes) for out in n.output if out}
    order: list[Any] = []
    state = [0] * len(nodes)  # 0 new, 1 on the stack, 2 done
    for start in range(len(nodes)):
        stack = [(start, iter([producer[n] for n in nodes[start].input if n in producer]))]
        if state[start]:
            continue
        state[start] = 1
        while stack:
            index, deps = stack[-1]
            nxt = next(deps, None)
            if nxt is None:
                stack.pop()
                state[index] = 2
                order.append(nodes[index])
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter([producer[n] for n in nodes[nxt].input if n in producer])))
            elif state[nxt] == 1:
                raise InvalidRequest("model", f"the graph has a cycle through node {nodes[nxt].name!r}")
    missing = {n for node in nodes for n in node.input if n and n not in producer and n not in available}
    if missing:
        raise InvalidRequest("model", f"tensor {sorted(missing)[0]!r} is read but never produced")
    return order


def read_onnx(
    source: str | Path | bytes | Any,
    batch: int = 1,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> ModelGraph:
    """The graph of an ONNX model at ``batch`` (see the module doc)."""
    if batch < 1:
        raise InvalidRequest("batch", f"must be at least 1, got {batch}")
    onnx = _onnx()
    model = onnx.ModelProto()
    model.CopyFrom(load_model(source))
    fixed = _fix_input_shapes(model, batch, input_shapes or {})
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as exc:  # InferenceError, ValidationError: no common base in the onnx package
        raise InvalidRequest("model", f"shape inference failed: {exc}") from None
    graph = inferred.graph

    def numpy_type(elem_type: int) -> tuple[str, int]:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
        return dtype.name if elem_type != onnx.TensorProto.BFLOAT16 else "bfloat16", dtype.itemsize

    tensors: dict[str, Tensor] = {}
    for init in graph.initializer:
        dtype, size = numpy_type(init.data_type)
        tensors[init.name] = Tensor(init.name, tuple(int(d) for d in init.dims), dtype, size, "param")
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].HasField("t"):
            t = node.attribute[0].t
            dtype, size = numpy_type(t.data_type)
            tensors[node.output[0]] = Tensor(node.output[0], tuple(int(d) for d in t.dims), dtype, size, "param")
    typed = {v.name: v for v in [*graph.value_info, *graph.output, *graph.input]}
    for name, shape in fixed.items():
        dtype, size = numpy_type(typed[name].type.tensor_type.elem_type)
        tensors[name] = Tensor(name, shape, dtype, size, "input")

    ops: list[Op] = []
    nodes = [n for n in graph.node if n.output and n.output[0] not in tensors]
    for node in _topological(nodes, set(tensors)):
        for out in node.output:
            if not out:
                continue
            dims = _dims(typed[out].type) if out in typed else None
            if dims is None or not all(isinstance(d, int) for d in dims):
                raise InvalidRequest(
                    "model", f"shape inference could not size {out!r} (output of {node.op_type} {node.name!r})"
                )
            dtype, size = numpy_type(typed[out].type.tensor_type.elem_type)
            tensors[out] = Tensor(out, tuple(int(d) for d in dims if isinstance(d, int)), dtype, size, "activation")
        inputs = tuple(n for n in node.input if n)
        outer: set[str] = set()
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                outer |= _outer_names(sub, set())
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute if not a.HasField("g")}
        in_shapes = [tensors[n].shape if n in tensors else None for n in node.input]
        outputs = tuple(n for n in node.output if n)
        flops = op_flops(node.op_type, in_shapes, [tensors[n].shape for n in outputs], attrs)
        uses = tuple(dict.fromkeys([*inputs, *sorted(outer & set(tensors))]))
        ops.append(Op(node.name or f"{node.op_type}_{len(ops)}", node.op_type, inputs, outputs,
                      classify(node.op_type), flops, uses))
    name = graph.name or (Path(source).stem if isinstance(source, (str, Path)) else "model")
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return ModelGraph(
        name=name,
        batch=batch,
        ops=ops,
        tensors=tensors,
        inputs=list(fixed),
        outputs=[o.name for o in graph.output],
        source=str(source) if isinstance(source, (str, Path)) else "",
        opset=opset,
    )
