"""The NVIDIA tests need the fake libnvidia-ml builds (made by ``pip install`` or native/build_native.py)."""

from __future__ import annotations

import pytest
from nvidia_helpers import FAKE_NVML, FAKE_NVML_OLD


@pytest.fixture(scope="session", autouse=True)
def _fake_built() -> None:
    for lib in (FAKE_NVML, FAKE_NVML_OLD):
        if not lib.exists():
            pytest.fail(f"{lib} is missing: build it with `pip install -e .` or `python native/build_native.py`")
