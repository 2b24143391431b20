"""Build a Go program from a module directory once, and reuse it until its sources or Go change.

    from tests.kubernetes.gobuild import build
    binary = build(PEERS, ".", "hamipeer")                               # go.mod
    latest = build(PEERS, ".", "hamipeer", modfile="go.latest.mod")      # another release, same source

The binary lands in ``$HAMI_DEVICES_CACHE/go`` (default ``~/.cache/hami-devices/go``) under a
name that carries a digest of everything the build reads: the module's ``*.go`` files, the
mod file and its sum file, the package path, the build tags and ``go version``.  A later
run (or another pytest process) with the same digest uses it without calling ``go``; a
changed source builds a new one.  Builds of one binary are serialised by a file lock, so
parallel test processes build it once.  Go's own build cache (``go env GOCACHE``) keeps
compiled packages between digests, so a one-line change relinks rather than recompiles.

A failure raises ``GoBuildError`` with the compiler's output: a test that needs the
binary fails with the reason rather than being skipped.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BUILD_TIMEOUT_S = 1800


class GoBuildError(RuntimeError):
    """``go`` is missing or the build failed; the message holds the command and its output."""


@dataclass(frozen=True)
class Built:
    path: Path
    cached: bool  # found in the cache: no ``go`` call was made
    seconds: float  # the build's wall time (0 when cached)


def cache_root() -> Path:
    root = os.environ.get("HAMI_DEVICES_CACHE") or str(Path.home() / ".cache" / "hami-devices")
    return Path(root) / "go"


def go_version(go: str = "go") -> str:
    """``go version``'s output; ``GoBuildError`` when there is no Go toolchain."""
    if shutil.which(go) is None:
        raise GoBuildError(f"{go!r} is not on PATH: the Kubernetes peer tests need a Go toolchain (1.24 or newer)")
    return subprocess.run([go, "version"], check=True, capture_output=True, text=True).stdout.strip()


def source_digest(module_dir: Path, package: str, modfile: str, tags: Sequence[str], version: str) -> str:
    """A digest of what a build of ``package`` in ``module_dir`` reads."""
    sumfile = modfile[: -len(".mod")] + ".sum" if modfile.endswith(".mod") else modfile + ".sum"
    digest = hashlib.sha256()
    for item in (version, package, modfile, ",".join(sorted(tags))):
        digest.update(item.encode() + b"\0")
    files = sorted(p for p in module_dir.rglob("*.go") if p.is_file())
    files += [module_dir / modfile, module_dir / sumfile]
    for path in files:
        if path.exists():
            digest.update(str(path.relative_to(module_dir)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_info(
    module_dir: str | Path,
    package: str,
    output_name: str,
    *,
    modfile: str = "go.mod",
    tags: Sequence[str] = (),
    go: str = "go",
) -> Built:
    """The binary of ``package`` (a path inside the module, e.g. ``"."`` or ``"./cmd/x"``), built if needed."""
    module_dir = Path(module_dir).resolve()
    version = go_version(go)
    key = source_digest(module_dir, package, modfile, tags, version)
    target = cache_root() / f"{output_name}-{key}"
    if target.exists():
        return Built(target, True, 0.0)
    command = [go, "build", "-trimpath", f"-modfile={modfile}"]
    if tags:
        command.append("-tags=" + ",".join(tags))
    with _locked(cache_root() / f".{output_name}.lock"):
        while True:
            key = source_digest(module_dir, package, modfile, tags, version)
            target = cache_root() / f"{output_name}-{key}"
            if target.exists():  # another process built it while we waited
                return Built(target, True, 0.0)
            partial = target.with_name(target.name + f".partial-{os.getpid()}")
            started = time.monotonic()
            done = _go([*command, "-o", str(partial), package], module_dir, partial)
            if source_digest(module_dir, package, modfile, tags, version) != key:  # edited while it built: again
                partial.unlink(missing_ok=True)
                continue
            if done.returncode != 0:
                partial.unlink(missing_ok=True)
                raise GoBuildError(f"{' '.join(done.args)} (in {module_dir}) failed:\n{done.stdout}{done.stderr}")
            partial.rename(target)
            _prune(target, output_name)
            return Built(target, False, time.monotonic() - started)


def _go(command: list[str], module_dir: Path, partial: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, cwd=module_dir, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        partial.unlink(missing_ok=True)
        raise GoBuildError(f"{' '.join(command)} (in {module_dir}) ran past {BUILD_TIMEOUT_S}s") from None


def _prune(keep: Path, output_name: str) -> None:
    """Remove the earlier builds of ``output_name`` (each is a full binary, tens of MB)."""
    pattern = re.compile(re.escape(output_name) + r"-[0-9a-f]{20}")
    for path in keep.parent.iterdir():
        if path != keep and pattern.fullmatch(path.name):
            path.unlink(missing_ok=True)


def build(
    module_dir: str | Path,
    package: str,
    output_name: str,
    *,
    modfile: str = "go.mod",
    tags: Sequence[str] = (),
) -> Path:
    """The path of the built binary (see ``build_info`` for whether it came from the cache)."""
    return build_info(module_dir, package, output_name, modfile=modfile, tags=tags).path
