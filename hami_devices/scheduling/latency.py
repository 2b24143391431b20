"""A deliberately simple latency model for inference placement.

One decode step of a memory-bound model streams its weights (the part's
memory) through device memory once:

    latency_ms = memory_GiB / bandwidth_GBps * 1000 * (1 + CONTENTION * sharers)

where ``sharers`` counts the tasks already on the device (each co-tenant is
assumed to steal ``CONTENTION`` of the bandwidth).  A device without traits
(unknown bandwidth) has an infinite estimate.  The model only has to order
devices sensibly (faster memory, fewer co-tenants), not predict milliseconds.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

CONTENTION = 0.5
FloatArray = npt.NDArray[np.float64]


def estimate_latency_ms(memory_mib: npt.ArrayLike, bandwidth_gbps: npt.ArrayLike, sharers: npt.ArrayLike) -> FloatArray:
    mem_gib = np.asarray(memory_mib, dtype=np.float64) / 1024.0
    bw = np.asarray(bandwidth_gbps, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        base = np.where(bw > 0, mem_gib / np.where(bw > 0, bw, 1.0) * 1000.0, np.inf)
    return base * (1.0 + CONTENTION * np.asarray(sharers, dtype=np.float64))
