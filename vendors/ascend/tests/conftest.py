"""Point the adapter at the installed fake libdcmi.so, with a private fixture copy per test."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from hami_devices.errors import LimiterError
from hami_devices.limiter import fake_library

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def dcmi_library() -> Path:
    """The fake built by ``pip install`` (the same file the CLI and the conformance suite use)."""
    try:
        return fake_library("dcmi/libdcmi.so")
    except LimiterError as exc:
        pytest.fail(f"{exc} (build with `pip install -e .` or `python native/build_native.py`)")


@pytest.fixture
def dcmi_node(
    dcmi_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], Path]:
    """Select the fake DCMI library and one fixture node (a private copy, with its own vNPU state)."""

    def select(name: str) -> Path:
        fixture = tmp_path / name
        shutil.copyfile(FIXTURES / name, fixture)
        monkeypatch.setenv("HAMI_DCMI_LIBRARY", str(dcmi_library))
        monkeypatch.setenv("HAMI_FAKE_DCMI_FIXTURE", str(fixture))
        monkeypatch.setenv("HAMI_FAKE_DCMI_STATE", str(tmp_path / f"{name}.state"))
        monkeypatch.setenv("HAMI_REGION_DIR", str(tmp_path / "regions"))
        return fixture

    return select
