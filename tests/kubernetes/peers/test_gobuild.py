"""``tests/kubernetes/gobuild.py``: built once per source digest, rebuilt on a change, failures with the reason."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.kubernetes.gobuild import GoBuildError, build_info


def _module(root: Path, body: str) -> Path:
    root.mkdir(exist_ok=True)
    (root / "go.mod").write_text("module example.test/hello\n\ngo 1.24\n")
    (root / "main.go").write_text("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Print(" + body + ") }\n")
    return root


def test_built_once_rebuilt_on_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_DEVICES_CACHE", str(tmp_path / "cache"))
    module = _module(tmp_path / "m", '"one"')
    first = build_info(module, ".", "hello")
    assert not first.cached and subprocess.run([first.path], capture_output=True, text=True).stdout == "one"
    again = build_info(module, ".", "hello")
    assert again.cached and again.path == first.path
    _module(module, '"two"')
    changed = build_info(module, ".", "hello")
    assert not changed.cached and changed.path != first.path
    assert subprocess.run([changed.path], capture_output=True, text=True).stdout == "two"
    assert not first.path.exists()  # the earlier build is pruned
    _module(module, "undefined")
    with pytest.raises(GoBuildError, match="undefined"):
        build_info(module, ".", "hello")
