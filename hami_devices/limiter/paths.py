"""Where region files go (and whether that folder is safe), and where the built shims, fakes and C API lie."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from hami_devices.errors import LimiterError

_PACKAGE_DIR = Path(__file__).resolve().parent.parent
_LIBS_DIR = _PACKAGE_DIR / "libs"
_REGION_API_DIR = _PACKAGE_DIR / "native"  # installed by setup.py


def region_dir_path() -> Path:
    """Where region files go, without creating or checking it: ``$HAMI_REGION_DIR``, else a per-user runtime folder."""
    explicit = os.environ.get("HAMI_REGION_DIR")
    if explicit:
        return Path(explicit)
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "hami-devices" / "regions"
    return Path(tempfile.gettempdir()) / f"hami-devices-{os.getuid()}" / "regions"


def region_dir() -> Path:
    """Folder for region files (``region_dir_path``), created 0700 when absent.

    Raises ``LimiterError`` when the folder is not safe to keep regions in (see ``check_region_dir``).
    """
    folder = region_dir_path()
    try:
        # mkdir(parents=True) gives the parents the umask's permissions, not `mode`: make the one we own 0700 too.
        folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        folder.mkdir(exist_ok=True, mode=0o700)
    except OSError as exc:
        raise LimiterError(
            f"cannot create the region folder {folder}: {exc.strerror}; set HAMI_REGION_DIR to a folder this user "
            "may write"
        ) from None
    check_region_dir(folder)
    return folder


def check_region_dir(folder: Path) -> None:
    """A region folder must be a real folder of this user (or root) that nobody else can write to.

    Anyone who can write there could put a file of their own -- or a link -- where a region is about to
    be created, and so choose a workload's limits.  Its parent must not let others replace it either
    (unless it is sticky, like /tmp).
    """
    try:
        st = folder.lstat()
        parent = folder.parent.stat()
    except OSError as exc:
        raise LimiterError(f"region folder {folder}: {exc.strerror}") from exc
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise LimiterError(f"region folder {folder} is not a folder (a symbolic link or a file)")
    if st.st_uid not in (os.geteuid(), 0):
        raise LimiterError(f"region folder {folder} is owned by uid {st.st_uid}, not by this user or root")
    if st.st_mode & stat.S_IWOTH:
        raise LimiterError(f"region folder {folder} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})")
    if parent.st_mode & stat.S_IWOTH and not parent.st_mode & stat.S_ISVTX:
        raise LimiterError(f"the parent of region folder {folder} is writable by others and not sticky")


def _installed(path: Path, what: str) -> Path:
    if not path.is_file():
        raise LimiterError(f"{what} {path.name} is not built (looked in {path.parent}); reinstall the package")
    return path


def shim_library(name: str) -> Path:
    """Installed path of a shim.

    ``"libhami_cuda.so"``: a shim shipped with hami-devices.  ``"package:path/in/it.so"``: a shim a
    vendor plugin ships inside its own package (it must lie inside that package).
    """
    package, sep, relative = name.partition(":")
    if not sep:
        return _installed(_LIBS_DIR / name, "limiter shim")
    if not package or not relative:
        raise LimiterError(f"limiter shim {name!r}: expected 'package:path/in/package.so'")
    import importlib.resources

    try:
        root = Path(str(importlib.resources.files(package))).resolve()
    except (ImportError, TypeError) as exc:
        raise LimiterError(f"limiter shim {name!r}: package {package!r} cannot be imported: {exc}") from exc
    path = (root / relative).resolve()
    if not path.is_relative_to(root):
        raise LimiterError(f"limiter shim {name!r}: {relative!r} leaves the package folder {root}")
    return _installed(path, "limiter shim")


def include_dir() -> Path:
    """The installed C headers of the region API (``hami_region.h``), for building a third-party shim."""
    return _region_api("include", "hami_region.h")


def core_sources() -> list[Path]:
    """The limiter core's C sources a third-party shim compiles in (as every built-in shim does)."""
    return sorted(_region_api("src", "region.c").glob("*.c"))


def _region_api(folder: str, probe: str) -> Path:
    path = _REGION_API_DIR / folder
    if not (path / probe).is_file():
        raise LimiterError(f"the region API is not installed (no {path / probe}); reinstall hami-devices")
    return path


def fake_library(name: str) -> Path:
    """Installed path of a fake vendor library, e.g. ``fake_library("libcuda.so.1")``."""
    return _installed(_LIBS_DIR / "fakes" / name, "fake vendor library")
