"""The region through its Python face: create/open/validate, limits, usage, reclaim, the robust lock."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from hami_devices import limiter
from hami_devices.errors import LimiterError
from hami_devices.limiter import DeviceLimit, Region
from tests.limiter.helpers import PYTHON, hook_shim, python_env

GIB = 1 << 30


def test_create_open_and_read_limits(tmp_path: Path) -> None:
    path = tmp_path / "a.region"
    with Region.create(path, [DeviceLimit(GIB, 30), DeviceLimit(0, 0)]) as region:
        assert region.path == path
        assert region.device_count == 2
    with Region.open(path) as region:
        usage = region.device_usage()
    assert [(u.device, u.memory_limit_bytes, u.core_limit_pct, u.memory_used_bytes) for u in usage] == [
        (0, GIB, 30, 0),
        (1, 0, 0, 0),
    ]
    assert usage[0].utilization_pct is None  # nothing measured yet


def test_set_limit_is_seen_by_other_openers(tmp_path: Path) -> None:
    path = tmp_path / "a.region"
    with Region.create(path, [DeviceLimit(GIB, 0)]) as writer, Region.open(path) as reader:
        writer.set_limit(0, DeviceLimit(2 * GIB, 50))
        assert reader.device_usage()[0].memory_limit_bytes == 2 * GIB
        assert reader.device_usage()[0].core_limit_pct == 50
        with pytest.raises(LimiterError):
            writer.set_limit(5, DeviceLimit(0, 0))


def test_create_replaces_atomically_or_refuses(tmp_path: Path) -> None:
    path = tmp_path / "a.region"
    Region.create(path, [DeviceLimit(GIB, 0)]).close()
    Region.create(path, [DeviceLimit(2 * GIB, 0)]).close()
    with Region.open(path) as region:
        assert region.device_usage()[0].memory_limit_bytes == 2 * GIB
    with pytest.raises(LimiterError, match="exists"):
        Region.create(path, [DeviceLimit(GIB, 0)], replace=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.region"]  # no temporary files left


def test_limits_are_validated() -> None:
    with pytest.raises(LimiterError):
        DeviceLimit(GIB, 101)
    with pytest.raises(LimiterError):
        DeviceLimit(-1, 0)


def _header_offsets() -> dict[str, int]:
    # hami_region_header: magic u64, version u32, header_size u32, total_size u64, device_count u32,
    # max_devices u32, max_procs u32, reserved u32, checksum u64
    return {"magic": 0, "version": 8, "device_count": 24, "checksum": 40}


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate_header", "truncated"),
        ("truncate_body", "truncated"),
        ("magic", "not a hami region"),
        ("version", "version 7"),
        ("checksum", "checksum"),
        ("empty", "truncated"),
    ],
)
def test_damaged_region_is_refused(tmp_path: Path, damage: str, message: str) -> None:
    path = tmp_path / "a.region"
    Region.create(path, [DeviceLimit(GIB, 0)]).close()
    data = bytearray(path.read_bytes())
    off = _header_offsets()
    if damage == "truncate_header":
        data = data[:20]
    elif damage == "truncate_body":
        data = data[: len(data) // 2]
    elif damage == "magic":
        data[0] ^= 0xFF
    elif damage == "version":
        # A future layout: the version and its checksum both updated, so only the version check can refuse it.
        data[off["version"] : off["version"] + 4] = struct.pack("<I", 7)
        checksum = _fnv(bytes(data[: off["checksum"]]))
        data[off["checksum"] : off["checksum"] + 8] = struct.pack("<Q", checksum)
    elif damage == "checksum":
        data[off["device_count"]] ^= 0x01  # a flipped bit in the static header
    elif damage == "empty":
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(LimiterError, match=message):
        Region.open(path)


def _fnv(data: bytes) -> int:
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def test_open_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(LimiterError, match="cannot open"):
        Region.open(tmp_path / "absent.region")


def test_closed_region_raises(tmp_path: Path) -> None:
    region = Region.create(tmp_path / "a.region", [DeviceLimit(0, 0)])
    region.close()
    region.close()  # idempotent
    with pytest.raises(LimiterError, match="closed"):
        region.device_usage()


# A second process that takes a slot, reserves bytes through the same C core the shims use, then
# either sleeps or sits inside the region lock until it is killed.
_CHILD = """
import sys, time
from hami_devices import _native
from hami_devices.limiter import Region
r = Region.open(sys.argv[1])
lib = _native.lib
slot = lib.hami_region_register_self(r._handle)
assert slot >= 0
assert lib.hami_region_reserve(r._handle, slot, 0, int(sys.argv[3])) == 0
if sys.argv[2] == "lock":
    assert lib.hami_region_lock(r._handle) == 0
