"""The ONNX model that runs a precision plan: converted parameters and the plan's casts.

Parameters are converted to the precision the plan stores them at, every cast step
becomes a ``Cast`` node just before its first reader, readers take the cast's output,
and floating outputs carry their operator's precision.  A runtime can then execute
the plan as planned, and its own memory statistics can be set against the estimate.
"""

from __future__ import annotations

from typing import Any

from hami_devices.errors import InvalidRequest
from hami_devices.extras import require
from hami_devices.sizing.graph import load_model
from hami_devices.sizing.plan import PrecisionPlan

_NUMPY = {"fp32": "float32", "fp16": "float16"}


def _convert_tensor(onnx: Any, tensor: Any, precision: str) -> Any:
    numpy_helper = onnx.numpy_helper
    array = numpy_helper.to_array(tensor)
    return numpy_helper.from_array(array.astype(_NUMPY[precision]), tensor.name)


def mixed_model(plan: PrecisionPlan, source: Any) -> Any:
    """An ``onnx.ModelProto`` of ``source`` (the plan's model) that runs ``plan`` (fp32 and fp16 plans)."""
    if plan.low not in _NUMPY:
        raise InvalidRequest("precision", f"only fp32 and fp16 plans can be materialised, not {plan.low}")
    onnx = require("onnx", "building a plan's mixed-precision model")
    helper = onnx.helper
    elem = {"fp32": onnx.TensorProto.FLOAT, "fp16": onnx.TensorProto.FLOAT16}
    model = onnx.ModelProto()
    model.CopyFrom(load_model(source))
    graph = model.graph
    tensors = plan.graph.tensors

    for index, init in enumerate(graph.initializer):
        wanted = plan.stored.get(init.name)
        if wanted is not None and init.data_type != elem[wanted]:
            graph.initializer[index].CopyFrom(_convert_tensor(onnx, init, wanted))

    by_output = {n.output[0]: n for n in graph.node if n.output}
    nodes: list[Any] = []
    for node in graph.node:  # constants first: they are parameters, read by any step
        if node.op_type == "Constant" and tensors.get(node.output[0]) and tensors[node.output[0]].role == "param":
            wanted = plan.stored.get(node.output[0])
            if wanted is not None:
                value = node.attribute[0]
                value.t.CopyFrom(_convert_tensor(onnx, value.t, wanted))
                value.t.name = ""
            nodes.append(node)
    for step in plan.steps:
        if step.op < 0:
            (source_name,), (cast,) = step.reads, step.writes
            nodes.append(helper.make_node("Cast", [source_name], [cast], to=elem[step.precision], name=step.name))
            continue
        op = plan.graph.ops[step.op]
        node = by_output[op.outputs[0]]
        renamed = {n: plan.input_name(step.op, n) for n in op.inputs}
        node.input[:] = [renamed.get(n, n) if n else n for n in node.input]
        if node.op_type == "Cast" and tensors[op.outputs[0]].floating:
            for attr in node.attribute:
                if attr.name == "to":
                    attr.i = elem[step.precision]
        if node.op_type == "ConstantOfShape" and tensors[op.outputs[0]].floating:
            for attr in node.attribute:
                if attr.name == "value":
                    attr.t.CopyFrom(_convert_tensor(onnx, attr.t, step.precision))
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]
    for output in graph.output:
        precision = plan.stored.get(output.name)
        if precision is not None:
            output.type.tensor_type.elem_type = elem[precision]
    return model
