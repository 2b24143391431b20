"""Reading ONNX graphs, the operator lists and the plans: answers taken from the ONNX files and the runtime."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from hami_devices.errors import InvalidRequest
from hami_devices.sizing.graph import read_onnx
from hami_devices.sizing.mixed import mixed_model
from hami_devices.sizing.oplists import classify
from hami_devices.sizing.plan import choose_low, plan_graph
from hami_devices.traits import all_traits

from .corpus import CORPUS, feeds

# From PyTorch's autocast op reference (CUDA): ops that autocast to float16, ops that autocast to float32,
# written as the ONNX operators that compute them.
PUBLISHED_LOWERED = {"MatMul", "Gemm", "Conv", "ConvTranspose", "LSTM", "GRU", "RNN", "PRelu"}
PUBLISHED_FP32 = {"Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization", "Exp", "Log", "Pow",
                  "ReduceSum", "ReduceProd", "CumSum", "Reciprocal", "SoftmaxCrossEntropyLoss",
                  "NegativeLogLikelihoodLoss"}  # fmt: skip
NEITHER = {"Relu", "Add", "Mul", "Reshape", "Transpose", "Concat", "MaxPool", "BatchNormalization", "Gather"}


def test_operator_classes_follow_the_published_lists() -> None:
    assert {classify(op) for op in PUBLISHED_LOWERED} == {"lowered"}
    assert {classify(op) for op in PUBLISHED_FP32} == {"fp32"}
    assert {classify(op) for op in NEITHER} == {"neutral"}


@pytest.mark.parametrize("family", [e.family for e in CORPUS])
def test_parameter_bytes_are_the_files_initializers(corpus_dir: dict[str, Path], family: str) -> None:
    model = onnx.load(str(corpus_dir[family]))
    graph = read_onnx(corpus_dir[family], batch=2)
    expected = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    assert graph.param_bytes == expected
    assert sum(graph.op_param_bytes(i) for i in range(len(graph.ops))) == expected


@pytest.mark.parametrize("family", ["resnet", "transformer_encoder", "lstm_classifier"])
def test_activation_bytes_are_what_the_runtime_writes(corpus_dir: dict[str, Path], family: str) -> None:
    """Per operator, the bytes of its outputs at batch 3 equal the output sizes onnxruntime's profiler reports."""
    model = onnx.load(str(corpus_dir[family]))
    graph = read_onnx(corpus_dir[family], batch=3)
    with tempfile.TemporaryDirectory() as scratch:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(scratch) / "p")
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        session.run(None, feeds(model, 3))
        events = json.loads(Path(session.end_profiling()).read_text())
    runtime = {e["name"].removesuffix("_kernel_time"): int(e["args"]["output_size"])
               for e in events if e.get("cat") == "Node"}  # fmt: skip
    report = {row["name"]: row["activation_bytes"] for row in graph.report()}
    assert report.keys() == runtime.keys()
    assert report == runtime


@pytest.mark.parametrize("low", ["fp16", "bf16"])
@pytest.mark.parametrize("family", [e.family for e in CORPUS])
def test_plans_never_lower_an_fp32_listed_operator(corpus_dir: dict[str, Path], family: str, low: str) -> None:
    plan = plan_graph(read_onnx(corpus_dir[family], batch=2), low)
    for op, precision in zip(plan.graph.ops, plan.op_precision, strict=True):
        if op.op_type in PUBLISHED_FP32:
            assert precision == "fp32", op.name
        if op.op_type in PUBLISHED_LOWERED:
            assert precision == low, op.name
    assert plan.lowered_fp32_ops == []


@pytest.mark.parametrize("family", ["resnet", "vision_transformer", "decoder_lm", "gru_classifier"])
def test_the_mixed_model_runs_fp32_operators_on_fp32_inputs_and_keeps_the_result(
    corpus_dir: dict[str, Path], family: str
) -> None:
    """The fp16 plan built as a model: onnx's own type inference puts every fp32-listed operator on fp32
    inputs and every lowered one on fp16; onnxruntime runs it close to the fp32 model's answer."""
    model = onnx.load(str(corpus_dir[family]))
    mixed = mixed_model(plan_graph(read_onnx(model, batch=2), "fp16"), model)
    inferred = onnx.shape_inference.infer_shapes(mixed, strict_mode=True)
    types = {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *inferred.graph.input]}
    types.update({t.name: t.data_type for t in inferred.graph.initializer})
    for node in inferred.graph.node:
        wanted = {"fp32": onnx.TensorProto.FLOAT, "lowered": onnx.TensorProto.FLOAT16}.get(classify(node.op_type))
        if wanted is not None:
            assert types[node.input[0]] == wanted, node.name
    inputs = feeds(model, 2)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)  # noqa: E731
    (full,), (half,) = run(model), run(mixed)
    np.testing.assert_allclose(half.astype(np.float32), full, rtol=0.05, atol=0.05)


def test_the_device_picks_its_faster_16_bit_format() -> None:
    by_model = {t.model: t for t in all_traits()}
    assert choose_low(by_model["T4"]) == "fp16"  # no bf16 on Turing
    assert choose_low(by_model["A100-80GB"], "training") == "bf16"  # tie: bf16 keeps fp32's range
    assert choose_low(by_model["A100-80GB"], "inference") == "fp16"
    assert choose_low(None) == "fp32"


def test_bad_models_and_shapes_name_the_field(tmp_path: Path, corpus_dir: dict[str, Path]) -> None:
    with pytest.raises(InvalidRequest) as info:
        read_onnx(tmp_path / "missing.onnx")
    assert info.value.field == "model.path"
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(InvalidRequest) as info:
        read_onnx(tmp_path / "junk.onnx")
    assert info.value.field == "model.path"
    with pytest.raises(InvalidRequest) as info:
        read_onnx(corpus_dir["resnet"], batch=0)
    assert info.value.field == "batch"
    with pytest.raises(InvalidRequest) as info:
        read_onnx(corpus_dir["resnet"], batch=2, input_shapes={"nope": [1]})
    assert info.value.field == "input_shapes"
