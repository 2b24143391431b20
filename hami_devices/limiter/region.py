"""One allocation's shared accounting region, and the limits of its devices."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from hami_devices.errors import LimiterError
from hami_devices.limiter.native import ERRLEN, MAX_DEVICES, MAX_PROCS, _native
from hami_devices.limiter.records import DeviceUsageRecord, ProcessRecord, _device_record, _process_records

CORE_POLICIES = ("cap", "share")


@dataclass(frozen=True)
class DeviceLimit:
    """Limits of one device of an allocation.

    ``virtual_memory``: allocations within the limit that the card cannot hold physically are served from
    host memory (CUDA managed memory kept on the host) instead of failing; ``host_spill_limit_bytes`` caps
    those host-backed bytes (0: up to the memory limit).

    ``core_policy``: ``"cap"`` holds the allocation's kernels to at most ``core_limit_pct`` of the device's
    time; ``"share"`` guarantees at least that much whenever they want it and lets them use idle time on
    top (native/core/pacer.c).
    """

    memory_limit_bytes: int  # 0 = no memory limit
    core_limit_pct: int  # 0 or 100 = no compute limit; 1..99 = share
    virtual_memory: bool = False
    host_spill_limit_bytes: int = 0
    core_policy: str = "cap"

    def __post_init__(self) -> None:
        if self.memory_limit_bytes < 0 or self.memory_limit_bytes >= 1 << 64:
            raise LimiterError(f"memory limit {self.memory_limit_bytes} out of range")
        if not 0 <= self.core_limit_pct <= 100:
            raise LimiterError(f"core limit {self.core_limit_pct}% outside 0..100")
        if self.host_spill_limit_bytes < 0 or self.host_spill_limit_bytes >= 1 << 64:
            raise LimiterError(f"host spill limit {self.host_spill_limit_bytes} out of range")
        if self.core_policy not in CORE_POLICIES:
            raise LimiterError(f"core policy {self.core_policy!r}: want one of {', '.join(CORE_POLICIES)}")


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
        err = ffi.new("char[]", ERRLEN)
        flags = lib.HAMI_CREATE_REPLACE if replace else 0
        rc = lib.hami_region_create(os.fsencode(target), len(limits), mem, core, flags, out, err, ERRLEN)
        if rc != lib.HAMI_OK:
            raise LimiterError(f"cannot create region {target}: {ffi.string(err).decode(errors='replace')}")
        region = cls(target, out[0], ffi, lib)
        for device, limit in enumerate(limits):
            if limit.virtual_memory:
                region.set_virtual_memory(device, True, limit.host_spill_limit_bytes)
            if limit.core_policy != "cap":
                region.set_core_policy(device, limit.core_policy)
        return region

    @classmethod
    def open(cls, path: str | Path) -> Region:
        """Attach to an existing region, validating its header; raises ``LimiterError`` if unusable."""
        native = _native()
        ffi, lib = native.ffi, native.lib
        target = Path(path)
        out = ffi.new("hami_region **")
        err = ffi.new("char[]", ERRLEN)
        rc = lib.hami_region_open(os.fsencode(target), out, err, ERRLEN)
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

    def set_core_policy(self, device: int, policy: str) -> None:
        """Make one device's compute limit a ceiling (``"cap"``) or a guarantee (``"share"``)."""
        if policy not in CORE_POLICIES:
            raise LimiterError(f"core policy {policy!r}: want one of {', '.join(CORE_POLICIES)}")
        with self._lock:
            rc = self._lib.hami_region_set_core_policy(self._live(), device, int(policy == "share"))
        if rc != self._lib.HAMI_OK:
            raise LimiterError(f"cannot set the core policy of device {device} in {self.path} (code {rc})")

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