print("RESERVED", flush=True)
time.sleep(600)
"""


def _child(path: Path, mode: str, nbytes: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [PYTHON, "-c", _CHILD, str(path), mode, str(nbytes)], env=python_env(), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "RESERVED"
    return proc


def test_process_usage_and_reclaim_of_dead_process(tmp_path: Path) -> None:
    path = tmp_path / "a.region"
    with Region.create(path, [DeviceLimit(GIB, 0), DeviceLimit(0, 0)]) as region:
        child = _child(path, "sleep", 123456)
        records = [r for r in region.process_usage() if r.pid == child.pid]
        assert [(r.device, r.memory_used_bytes, r.alive) for r in records] == [(0, 123456, True), (1, 0, True)]
        assert records[0].start_time > 0
        assert region.device_usage()[0].memory_used_bytes == 123456
        assert region.reclaim_dead() == 0
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert region.reclaim_dead() == 1
        assert region.device_usage()[0].memory_used_bytes == 0
        assert region.process_usage() == []


def test_lock_holder_killed_does_not_wedge_others(tmp_path: Path) -> None:
    path = tmp_path / "a.region"
    with Region.create(path, [DeviceLimit(GIB, 0)]) as region:
        child = _child(path, "lock", 4096)
        child.send_signal(signal.SIGKILL)
        child.wait()
        started = time.monotonic()
        # The next locker gets EOWNERDEAD, repairs the counters (dropping the dead slot) and goes on.
        region.set_limit(0, DeviceLimit(2 * GIB, 0))
        assert time.monotonic() - started < 5
        assert region.device_usage()[0].memory_used_bytes == 0
        assert region.device_usage()[0].memory_limit_bytes == 2 * GIB


def test_parse_bytes_matches_hami_core_suffixes() -> None:
    assert limiter.parse_bytes("1024") == 1024
    assert limiter.parse_bytes("4k") == 4096
    assert limiter.parse_bytes("512m") == 512 << 20
    assert limiter.parse_bytes("2g") == 2 << 30
    assert limiter.parse_bytes("2Gi") == 2 << 30
    for bad in ("", "g", "12q", "-1"):
        with pytest.raises(LimiterError):
            limiter.parse_bytes(bad)


def test_library_paths_and_region_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert limiter.native_available()
    for name in ("libhami_cuda.so", "libhami_ascend.so", "libhami_cambricon.so"):
        assert limiter.shim_library(name).is_file()
    for name in ("libcuda.so.1", "libascendcl.so", "libcnrt.so", "libcndrv.so"):
        assert limiter.fake_library(name).is_file()
    with pytest.raises(LimiterError, match="not built"):
        limiter.shim_library("libhami_nothing.so")
    monkeypatch.setenv("HAMI_REGION_DIR", str(tmp_path / "regions"))
    assert limiter.region_dir() == tmp_path / "regions"
    assert (tmp_path / "regions").is_dir()
    monkeypatch.delenv("HAMI_REGION_DIR")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    assert limiter.region_dir() == tmp_path / "xdg" / "hami-devices" / "regions"


def test_shims_do_not_link_libpython() -> None:
    for name in ("libhami_cuda.so", "libhami_ascend.so", "libhami_cambricon.so"):
        needed = subprocess.run(
            ["readelf", "-d", str(limiter.shim_library(name))], capture_output=True, text=True, check=True
        ).stdout
        assert "libpython" not in needed, name
        assert os.path.getsize(limiter.shim_library(name)) > 0


def test_shipped_shims_carry_no_test_hooks() -> None:
    # The fake-state utilization source and the fake libcuda's device reordering exist only in the test
    # builds (native/testhooks -> libs/fakes/hooks/); what an allocation preloads knows nothing of them.
    for name in ("libhami_cuda.so", "libhami_ascend.so", "libhami_cambricon.so"):
        data = limiter.shim_library(name).read_bytes()
        for hook in (b"HAMI_FAKE_", b"hami_busy_from_fake_state", b"hami_fake_gpu_attach"):
            assert hook not in data, (name, hook)
        assert hook_shim(name).read_bytes().count(b"HAMI_FAKE_GPU_STATE") > 0  # the test build has them
