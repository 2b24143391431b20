"""Build hooks: the cffi limiter module and the native shared libraries.

Metadata lives in pyproject.toml; this file only adds the compiled parts so that
``pip install`` needs no separate make step.
"""

from __future__ import annotations

import importlib.util
import shutil
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


# The region API a third-party limiter shim compiles against (hami_devices.limiter.include_dir()):
# the header and the core's sources, which every shim links in (as the built-in shims do).
REGION_API_HEADERS = ["native/include/hami_region.h"]
REGION_API_SOURCES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "native" / "core").glob("*.c"))


def _install_region_api(package_root: Path) -> None:
    for names, folder in ((REGION_API_HEADERS, "include"), (REGION_API_SOURCES, "src")):
        out = package_root / "hami_devices" / "native" / folder
        out.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copyfile(ROOT / name, out / Path(name).name)


class BuildExtWithNative(build_ext):
    """Also compiles the LD_PRELOAD shims and the fake vendor libraries, and installs the region API."""

    def run(self) -> None:
        super().run()
        builder = _load_native_builder()
        package_root = ROOT if self.inplace else Path(self.build_lib)
        builder.build_all(package_root / "hami_devices" / "libs")
        _install_region_api(package_root)


setup(
    cffi_modules=["native/core/cffi_build.py:ffibuilder", "native/scheduling/fgd_build.py:ffibuilder"],
    cmdclass={"build_ext": BuildExtWithNative},
)
