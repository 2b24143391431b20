"""What the suite knows about the built-in vendors' runtimes and libraries, used when an adapter's profile
gives none: workload harnesses for the limiter checks, and, on real hardware, a reader of the partitions
the vendor library reports (the ground truth of the release checks; on the fake libraries,
state_partitions.py reads their state).

Workload harnesses, chosen by the adapter's limiter shim:

* ``libhami_cuda.so``: the CUDA driver API (``workloads/cuda.py``), fake ``libcuda.so.1``;
* ``libhami_ascend.so``: Ascend ACL (``workloads/acl.py``), fake ``libascendcl.so``;
* ``libhami_cambricon.so``: Cambricon CNRT (``workloads/cnrt.py``), fake ``libcnrt.so``.

On the simulated back end, and on the fake vendor libraries hami-devices builds for tests (the
"hardware" back end with ``HAMI_NVML_LIBRARY`` & co. pointing at them), each runs against the
project's fake runtime; on real hardware, against the real runtime (memory only: the compute check
needs the fake's timed kernels).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hami_conformance.profile import PartitionReader, WorkloadProgram
from hami_devices.adapter import Probe, VendorAdapter
from hami_devices.errors import LimiterError

TMP = "{tmp}"
"""Placeholder in ``WorkloadProgram.env`` values: the suite puts a fresh folder per check there."""

FAKE_MEMORY_MIB = 1 << 20
"""Capacity of each fake device (1 TiB, bookkeeping only): larger than any grant, so an
out-of-memory error in the memory check can only come from the limiter."""


_RUNTIMES = {
    # limiter shim: (workload module, fake runtime library, variable naming the runtime library)
    "libhami_cuda.so": ("cuda", "libcuda.so.1", "HAMI_CONFORMANCE_LIBCUDA"),
    "libhami_ascend.so": ("acl", "libascendcl.so", "HAMI_CONFORMANCE_LIBASCENDCL"),
    "libhami_cambricon.so": ("cnrt", "libcnrt.so", "HAMI_CONFORMANCE_LIBCNRT"),
}


_FAKE_MANAGEMENT = {
    # vendor: the fake management libraries (relative to the installed fakes folder)
    "nvidia": ("nvml/libnvidia-ml.so.1", "nvml-old/libnvidia-ml.so.1"),
    "ascend": ("dcmi/libdcmi.so",),
    "cambricon": ("cndev/libcndev.so",),
}


def fake_hardware(adapter: VendorAdapter, probe: Probe) -> bool:
    """Whether the library the adapter's probe found is one of the project's fake vendor libraries."""
    if not probe.available or not probe.library:
        return False
    from hami_devices import limiter

    found = Path(probe.library).resolve()
    for name in _FAKE_MANAGEMENT.get(adapter.name, ()):
        try:
            if limiter.fake_library(name).resolve() == found:
                return True
        except LimiterError:
            continue
    return False


def builtin_workload(adapter: VendorAdapter, hardware: bool, fake: bool = False) -> WorkloadProgram | None:
    runtime = _RUNTIMES.get(adapter.limiter_shim or "")
    if runtime is None:
        return None
    module, library, variable = runtime
    argv = (sys.executable, "-m", f"hami_conformance.workloads.{module}")
    if hardware and not fake:
        return WorkloadProgram(argv=argv, compute=False)
    from hami_devices import limiter

    try:
        runtime_library = limiter.fake_library(library)
    except LimiterError:
        return None
    env = {
        variable: str(runtime_library),
        "HAMI_FAKE_GPU_STATE": f"{TMP}/fake-gpu.state",
        "HAMI_FAKE_MEMORY_MIB": str(FAKE_MEMORY_MIB),
        # This fake runtime is a stand-in for the limiter checks, not the adapter's devices: it shows its own
        # device whatever the allocation's CUDA_VISIBLE_DEVICES & co. name (docs/fakes.md).
        "HAMI_FAKE_VISIBLE_DEVICES": "all",
    }
    if library == "libcuda.so.1":
        # The CUDA shim measures compute through NVML, as on a host: the fake NVML, which describes the
        # fake-GPU state, is found first by soname.
        nvml = limiter.fake_library("nvml/libnvidia-ml.so.1").parent
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(nvml), os.environ.get("LD_LIBRARY_PATH")) if p)
    return WorkloadProgram(argv=argv, env=env)


_NVML_FAMILY = "hami_nvidia"
"""The package of the built-in adapter whose library, NVML, lists partitions through its public API."""


def builtin_partition_reader(adapter: VendorAdapter, library: str | None) -> PartitionReader | None:
    """For a built-in vendor on real hardware: the partitions its vendor library reports, read through
    the library's own API (nvml_partitions.py), never the adapter's objects.  Only NVML gives one to
    every process; DCMI's vNPUs and CNDev's sMLU instances would need the vendors' tools (npu-smi,
    cnmon), which the suite does not read yet, so there the release checks compare the ledger,
    monitor() and the regions only."""
    from hami_devices.adapter import Capability

    if Capability.PARTITIONS not in adapter.capabilities or not library:
        return None
    # a subclass of a built-in adapter reads the same library
    if any(cls.__module__.partition(".")[0] == _NVML_FAMILY for cls in type(adapter).__mro__):
        from hami_conformance.nvml_partitions import nvml_partition_reader

        return nvml_partition_reader(library)
    return None
