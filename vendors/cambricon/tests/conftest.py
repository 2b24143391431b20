"""Build the fake libcndev.so once per session; point the adapter at it with a private fixture copy per test."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _build_native() -> object:
    spec = importlib.util.spec_from_file_location("hami_build_native", REPO_ROOT / "native" / "build_native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def cndev_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    builder = _build_native()
    out = tmp_path_factory.mktemp("native")
    built: Path = builder.build_target(REPO_ROOT / "native/fakes/cndev/target.json", out)  # type: ignore[attr-defined]
    return built


@pytest.fixture
def cndev_node(
    cndev_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], Path]:
    """Select the fake CNDev library and one fixture node (a private copy, with its own sMLU state)."""

    def select(name: str) -> Path:
        fixture = tmp_path / name
        shutil.copyfile(FIXTURES / name, fixture)
        monkeypatch.setenv("HAMI_CNDEV_LIBRARY", str(cndev_library))
        monkeypatch.setenv("HAMI_FAKE_CNDEV_FIXTURE", str(fixture))
        monkeypatch.setenv("HAMI_FAKE_CNDEV_STATE", str(tmp_path / f"{name}.state"))
        monkeypatch.setenv("HAMI_REGION_DIR", str(tmp_path / "regions"))
        return fixture

    return select
