"""The committed protobuf modules are what scripts/gen-dra-protos.sh makes of the committed .proto files."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from hami_devices.kubernetes.dra.plugin.proto import dra_v1_pb2, pluginregistration_v1_pb2
from tests.conftest import REPO_ROOT


def _serialized(module_source: str) -> bytes:
    match = re.search(r"AddSerializedFile\((b'(?:[^'\\]|\\.)*')\)", module_source)
    assert match is not None
    value = ast.literal_eval(match.group(1))
    assert isinstance(value, bytes)
    return value


@pytest.mark.parametrize("module", [dra_v1_pb2, pluginregistration_v1_pb2], ids=lambda m: m.__name__.rsplit(".")[-1])
def test_committed_modules_match_the_protos(tmp_path: Path, module: object) -> None:
    subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gen-dra-protos.sh"), str(tmp_path)], check=True,
                   cwd=REPO_ROOT, capture_output=True)
    name = module.__name__.rsplit(".", 1)[-1]  # type: ignore[attr-defined]
    regenerated = _serialized((tmp_path / f"{name}.py").read_text())
    assert regenerated == module.DESCRIPTOR.serialized_pb  # type: ignore[attr-defined]
