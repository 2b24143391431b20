"""Issue 39, item 6: ``size`` adds the framework's workspaces to memory_mib and shows the runtime context per
process, each with its source; the context is the traits catalog's ``context_mib`` (one figure, the one the
scheduler books)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from hami_devices.cli.main import main

H200_CONTEXT_MIB = 518  # measured on an H200 with PyTorch 2.11, CUDA 13 (the catalog's figure)


def _size(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(["size", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _tensors_mib(data: Any) -> int:
    return math.ceil(data["estimate_mib"] * (1 + data["headroom"]) - 1e-9)


def test_pytorch_on_an_h200_adds_workspaces_and_shows_the_context(
    corpus_dir: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    model = str(corpus_dir["mlp_recommender"])
    data = _size(capsys, model, "--device-model", "H200")
    allowance = data["allowance"]
    # Hopper: segments 2 + 20 MiB, cuBLAS :4096:8 = 32 MiB
    assert allowance["workspace_mib"] == 54 and "CUBLAS_WORKSPACE_CONFIG :4096:8" in allowance["workspace_source"]
    assert data["memory_mib"] == _tensors_mib(data) + 54
    assert allowance["context_mib"] == H200_CONTEXT_MIB and "traits catalog" in allowance["context_source"]
    bare = _size(capsys, model, "--device-model", "H200", "--framework", "none")
    assert bare["memory_mib"] == _tensors_mib(bare) and bare["allowance"]["context_mib"] == H200_CONTEXT_MIB
    assert main(["size", model, "--device-model", "H200"]) == 0
    text = capsys.readouterr().out
    assert "54 MiB pytorch workspaces" in text and f"runtime context per process: {H200_CONTEXT_MIB} MiB" in text


def test_no_figure_is_invented(corpus_dir: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    model = str(corpus_dir["mlp_recommender"])
    ascend = _size(capsys, model, "--device-model", "910B3")["allowance"]
    assert ascend["workspace_mib"] == 0 and "none measured for pytorch on ascend" in ascend["workspace_source"]
    assert ascend["context_mib"] is None and "no measured context_mib" in ascend["context_source"]
    anywhere = _size(capsys, model)["allowance"]
    assert anywhere["workspace_mib"] == 54 and anywhere["context_mib"] is None  # the larger (Hopper) figure
