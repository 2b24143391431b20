"""Builds the plugin's native parts with its own ``pip install``: the Example Runtime (a stand-in for
the vendor's runtime) and the limiter shim, compiled against the region API hami-devices installs.

Metadata lives in pyproject.toml.  Building needs only a C compiler and hami-devices (a build
requirement: ``hami_devices.limiter.include_dir()`` and ``core_sources()``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
NATIVE = HERE / "native"
PACKAGE = "hami_example_accel"
CFLAGS = ["-O2", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter", "-std=gnu11", "-fvisibility=hidden"]


def _cc(*args: str) -> None:
    subprocess.run([*shlex.split(os.environ.get("CC", "cc")), *CFLAGS, *args], check=True)


def build_native(out: Path) -> None:
    from hami_devices import limiter

    out.mkdir(parents=True, exist_ok=True)
    _cc("-shared", "-Wl,-soname,libexrt.so", "-o", str(out / "libexrt.so"), str(NATIVE / "exrt.c"), "-lpthread")
    _cc(
        "-shared",
        "-Wl,-soname,libhami_example.so",
        f"-I{NATIVE}",
        f"-I{limiter.include_dir()}",
        "-o",
        str(out / "libhami_example.so"),
        str(NATIVE / "hami_example_shim.c"),
        *(str(source) for source in limiter.core_sources()),
        "-ldl",
        "-lpthread",
    )


class BuildPyWithNative(build_py):
    def run(self) -> None:
        super().run()
        # an editable install imports the package from this folder, so the libraries go beside it
        root = HERE if self.editable_mode else Path(self.build_lib)
        build_native(root / PACKAGE / "libs")


class BinaryDistribution(Distribution):
    """The wheel holds shared libraries: tag it for this platform, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPyWithNative}, distclass=BinaryDistribution)
