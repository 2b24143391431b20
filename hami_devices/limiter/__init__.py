"""The Python face of the native limiter: shared regions, limits and usage.

One region (an mmap'd file) exists per allocation.  The SDK creates it with the
allocation's limits; the LD_PRELOAD shims inside the workload attach to it by
path (``HAMI_REGION_PATH``, or HAMi-core's ``CUDA_DEVICE_MEMORY_SHARED_CACHE``),
reserve memory in it before every device allocation and pace kernel launches on
the device time they take (native/core/pacer.c).  This module reads and steers the region through the cffi
module ``hami_devices._native``, which compiles the same C core the shims use.

Environment a workload needs (the adapters set it):

``LD_PRELOAD``                 ``shim_library("libhami_cuda.so")`` (or ``libhami_ascend.so``,
                               ``libhami_cambricon.so``)
``HAMI_REGION_PATH``           the region file (``Region.path``); ``user``: the per-user default region
                               (``user-default.region`` in ``region_dir_path()``), shared by every process of
                               the user that names it.  Unset, limits from the variables below are per process.
``HAMI_DEVICE_MEMORY_LIMIT[_i]``  bytes, with optional k/m/g suffix; seeds a region the shim creates
``HAMI_DEVICE_CORE_LIMIT[_i]``    percent 1..99 (0 or 100: unlimited); likewise
``HAMI_DEVICE_CORE_POLICY[_i]``   ``cap`` (at most the limit) or ``share`` (at least it, and idle device time
                               on top); HAMi-core's ``GPU_CORE_UTILIZATION_POLICY`` maps ``default`` to share,
                               ``force`` to cap, ``disable`` to no compute limit (``DeviceLimit.core_policy``)
``HAMI_VIRTUAL_MEMORY[_i]``       ``1``: virtual device memory in a private or per-user region (``DeviceLimit``
                               ``virtual_memory`` for the SDK's regions), ``HAMI_VIRTUAL_MEMORY_HOST_LIMIT[_i]``
                               its host cap

The CUDA shim also reads ``CUDA_DEVICE_MEMORY_LIMIT[_i]``, ``CUDA_DEVICE_SM_LIMIT[_i]`` and
``CUDA_DEVICE_MEMORY_SHARED_CACHE``.  A region that exists is authoritative over those variables.

Compute limits are paced on device time: every launch is charged what it takes on the device
(the CUDA shim times a kernel shape's launches with events on their own stream) and the charges
of all the allocation's processes drain at the limit.  The driver's own reading corrects charges
that time-slicing with other processes stretched, and share mode reads the device's idle time.
The CUDA shim takes that reading, per device, from the first source that works:

1. NVML (``libnvidia-ml.so.1``, loaded by soname) when it knows the CUDA device by UUID or PCI bus
   id: the per-process samples of ``nvmlDeviceGetProcessUtilization``, summed over the region's
   pids, so other allocations on the same GPU are not counted; ``nvmlDeviceGetUtilizationRates``
   for the device's idle time.  Where the driver has no per-process samples (``NOT_SUPPORTED``,
   e.g. MIG or old drivers) the device-wide figure stands in; it over-counts on a shared GPU, so
   it never raises the charges, only lowers them.
2. The fake runtimes' shared state, when ``HAMI_FAKE_GPU_STATE`` is set (test builds only).
3. NVML by index (NVML index taken as the CUDA ordinal) when nothing better matched.
4. None: the timed charges alone hold the share (erring on the side of less under contention).
   The Ascend and Cambricon shims, which do not time launches, then charge 1 ms per launch.

``HAMI_UTILIZATION_SOURCE``    ``nvml``, ``fake`` or ``none`` forces one source (tests and
                               diagnostics); ``auto`` or unset: the order above.  ``nvml`` also
                               allows the index assumption when UUID and PCI lookups fail.
"""

from hami_devices.limiter.fake_state import FakeDeviceSnapshot, fake_gpu_snapshot
from hami_devices.limiter.native import MAX_DEVICES, MAX_PROCS, native_available, parse_bytes
from hami_devices.limiter.paths import (
    check_region_dir,
    core_sources,
    fake_library,
    include_dir,
    region_dir,
    region_dir_path,
    shim_library,
)
from hami_devices.limiter.records import DeviceUsageRecord, ProcessRecord, RegionUsage
from hami_devices.limiter.region import DeviceLimit, Region
from hami_devices.limiter.usage_reader import UsageReader

__all__ = [
    "MAX_DEVICES",
    "MAX_PROCS",
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
