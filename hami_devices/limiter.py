"""The Python face of the native limiter: shared regions, limits and usage.

One region (an mmap'd file) exists per allocation.  The SDK creates it with the
allocation's limits; the LD_PRELOAD shims inside the workload attach to it by
path (``HAMI_REGION_PATH``, or HAMi-core's ``CUDA_DEVICE_MEMORY_SHARED_CACHE``),
reserve memory in it before every device allocation and pace kernel launches by
its compute limits.  This module reads and steers the region through the cffi
module ``hami_devices._native``, which compiles the same C core the shims use.

Environment a workload needs (the adapters set it):

``LD_PRELOAD``                 ``shim_library("libhami_cuda.so")`` (or ``libhami_ascend.so``,
                               ``libhami_cambricon.so``)
``HAMI_REGION_PATH``           the region file (``Region.path``); ``user``: the per-user default region
                               (``user-default.region`` in ``region_dir_path()``), shared by every process of
                               the user that names it.  Unset, limits from the variables below are per process.
``HAMI_DEVICE_MEMORY_LIMIT[_i]``  bytes, with optional k/m/g suffix; seeds a region the shim creates
``HAMI_DEVICE_CORE_LIMIT[_i]``    percent 1..99 (0 or 100: unlimited); likewise
``HAMI_VIRTUAL_MEMORY[_i]``       ``1``: virtual device memory in a private or per-user region (``DeviceLimit``
                               ``virtual_memory`` for the SDK's regions), ``HAMI_VIRTUAL_MEMORY_HOST_LIMIT[_i]``
                               its host cap

The CUDA shim also reads ``CUDA_DEVICE_MEMORY_LIMIT[_i]``, ``CUDA_DEVICE_SM_LIMIT[_i]`` and
``CUDA_DEVICE_MEMORY_SHARED_CACHE``.  A region that exists is authoritative over those variables.

Compute limits are steered by the device time the allocation's own processes used.  The CUDA
shim measures it, per device, from the first source that works:

1. NVML (``libnvidia-ml.so.1``, loaded by soname) when it knows the CUDA device by UUID or PCI bus
   id: the per-process samples of ``nvmlDeviceGetProcessUtilization``, summed over the region's
   pids, so other allocations on the same GPU are not counted.  Where the driver has no
   per-process samples (``NOT_SUPPORTED``, e.g. MIG or old drivers) it falls back to the
   device-wide ``nvmlDeviceGetUtilizationRates``, which over-counts on a shared GPU.
2. The fake runtimes' shared state, when ``HAMI_FAKE_GPU_STATE`` is set (tests, benchmark).
3. NVML by index (NVML index taken as the CUDA ordinal) when nothing better matched.
4. None: open-loop pacing by an assumed device time per launch (``HAMI_COMPUTE_LAUNCH_COST_US``).

``HAMI_UTILIZATION_SOURCE``    ``nvml``, ``fake`` or ``none`` forces one source (tests and
                               diagnostics); ``auto`` or unset: the order above.  ``nvml`` also
                               allows the index assumption when UUID and PCI lookups fail.
"""

from __future__ import annotations

import ctypes
import os
import stat
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from hami_devices.errors import LimiterError

__all__ = [
    "DeviceLimit",
    "DeviceUsageRecord",
    "FakeDeviceSnapshot",
    "ProcessRecord",
    "Region",
    "RegionUsage",
    "UsageReader",
    "check_region_dir",
    "core_sources",
    "fake_gpu_snapshot",
    "fake_library",
    "include_dir",
    "native_available",
    "parse_bytes",
    "region_dir",
    "region_dir_path",
    "shim_library",
]

MAX_DEVICES = 16
MAX_PROCS = 256  # process slots of a region (HAMI_REGION_MAX_PROCS)
_LIBS_DIR = Path(__file__).resolve().parent / "libs"
_REGION_API_DIR = Path(__file__).resolve().parent / "native"  # installed by setup.py
_ERRLEN = 512
_VIRTUAL = 1  # HAMI_DEV_VIRTUAL


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


