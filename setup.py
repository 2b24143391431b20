"""Build hooks: the cffi limiter module and the native shared libraries.

Metadata lives in pyproject.toml; this file only adds the compiled parts so that
``pip install`` needs no separate make step.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _load_native_builder():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("build_native", ROOT / "native" / "build_native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildExtWithNative(build_ext):
    """Also compiles the LD_PRELOAD shims and the fake vendor libraries."""

    def run(self) -> None:
        super().run()
        builder = _load_native_builder()
        package_root = ROOT if self.inplace else Path(self.build_lib)
        builder.build_all(package_root / "hami_devices" / "libs")


setup(
    cffi_modules=["native/core/cffi_build.py:ffibuilder"],
    cmdclass={"build_ext": BuildExtWithNative},
)
