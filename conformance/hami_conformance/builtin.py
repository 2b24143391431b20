"""Workload harnesses the suite ships for runtimes it knows, used when an adapter's profile gives none.

Today: the CUDA driver API, for an adapter whose limiter shim is ``libhami_cuda.so``.  On the
simulated back end it runs against the project's fake ``libcuda.so.1`` (built with hami-devices);
on hardware, against the real driver (memory only: the compute check needs the fake's timed kernels).
"""

from __future__ import annotations

import sys

from hami_conformance.profile import WorkloadProgram
from hami_devices.adapter import VendorAdapter
from hami_devices.errors import LimiterError

TMP = "{tmp}"
"""Placeholder in ``WorkloadProgram.env`` values: the suite puts a fresh folder per check there."""


def builtin_workload(adapter: VendorAdapter, hardware: bool) -> WorkloadProgram | None:
    if adapter.limiter_shim != "libhami_cuda.so":
        return None
    argv = (sys.executable, "-m", "hami_conformance.workloads.cuda")
    if hardware:
        return WorkloadProgram(argv=argv, compute=False)
    from hami_devices import limiter

    try:
        fake = limiter.fake_library("libcuda.so.1")
    except LimiterError:
        return None
    env = {"HAMI_CONFORMANCE_LIBCUDA": str(fake), "HAMI_FAKE_GPU_STATE": f"{TMP}/fake-gpu.state"}
    return WorkloadProgram(argv=argv, env=env)
