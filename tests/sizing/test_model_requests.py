"""hami-devices size, and requests sized from a model: placement, the plan in the environment, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import onnx
import pytest

from hami_devices import InvalidRequest, ResourceRequest, allocate, release
from hami_devices.cli.main import main
from hami_devices.ledger import MemoryLedger
from hami_devices.sizing.measure import measure_onnxruntime

from ..core.helpers import node, simulated
from .corpus import feeds


def test_size_prints_the_plan_and_a_request_above_the_measured_peak(
    corpus_dir: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = corpus_dir["vision_transformer"]
    assert main([
        "size", str(path), "--batch", "8", "--task", "inference", "--device-model", "T4", "--precision", "fp32",
        "--json",
    ]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert data["precision"] == "fp32" and data["device_model"] == "T4"
    # PyTorch on a T4 (before Hopper): allocator segments 2 + 20 MiB and cuBLAS's :4096:2:16:8, 8.125 MiB
    assert data["memory_mib"] == math.ceil(data["estimate_mib"] * 1.2 * (1 << 20) / (1 << 20) - 1e-9) + 31
    model = onnx.load(str(path))
    measured = measure_onnxruntime(model, feeds(model, 8)).peak / (1 << 20)
    assert data["memory_mib"] >= measured  # the headroom covers what the runtime adds

    assert main(["size", str(path), "--batch", "8", "--device-model", "T4"]) == 0
    text = capsys.readouterr().out
    assert "plan fp16" in text and "memory_mib:" in text and "Softmax" in text


def test_size_refuses_bad_input_with_the_field(corpus_dir: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["size", "/nonexistent.onnx"]) == 2
    assert "model.path" in capsys.readouterr().err
    assert main(["size", str(corpus_dir["resnet"]), "--device-model", "Z80"]) == 2
    assert "device_model" in capsys.readouterr().err
    assert main(["size", str(corpus_dir["resnet"]), "--device-model", "T4", "--precision", "bf16"]) == 2
    assert "precision" in capsys.readouterr().err


def _request(path: Path, **ref: object) -> ResourceRequest:
    return ResourceRequest.single(model_ref={"path": str(path), "batch": 16, "task": "training", **ref})


def test_a_model_reference_becomes_a_memory_figure_once(corpus_dir: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "lm.onnx"
    copy.write_bytes(corpus_dir["decoder_lm"].read_bytes())
    request = _request(copy)
    (part,) = request.parts
    assert part.memory_mib is not None and part.memory_mib == part.model_ref.memory_mib  # type: ignore[union-attr]
    copy.unlink()  # a stored request does not read the model again
    again = ResourceRequest.model_validate_json(request.model_dump_json())
    assert again == request
    with pytest.raises(InvalidRequest) as info:
        ResourceRequest(parts=[{"memory_mib": 100, "model_ref": {"path": str(corpus_dir["resnet"])}}])
    assert info.value.field == "parts.0" and "model_ref" in info.value.message
    with pytest.raises(InvalidRequest) as info:
        ResourceRequest(parts=[{"model_ref": {"path": "/nonexistent.onnx"}}])
    assert info.value.field == "parts.0" and "model.path" in info.value.message
    with pytest.raises(InvalidRequest) as info:
        ResourceRequest.single(model_ref={"path": str(corpus_dir["resnet"]), "batch": 0})
    assert "batch" in info.value.field


def test_the_engine_places_a_sized_part_where_it_fits_and_hands_over_the_plan(corpus_dir: dict[str, Path]) -> None:
    request = _request(corpus_dir["decoder_lm"])
    need = request.parts[0].memory_mib
    assert need is not None and need > 300
    devices = simulated(
        node("edge", {"vendor": "nvidia", "model": "T4", "count": 1, "memory_mib": need - 1}),
        node("dc", {"vendor": "nvidia", "model": "A100-80GB", "count": 1}),
        ledger=MemoryLedger(),
    )
    handle = allocate(devices, request)
    (grant,) = handle.grants
    assert (grant.node, grant.memory_mib) == ("dc", need)
    plan_file = Path(handle.env["HAMI_PRECISION_PLAN"])
    (plan,) = json.loads(plan_file.read_text())["plans"]
    assert plan["device_model"] == "A100-80GB" and plan["precision"] == "bf16"  # training on Ampere: bf16
    operators = plan["operators"]
    model = onnx.load(str(corpus_dir["decoder_lm"]))
    for n in model.graph.node:
        if n.op_type in ("Softmax", "LogSoftmax", "LayerNormalization"):
            assert operators[n.name] == "fp32"
        if n.op_type == "MatMul":
            assert operators[n.name] == "bf16"
    release(handle)
    assert not plan_file.exists()
