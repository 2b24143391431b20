"""Many regions' usage in one native call, with unchanged regions recognised by identity."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from hami_devices.errors import LimiterError
from hami_devices.limiter.native import MAX_DEVICES, _native
from hami_devices.limiter.records import ProcessRecord, RegionUsage, _device_record, _process_records
from hami_devices.limiter.region import Region


class UsageReader:
    """Reads the usage of many open regions in one native call (``hami_regions_usage``).

    Whoever reads reclaims: a region that shows a dead process (its slot still charged, because
    no shim of that region has allocated since) is given back what that process held
    (``Region.reclaim_dead``) and read again, so usage, exporter series and usage samples drop to
    what the living hold at the first read after the death, not when a shim or ``monitor`` next
    happens to scan.  The processes reclaimed by a read are still listed in its result, once,
    ``alive=False`` with the memory they held, so a caller can tell an exit and what it freed.

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

    def _native_read(self, regions: Sequence[Region]) -> tuple[list[bool], list[int], list[int]]:
        """Fills the buffers; returns which regions were open and the device and process offsets."""
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
        return open_, self._ffi.unpack(self._dev_off, n + 1), self._ffi.unpack(self._proc_off, n + 1)

    def _departed(self, open_: list[bool], dev_off: list[int], proc_off: list[int]) -> dict[int, list[ProcessRecord]]:
        """Per region that shows dead processes: their records, as they were before the reclaim."""
        found: dict[int, list[ProcessRecord]] = {}
        for i, is_open in enumerate(open_):
            dead = [self._proc[j] for j in range(proc_off[i], proc_off[i + 1]) if not self._proc[j].alive]
            if is_open and dead:
                found[i] = _process_records(dead, dev_off[i + 1] - dev_off[i])
        return found

    def read(self, regions: Sequence[Region]) -> list[RegionUsage | None]:
        """Each region's usage, in order, after dead processes were reclaimed; ``None`` for a closed region."""
        n = len(regions)
        open_, dev_off, proc_off = self._native_read(regions)
        departed = self._departed(open_, dev_off, proc_off)
        if departed:
            for i in departed:
                _reclaim(regions[i])
            open_, dev_off, proc_off = self._native_read(regions)
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
            gone = departed.get(i, [])
            raw = devs[d0 * dsize : d1 * dsize] + procs[p0 * psize : p1 * psize] + repr(gone).encode()
            seen = last.get(region)
            if seen is not None and seen[0] == raw:
                usage = seen[1]
            else:
                devices = d1 - d0
                listed = _process_records([self._proc[j] for j in range(p0, p1)], devices)
                usage = RegionUsage(
                    [_device_record(d, self._dev[d0 + d]) for d in range(devices)], listed + _still_gone(gone, listed)
                )
            current[region] = (raw, usage)
            out.append(usage)
        self._last = current  # regions not read this time are forgotten
        return out


def _reclaim(region: Region) -> None:
    # A lock that cannot be taken now: the region is read as it is, and reclaimed at the next read.
    with contextlib.suppress(LimiterError):
        region.reclaim_dead()


def _still_gone(gone: list[ProcessRecord], listed: list[ProcessRecord]) -> list[ProcessRecord]:
    """The departed whose slot the reclaim freed (one it could not free is listed by the second read already)."""
    slots = {(p.pid, p.start_time) for p in listed}
    return [p for p in gone if (p.pid, p.start_time) not in slots]