@dataclass(frozen=True)
class DeviceLimit:
    """Limits of one device of an allocation.

    ``virtual_memory``: allocations within the limit that the card cannot hold physically are served from
    host memory (CUDA managed memory kept on the host) instead of failing; ``host_spill_limit_bytes`` caps
    those host-backed bytes (0: up to the memory limit).
    """

    memory_limit_bytes: int  # 0 = no memory limit
    core_limit_pct: int  # 0 or 100 = no compute limit; 1..99 = share
    virtual_memory: bool = False
    host_spill_limit_bytes: int = 0

    def __post_init__(self) -> None:
        if self.memory_limit_bytes < 0 or self.memory_limit_bytes >= 1 << 64:
            raise LimiterError(f"memory limit {self.memory_limit_bytes} out of range")
        if not 0 <= self.core_limit_pct <= 100:
            raise LimiterError(f"core limit {self.core_limit_pct}% outside 0..100")
        if self.host_spill_limit_bytes < 0 or self.host_spill_limit_bytes >= 1 << 64:
            raise LimiterError(f"host spill limit {self.host_spill_limit_bytes} out of range")


@dataclass(frozen=True)
class DeviceUsageRecord:
    """Usage of one device of a region, as its shims account it."""

    device: int
    memory_limit_bytes: int
    core_limit_pct: int
    memory_used_bytes: int
    utilization_pct: float | None  # measured by the throttle; None when not measured recently
    memory_peak_bytes: int = 0  # high-water mark of memory_used_bytes since creation
    virtual_memory: bool = False  # allocations the card cannot hold spill to host memory
    memory_spilled_bytes: int = 0  # the part of memory_used_bytes served from host memory
    memory_spilled_peak_bytes: int = 0
    host_spill_limit_bytes: int = 0  # 0: up to the memory limit


@dataclass(frozen=True)
class ProcessRecord:
    """Memory one process holds on one device of a region."""

    pid: int  # in the process's own PID namespace (a container's first process is 1)
    start_time: int  # /proc/<pid>/stat field 22: tells a reused pid from the original process
    device: int
    memory_used_bytes: int
    alive: bool  # its liveness lock is held (valid across PID namespaces), or /proc shows it running
    pid_namespace: int = 0  # inode of its /proc/self/ns/pid; 0 when unknown
    host_pid: int = 0  # its pid as the /proc it saw numbers it (the host's pid when it shared the host's /proc)


