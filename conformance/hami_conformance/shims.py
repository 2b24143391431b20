"""Whether an adapter's ``limiter_shim`` names a shim that is built, and what is there when it does not.

A misspelt shim name makes every allocation fail with the limiter's own "not built" error; the suite
says it once, in ``identity.adapter``, with the shared libraries that do exist where the name points.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import hami_devices
from hami_devices import limiter
from hami_devices.adapter import VendorAdapter
from hami_devices.errors import LimiterError

LISTED = 20
"""At most this many existing libraries are named in the message."""


def built_shims(shim: str) -> list[str]:
    """The shared libraries that exist where ``shim`` points, each named as ``limiter_shim`` would name it."""
    package, sep, _ = shim.partition(":")
    if not sep:
        libs = Path(hami_devices.__file__).resolve().parent / "libs"
        return sorted(p.name for p in libs.glob("*.so"))[:LISTED]
    try:
        root = Path(str(resources.files(package))).resolve()
    except (ImportError, TypeError):
        return []
    return sorted(f"{package}:{p.relative_to(root).as_posix()}" for p in root.rglob("*.so"))[:LISTED]


def shim_problem(adapter: VendorAdapter) -> str | None:
    """None when the adapter declares no shim or its shim is built; else what is wrong and what is there."""
    shim = adapter.limiter_shim
    if not shim:
        return None
    try:
        limiter.shim_library(shim)
    except LimiterError as exc:
        there = built_shims(shim)
        listing = ", ".join(repr(name) for name in there) if there else "none"
        return f"limiter_shim {shim!r} names no built shim ({exc}); the shims there are: {listing}"
    return None
