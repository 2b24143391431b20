"""The cffi module ``hami_devices._native`` (the limiter's C core), loaded on first use, and what it parses."""

from __future__ import annotations

from types import ModuleType

from hami_devices.errors import LimiterError

MAX_DEVICES = 16
MAX_PROCS = 256  # process slots of a region (HAMI_REGION_MAX_PROCS)
ERRLEN = 512


def _native() -> ModuleType:
    try:
        from hami_devices import _native
    except ImportError as exc:  # built by `pip install`; see native/core/cffi_build.py
        raise LimiterError(f"the native limiter module is not built: {exc}") from exc
    module: ModuleType = _native
    return module


def native_available() -> bool:
    """True when the cffi module ``hami_devices._native`` is importable."""
    try:
        _native()
    except LimiterError:
        return False
    return True


def parse_bytes(text: str) -> int:
    """Parse a limit the way the shims do ("4g", "512m", "1073741824"); raises ``LimiterError``."""
    native = _native()
    out = native.ffi.new("uint64_t *")
    if native.lib.hami_parse_bytes(text.encode(), out) != 0:
        raise LimiterError(f"not a byte size: {text!r}")
    return int(out[0])
