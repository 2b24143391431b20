"""Memory estimates against onnxruntime's own allocator statistics, and the training breakdown's definition."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from hami_devices.sizing.graph import read_onnx
from hami_devices.sizing.measure import measure_onnxruntime
from hami_devices.sizing.memory import estimate, weights_only
from hami_devices.sizing.mixed import mixed_model
from hami_devices.sizing.plan import plan_graph

from .corpus import CORPUS, feeds


def test_inference_estimates_match_the_runtimes_peak(corpus_dir: dict[str, Path]) -> None:
    """Every corpus model at its two smaller batches, run in fp32 (the precision onnxruntime's CPU build
    executes natively): the estimated peak is within 25 % of the arena's measured peak, 15 % at the median,
    and closer than the weights-only estimate on the activation-heavy cases."""
    errors, baseline = [], []
    for entry in CORPUS:
        model = onnx.load(str(corpus_dir[entry.family]))
        for batch in entry.batches[:2]:
            plan = plan_graph(read_onnx(model, batch), "fp32")
            measured = measure_onnxruntime(mixed_model(plan, model), feeds(model, batch))
            error = abs(estimate(plan).total - measured.peak) / measured.peak
            assert error <= 0.25, (entry.family, batch, error)
            errors.append(error)
            baseline.append(abs(weights_only(plan) - measured.peak) / measured.peak)
    assert statistics.median(errors) <= 0.15
    assert sum(errors) < sum(baseline)


def test_the_runtime_peak_grows_with_the_batch_as_estimated(corpus_dir: dict[str, Path]) -> None:
    model = onnx.load(str(corpus_dir["mobilenet"]))
    small, large = (plan_graph(read_onnx(model, b), "fp32") for b in (2, 8))
    grown = measure_onnxruntime(model, feeds(model, 8)).peak - measure_onnxruntime(model, feeds(model, 2)).peak
    assert grown > 0
    assert estimate(large).total - estimate(small).total == pytest.approx(grown, rel=0.1)


def _float_params(path: Path) -> tuple[int, dict[str, np.ndarray]]:
    arrays = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    floats = {k: a for k, a in arrays.items() if a.dtype == np.float32}
    return sum(a.size for a in floats.values()), floats


@pytest.mark.parametrize("family", ["resnet", "decoder_lm", "lstm_classifier"])
def test_training_model_states_follow_the_mixed_precision_recipe(corpus_dir: dict[str, Path], family: str) -> None:
    """Adam keeps two fp32 moments per parameter; SGD with momentum one; mixed precision adds an fp32 master
    copy of every lowered parameter and stores gradients like the weights (counts from the file itself)."""
    count, floats = _float_params(corpus_dir[family])
    graph = read_onnx(corpus_dir[family], batch=2)
    fp32 = estimate(plan_graph(graph, "fp32"), "training", "adam")
    assert fp32.optimizer_states == 8 * count
    assert fp32.gradients == 4 * count
    assert fp32.master_weights == 0
    mixed_plan = plan_graph(graph, "bf16")
    mixed = estimate(mixed_plan, "training", "sgd-momentum")
    assert mixed.optimizer_states == 4 * count
    lowered = sum(a.size for name, a in floats.items() if mixed_plan.stored[name] == "bf16")
    assert lowered > 0
    assert mixed.master_weights == 4 * lowered
    assert mixed.gradients == 2 * lowered + 4 * (count - lowered)
    assert estimate(mixed_plan, "training", "sgd").optimizer_states == 0
    inference = estimate(mixed_plan, "inference")
    assert mixed.activations >= inference.activations  # training keeps what the backward pass needs


@pytest.mark.parametrize("family", ["resnet", "mobilenet", "unet", "transformer_encoder", "vision_transformer"])
def test_plans_save_memory_on_cnns_and_transformers(corpus_dir: dict[str, Path], family: str) -> None:
    entry = next(e for e in CORPUS if e.family == family)
    graph = read_onnx(corpus_dir[family], batch=entry.batches[1])
    full, half = estimate(plan_graph(graph, "fp32")).total, estimate(plan_graph(graph, "fp16")).total
    assert half <= 0.7 * full
