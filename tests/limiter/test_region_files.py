"""Region files are private: created 0600 in folders nobody else can write to, and a region named by the
environment is checked (type, owner, mode) before the shim maps it.  A file that fails stops the workload
with a message naming it; it never runs unlimited or on somebody else's limits."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from hami_devices import limiter
from hami_devices.errors import LimiterError
from hami_devices.limiter import DeviceLimit, Region
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import Env, fields, run

MIB = 1 << 20


def test_region_is_created_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        Region.create(tmp_path / "a.region", [DeviceLimit(MIB, 0)]).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.region").stat().st_mode) == 0o600


def test_region_is_not_created_in_a_world_writable_folder(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: others may add files
    with pytest.raises(LimiterError, match="writable by others"):
        Region.create(shared / "a.region", [DeviceLimit(MIB, 0)])


@pytest.mark.parametrize("damage", ["symlink", "group-writable", "foreign-owner", "not-a-file"])
def test_open_refuses_unsafe_files(tmp_path: Path, damage: str) -> None:
    real = tmp_path / "real.region"
    Region.create(real, [DeviceLimit(MIB, 0)]).close()
    path = tmp_path / "a.region"
    expected = {
        "symlink": "symbolic link",
        "group-writable": "writable by group or others",
        "foreign-owner": "owned by uid 4242",
        "not-a-file": "not a regular file",
    }[damage]
    if damage == "symlink":
        path.symlink_to(real)
    elif damage == "not-a-file":
        os.mkfifo(path, 0o600)
    else:
        path.write_bytes(real.read_bytes())
        path.chmod(0o660 if damage == "group-writable" else 0o600)
        if damage == "foreign-owner":
            if os.geteuid() != 0:
                pytest.skip("chown to another user needs root")
            os.chown(path, 4242, 4242)
    with pytest.raises(LimiterError, match=expected):
        Region.open(path)


@pytest.mark.parametrize("damage", ["symlink", "world-writable", "foreign-owner", "shared-folder"])
def test_shim_refuses_an_unsafe_region_from_the_environment(drivers: Drivers, wenv: Env, damage: str) -> None:
    real = wenv.tmp / "real.region"
    Region.create(real, [DeviceLimit(1024 * MIB, 0)]).close()
    path = wenv.region
    if damage == "symlink":  # somebody points the workload at a region with another allocation's limits
        path.symlink_to(real)
    elif damage == "shared-folder":  # the shim would create the region where others can plant one
        shared = wenv.tmp / "shared"
        shared.mkdir()
        shared.chmod(0o1777)
        path = shared / "new.region"
    else:
        path.write_bytes(real.read_bytes())
        path.chmod(0o666 if damage == "world-writable" else 0o600)
        if damage == "foreign-owner":
            if os.geteuid() != 0:
                pytest.skip("chown to another user needs root")
            os.chown(path, 4242, 4242)
    out = run([drivers.cuda, "oom"], wenv.build(HAMI_REGION_PATH=str(path), HAMI_DEVICE_MEMORY_LIMIT="64m"))
    assert out.returncode == 7 and fields(out.stdout)["cuInit"] == "3", out.stdout  # CUDA_ERROR_NOT_INITIALIZED
    assert "FATAL" in out.stderr and str(path) in out.stderr, out.stderr
    if damage == "shared-folder":
        assert not path.exists()


def test_region_dir_must_be_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    monkeypatch.setenv("HAMI_REGION_DIR", str(open_folder))
    with pytest.raises(LimiterError, match="writable by others"):
        limiter.region_dir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    monkeypatch.setenv("HAMI_REGION_DIR", str(link))
    with pytest.raises(LimiterError, match="not a folder"):
        limiter.region_dir()
    monkeypatch.setenv("HAMI_REGION_DIR", str(tmp_path / "fresh"))
    assert stat.S_IMODE(limiter.region_dir().stat().st_mode) == 0o700


def test_default_region_dir_is_private_whatever_the_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HAMI_REGION_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old = os.umask(0)
    try:
        folder = limiter.region_dir()
    finally:
        os.umask(old)
    assert folder == tmp_path / f"hami-devices-{os.getuid()}" / "regions"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
