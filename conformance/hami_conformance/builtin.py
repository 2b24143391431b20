"""Workload harnesses the suite ships for runtimes it knows, used when an adapter's profile gives none.

Today, chosen by the adapter's limiter shim:

* ``libhami_cuda.so``: the CUDA driver API (``workloads/cuda.py``), fake ``libcuda.so.1``;
* ``libhami_ascend.so``: Ascend ACL (``workloads/acl.py``), fake ``libascendcl.so``;
* ``libhami_cambricon.so``: Cambricon CNRT (``workloads/cnrt.py``), fake ``libcnrt.so``.

On the simulated back end each runs against the project's fake runtime (built with hami-devices);
on hardware, against the real runtime (memory only: the compute check needs the fake's timed kernels).
"""

from __future__ import annotations

import os
import sys

from hami_conformance.profile import WorkloadProgram
from hami_devices.adapter import VendorAdapter
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


def builtin_workload(adapter: VendorAdapter, hardware: bool) -> WorkloadProgram | None:
    runtime = _RUNTIMES.get(adapter.limiter_shim or "")
    if runtime is None:
        return None
    module, library, variable = runtime
    argv = (sys.executable, "-m", f"hami_conformance.workloads.{module}")
    if hardware:
        return WorkloadProgram(argv=argv, compute=False)
    from hami_devices import limiter

    try:
        fake = limiter.fake_library(library)
    except LimiterError:
        return None
    env = {
        variable: str(fake),
        "HAMI_FAKE_GPU_STATE": f"{TMP}/fake-gpu.state",
        "HAMI_FAKE_MEMORY_MIB": str(FAKE_MEMORY_MIB),
    }
    if library == "libcuda.so.1":
        # The CUDA shim measures compute through NVML, as on a host: the fake NVML, which describes the
        # fake-GPU state, is found first by soname.
        nvml = limiter.fake_library("nvml/libnvidia-ml.so.1").parent
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(nvml), os.environ.get("LD_LIBRARY_PATH")) if p)
    return WorkloadProgram(argv=argv, env=env)