class Region:
    """One allocation's shared accounting region.  Use ``create`` or ``open``; close it (or use ``with``)."""

    path: Path

    def __init__(self, path: Path, handle: Any, ffi: Any, lib: Any) -> None:
        self.path = path
        self._handle = handle
        self._ffi = ffi
        self._lib = lib
        self._lock = threading.Lock()

    @classmethod
    def create(cls, path: str | Path, limits: Sequence[DeviceLimit], *, replace: bool = True) -> Region:
        """Write a fresh region with one entry per device in ``limits``.

        The file appears atomically.  By default an existing file is replaced (a leftover from an
        earlier allocation must not leak its counters into this one); processes still attached to the
        old file keep the old inode.  With ``replace=False`` an existing file is an error.
        """
        if len(limits) > MAX_DEVICES:
            raise LimiterError(f"{len(limits)} devices; a region holds at most {MAX_DEVICES}")
        native = _native()
        ffi, lib = native.ffi, native.lib
        target = Path(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise LimiterError(f"cannot create region {target}: {exc.strerror}") from None
        mem = ffi.new("uint64_t[]", [limit.memory_limit_bytes for limit in limits] or [0])
        core = ffi.new("uint32_t[]", [limit.core_limit_pct for limit in limits] or [0])
        out = ffi.new("hami_region **")
        err = ffi.new("char[]", _ERRLEN)
        flags = lib.HAMI_CREATE_REPLACE if replace else 0
        rc = lib.hami_region_create(os.fsencode(target), len(limits), mem, core, flags, out, err, _ERRLEN)
        if rc != lib.HAMI_OK:
            raise LimiterError(f"cannot create region {target}: {ffi.string(err).decode(errors='replace')}")
        region = cls(target, out[0], ffi, lib)
        for device, limit in enumerate(limits):
            if limit.virtual_memory:
                region.set_virtual_memory(device, True, limit.host_spill_limit_bytes)
        return region

    @classmethod
    def open(cls, path: str | Path) -> Region:
        """Attach to an existing region, validating its header; raises ``LimiterError`` if unusable."""
        native = _native()
        ffi, lib = native.ffi, native.lib
        target = Path(path)
        out = ffi.new("hami_region **")
        err = ffi.new("char[]", _ERRLEN)
        rc = lib.hami_region_open(os.fsencode(target), out, err, _ERRLEN)
        if rc != lib.HAMI_OK:
            raise LimiterError(f"cannot open region {target}: {ffi.string(err).decode(errors='replace')}")
        return cls(target, out[0], ffi, lib)

    def _live(self) -> Any:
        if self._handle is None:
            raise LimiterError(f"region {self.path} is closed")
        return self._handle

    @property
    def device_count(self) -> int:
        return int(self._lib.hami_region_device_count(self._live()))

    def set_limit(self, device: int, limit: DeviceLimit) -> None:
        """Change one device's limits; running shims see the change on their next call."""
        with self._lock:
            rc = self._lib.hami_region_set_limit(self._live(), device, limit.memory_limit_bytes, limit.core_limit_pct)
        if rc != self._lib.HAMI_OK:
            raise LimiterError(f"cannot set limit of device {device} in {self.path} (code {rc})")

    def set_virtual_memory(self, device: int, enabled: bool, host_spill_limit_bytes: int = 0) -> None:
        """Turn virtual device memory on or off for one device, with a cap on host-backed bytes (0: none)."""
        if host_spill_limit_bytes < 0:
            raise LimiterError(f"host spill limit {host_spill_limit_bytes} out of range")
        with self._lock:
            rc = self._lib.hami_region_set_virtual(self._live(), device, int(enabled), host_spill_limit_bytes)
        if rc != self._lib.HAMI_OK:
            raise LimiterError(f"cannot set virtual memory of device {device} in {self.path} (code {rc})")

    def device_usage(self) -> list[DeviceUsageRecord]:
        info = self._ffi.new("hami_device_info *")
        records = []
        with self._lock:
            handle = self._live()
            for device in range(self._lib.hami_region_device_count(handle)):
                self._lib.hami_region_device_info(handle, device, info)
                records.append(_device_record(device, info))
        return records

    def process_usage(self) -> list[ProcessRecord]:
        """One record per registered process and device of the region."""
        infos = self._ffi.new("hami_proc_info[]", MAX_PROCS)
        with self._lock:
            handle = self._live()
            count = self._lib.hami_region_proc_infos(handle, infos, MAX_PROCS)
            devices = self._lib.hami_region_device_count(handle)
        return _process_records([infos[i] for i in range(count)], devices)

    def reclaim_dead(self) -> int:
        """Give back what exited (or pid-reused) processes still hold; returns the slots freed."""
        with self._lock:
            n = int(self._lib.hami_region_reclaim_dead(self._live()))
        if n < 0:
            raise LimiterError(f"cannot lock region {self.path}")
        return n

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._lib.hami_region_close(self._handle)
                self._handle = None

    def __enter__(self) -> Region:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else "open"
        return f"Region({str(self.path)!r}, {state})"


def _device_record(device: int, info: Any) -> DeviceUsageRecord:
    return DeviceUsageRecord(
        device=device,
        memory_limit_bytes=int(info.memory_limit),
        core_limit_pct=int(info.core_limit),
        memory_used_bytes=int(info.memory_used),
        utilization_pct=int(info.util_x100) / 100.0 if info.util_valid else None,
        memory_peak_bytes=int(info.memory_peak),
        virtual_memory=bool(int(info.flags) & _VIRTUAL),
        memory_spilled_bytes=int(info.spill_used),
        memory_spilled_peak_bytes=int(info.spill_peak),
        host_spill_limit_bytes=int(info.spill_limit),
    )


def _process_records(infos: Sequence[Any], devices: int) -> list[ProcessRecord]:
    return [
        ProcessRecord(
            pid=int(info.pid),
            start_time=int(info.start_time),
            device=device,
            memory_used_bytes=int(info.used[device]),
            alive=bool(info.alive),
            pid_namespace=int(info.pidns),
            host_pid=int(info.host_pid),
        )
        for info in infos
        for device in range(devices)
    ]


@dataclass(frozen=True)
class RegionUsage:
    """One region's ``device_usage()`` and ``process_usage()``, read together."""

    devices: list[DeviceUsageRecord]
    processes: list[ProcessRecord]


class UsageReader:
    """Reads the usage of many open regions in one native call (``hami_regions_usage``).

    A region whose accounting reads exactly as at the previous call gives back the
    very same ``RegionUsage`` object, so a caller polling hundreds of mostly idle
    allocations can skip, by identity, the work for those that did not change.
    Not thread-safe: one owner (e.g. an exporter's limiter collector) calls it.
    """

    def __init__(self) -> None:
        native = _native()
        self._ffi, self._lib = native.ffi, native.lib
        self._device_size = self._ffi.sizeof("hami_device_info")
        self._proc_size = self._ffi.sizeof("hami_proc_info")
        self._capacity = 0
        self._proc_capacity = 0
        self._last: dict[Region, tuple[bytes, RegionUsage]] = {}
        self._buffers(1, 1)

    def _buffers(self, n: int, procs: int) -> None:
        if n > self._capacity:
            self._capacity = max(n, 2 * self._capacity, 64)
            self._dev = self._ffi.new("hami_device_info[]", self._capacity * MAX_DEVICES)
            self._dev_off = self._ffi.new("int[]", self._capacity + 1)
            self._proc_off = self._ffi.new("int[]", self._capacity + 1)
        if procs > self._proc_capacity:
            self._proc_capacity = max(procs, 2 * self._proc_capacity, 256)
            self._proc = self._ffi.new("hami_proc_info[]", self._proc_capacity)

    def read(self, regions: Sequence[Region]) -> list[RegionUsage | None]:
        """Each region's usage, in order; ``None`` for a region that is closed."""
        n = len(regions)
        self._buffers(n, 0)
        held: list[Region] = []
        try:
            for region in regions:
                region._lock.acquire()  # no region is closed under the native read
                held.append(region)
            handles = self._ffi.new("hami_region *[]", [r._handle or self._ffi.NULL for r in regions])
            while True:
                needed = self._lib.hami_regions_usage(
                    handles, n, self._dev, self._dev_off, self._proc, self._proc_capacity, self._proc_off
                )
                if needed <= self._proc_capacity:
                    break
                self._buffers(n, needed)
            open_ = [r._handle is not None for r in regions]
        finally:
            for region in held:
                region._lock.release()
        dev_off = self._ffi.unpack(self._dev_off, n + 1)
        proc_off = self._ffi.unpack(self._proc_off, n + 1)
        devs = self._ffi.buffer(self._dev, dev_off[n] * self._device_size)[:]
        procs = self._ffi.buffer(self._proc, proc_off[n] * self._proc_size)[:]
        last, current = self._last, {}
        out: list[RegionUsage | None] = []
        dsize, psize = self._device_size, self._proc_size
        for i, region in enumerate(regions):
            if not open_[i]:
                out.append(None)
                continue
            d0, d1, p0, p1 = dev_off[i], dev_off[i + 1], proc_off[i], proc_off[i + 1]
            raw = devs[d0 * dsize : d1 * dsize] + procs[p0 * psize : p1 * psize]
            seen = last.get(region)
            if seen is not None and seen[0] == raw:
                usage = seen[1]
            else:
                devices = d1 - d0
                usage = RegionUsage(
                    [_device_record(d, self._dev[d0 + d]) for d in range(devices)],
                    _process_records([self._proc[j] for j in range(p0, p1)], devices),
                )
            current[region] = (raw, usage)
            out.append(usage)
        self._last = current  # regions not read this time are forgotten
        return out


def parse_bytes(text: str) -> int:
    """Parse a limit the way the shims do ("4g", "512m", "1073741824"); raises ``LimiterError``."""
    native = _native()
    out = native.ffi.new("uint64_t *")
    if native.lib.hami_parse_bytes(text.encode(), out) != 0:
        raise LimiterError(f"not a byte size: {text!r}")
    return int(out[0])


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


# ---- the fake runtimes' shared state (native/include/hami_fake_gpu.h), for tests and the bench ----

FAKE_GPU_MAGIC = 0x31414746494D4148
FAKE_GPU_VERSION = 3
FAKE_MAX_DEVICES = 16
FAKE_MAX_PROCS = 64


class _FakeProc(ctypes.Structure):
    _fields_ = (
        ("pid", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("used_bytes", ctypes.c_uint64),
        ("busy_ns", ctypes.c_uint64),
        ("launches", ctypes.c_uint64),
    )


class _FakeDevice(ctypes.Structure):
    _fields_ = (
        ("total_bytes", ctypes.c_uint64),
        ("used_bytes", ctypes.c_uint64),
        ("peak_used_bytes", ctypes.c_uint64),
        ("busy_ns", ctypes.c_uint64),
        ("busy_until_ns", ctypes.c_uint64),
        ("launches", ctypes.c_uint64),
        ("procs", _FakeProc * FAKE_MAX_PROCS),
        ("host_bytes", ctypes.c_uint64),
        ("host_peak_bytes", ctypes.c_uint64),
    )


class _FakeState(ctypes.Structure):
    _fields_ = (
        ("magic", ctypes.c_uint64),
        ("version", ctypes.c_uint32),
        ("device_count", ctypes.c_uint32),
        ("size", ctypes.c_uint64),
        ("created_ns", ctypes.c_uint64),
        ("devices", _FakeDevice * FAKE_MAX_DEVICES),
    )


@dataclass(frozen=True)
class FakeDeviceSnapshot:
    """One fake device as the fake runtimes see it (``HAMI_FAKE_GPU_STATE``)."""

    device: int
    total_bytes: int
    used_bytes: int
    peak_used_bytes: int
    busy_ns: int
    launches: int
    process_used_bytes: dict[int, int]
    process_busy_ns: dict[int, int]
    host_bytes: int = 0  # host memory behind managed allocations (what virtual device memory spills to)
    host_peak_bytes: int = 0


def fake_gpu_snapshot(path: str | Path) -> list[FakeDeviceSnapshot]:
    """Read the fake runtimes' shared state file; raises ``LimiterError`` if it is not one."""
    data = Path(path).read_bytes()
    if len(data) < ctypes.sizeof(_FakeState):
        raise LimiterError(f"{path}: truncated fake GPU state ({len(data)} bytes)")
    state = _FakeState.from_buffer_copy(data)
    if state.magic != FAKE_GPU_MAGIC or state.version != FAKE_GPU_VERSION:
        raise LimiterError(f"{path}: not a fake GPU state file of version {FAKE_GPU_VERSION}")
    snapshots = []
    for index in range(state.device_count):
        dev = state.devices[index]
        procs = [p for p in dev.procs if p.pid > 0]
        snapshots.append(
            FakeDeviceSnapshot(
                device=index,
                total_bytes=dev.total_bytes,
                used_bytes=dev.used_bytes,
                peak_used_bytes=dev.peak_used_bytes,
                busy_ns=dev.busy_ns,
                launches=dev.launches,
                process_used_bytes={p.pid: p.used_bytes for p in procs},
                process_busy_ns={p.pid: p.busy_ns for p in procs},
                host_bytes=dev.host_bytes,
                host_peak_bytes=dev.host_peak_bytes,
            )
        )
    return snapshots
