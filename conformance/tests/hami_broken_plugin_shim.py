"""A third-party adapter whose own limiter shim does not limit: the suite must not take its word for it.

Kept apart from hami_broken_adapters.py because it builds on the example plugin (its tests put
examples/vendor-plugin on sys.path).
"""

from __future__ import annotations

from typing import ClassVar

from hami_example_accel.adapter import LIBS, ExampleAdapter


class PassThroughShimAdapter(ExampleAdapter):
    """Names its runtime library as the shim: preloaded, it forwards every allocation unchecked."""

    limiter_shim: ClassVar[str | None] = f"hami_example_accel:{LIBS}/libexrt.so"
