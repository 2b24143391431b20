"""Build a Go program of one of the test modules (``tests/kubernetes/*/go.mod``), cached across runs.

``build(module_dir, package, output=None) -> Path``: the binary of ``package`` (an import path, or
``./dir`` inside the module), built with ``go build -trimpath`` in ``module_dir``. Without ``output`` it
lands in ``$HAMI_DEVICES_CACHE`` (default ``~/.cache/hami-devices``) under ``<prefix>-<key>/``, where
the prefix names the module and the Go version and the key is a digest of the Go version, the
module's ``go.mod``/``go.sum`` and its ``.go`` files: a new Kubernetes version, a new Go or an edited
test program gets a fresh binary, and anything else reuses the one there. ``-trimpath`` and the default
cgo setting keep the compiled packages shared, in Go's own build cache, between the modules that pin
the same Kubernetes release. A file lock keeps two test processes from building the same binary
twice; a binary appears under its name only once complete.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BUILD_TIMEOUT_S = 1800


class GoBuildError(RuntimeError):
    pass


def go_version() -> str:
    go = shutil.which("go")
    if go is None:
        raise GoBuildError("the go toolchain is not on PATH")
    return subprocess.run([go, "env", "GOVERSION"], check=True, capture_output=True, text=True).stdout.strip()


def cache_root() -> Path:
    return Path(os.environ.get("HAMI_DEVICES_CACHE") or Path.home() / ".cache" / "hami-devices")


def module_key(module_dir: Path, package: str) -> str:
    digest = hashlib.sha256()
    digest.update(go_version().encode())
    digest.update(package.encode())
    for path in sorted([module_dir / "go.mod", module_dir / "go.sum", *module_dir.rglob("*.go")]):
        if path.exists():
            digest.update(str(path.relative_to(module_dir)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build(module_dir: str | Path, package: str, output: str | Path | None = None, *, prefix: str | None = None) -> Path:
    """The binary of ``package`` built in ``module_dir``; reused when the cached one has the same key."""
    module_dir = Path(module_dir).resolve()
    name = package.rstrip("/").rsplit("/", 1)[-1].lstrip(".") or module_dir.name
    key = module_key(module_dir, package)
    if output is None:
        label = prefix or module_dir.name
        target = cache_root() / f"{label}-{go_version()}-{key}" / name
    else:
        target = Path(output)
    stamp = target.with_name(target.name + ".key")
    with _locked(target.with_name(target.name + ".lock")):
        if target.exists() and stamp.exists() and stamp.read_text() == key:
            return target
        partial = target.with_name(target.name + ".partial")
        started = time.monotonic()
        done = subprocess.run(
            ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), package],
            cwd=module_dir, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise GoBuildError(f"go build {package} in {module_dir} failed:\n{done.stderr[-4000:]}")
        os.replace(partial, target)
        stamp.write_text(key)
        (target.with_name(target.name + ".build-seconds")).write_text(f"{time.monotonic() - started:.1f}\n")
    return target
