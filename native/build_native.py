"""Compile the native shared libraries (limiter shims and fake vendor libraries).

Every folder under ``native/`` that holds a ``target.json`` describes one shared
library.  Keeping the description next to the sources lets each vendor area add
its own libraries without touching a central list.

``target.json`` keys:
  output        file name of the library, relative to the output folder
                (for example ``libhami_cuda.so`` or ``fakes/libnvidia-ml.so.1``)
  soname        the DT_SONAME to embed; defaults to the base name of ``output``
  sources       glob patterns relative to the repository root
  include_dirs  folders relative to the repository root (``native/include`` is always added)
  libs          libraries to link (``dl``, ``pthread`` ...)
  cflags        extra compiler flags

The build needs only a C compiler: no vendor SDK is used, because the project
declares the few vendor types it needs in its own headers.
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

NATIVE_DIR = Path(__file__).resolve().parent
REPO_ROOT = NATIVE_DIR.parent
BASE_CFLAGS = ["-O2", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter", "-std=gnu11"]


def find_targets() -> list[Path]:
    return sorted(NATIVE_DIR.rglob("target.json"))


def _compiler() -> list[str]:
    return shlex.split(os.environ.get("CC", "cc"))


def build_target(target_file: Path, out_dir: Path) -> Path:
    spec = json.loads(target_file.read_text())
    output = out_dir / spec["output"]
    output.parent.mkdir(parents=True, exist_ok=True)
    sources: list[str] = []
    for pattern in spec["sources"]:
        matched = sorted(glob.glob(str(REPO_ROOT / pattern)))
        if not matched:
            raise RuntimeError(f"{target_file}: source pattern {pattern!r} matched no file")
        sources.extend(m for m in matched if m not in sources)
    includes = ["native/include", *spec.get("include_dirs", [])]
    soname = spec.get("soname", Path(spec["output"]).name)
    cmd = [
        *_compiler(),
        *BASE_CFLAGS,
        *spec.get("cflags", []),
        *(f"-I{REPO_ROOT / inc}" for inc in includes),
        "-shared",
        f"-Wl,-soname,{soname}",
        "-o",
        str(output),
        *sources,
        *(f"-l{lib}" for lib in spec.get("libs", [])),
    ]
    subprocess.run(cmd, check=True)
    return output


def build_all(out_dir: Path) -> list[Path]:
    return [build_target(t, out_dir) for t in find_targets()]


if __name__ == "__main__":
    destination = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT / "hami_devices" / "libs"
    for built in build_all(destination):
        print(built)
