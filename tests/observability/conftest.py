"""Fixtures: the limiter's C test drivers (real workload processes under LD_PRELOAD) are shared with
tests/limiter."""

from __future__ import annotations

from tests.limiter.conftest import drivers, wenv

__all__ = ["drivers", "wenv"]
