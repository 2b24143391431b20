"""What a process's framework and runtime take on the device beyond the model's tensors, with where each
figure comes from.

Two parts, booked differently:

* **The runtime context** (CUDA's, ~518 MiB per process on an H200): outside the limiter's accounting (no
  ``cuMemAlloc`` makes it), so it is not part of ``memory_mib``; the scheduler books it beside every shared
  grant from the traits catalog's ``context_mib`` (``DeviceInfo.context_mib``).  ``size`` shows it from that
  same field, per process.
* **The framework's workspaces and allocator granularity**: allocated through the runtime like any tensor,
  so counted against the share's limit: added to ``memory_mib``.

PyTorch on NVIDIA (``c10/cuda/CUDACachingAllocator.cpp``, ``aten/src/ATen/cuda/CublasHandlePool.cpp``):
the caching allocator takes device memory in segments of 2 MiB (requests up to 1 MiB) and 20 MiB (up to
10 MiB), so a small model holds at least one of each; cuBLAS gets a workspace per handle and stream, by
default ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (32 MiB) from Hopper on and ``:4096:2:16:8`` (8 MiB and
128 KiB) before.  Other vendors' frameworks have no figure measured here: their allowance is 0, said so,
and ``--headroom`` is the way to add one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from hami_devices.errors import InvalidRequest
from hami_devices.models import DeviceTraits

FRAMEWORKS = ("pytorch", "none")
ALLOCATOR_SEGMENTS_MIB = 2 + 20  # one small and one large segment of the caching allocator
CUBLAS_WORKSPACE_MIB = {"hopper": 32.0, "blackwell": 32.0}  # :4096:8 from sm90 on
CUBLAS_WORKSPACE_OLDER_MIB = 8.125  # :4096:2:16:8
SOURCE_PYTORCH = (
    "PyTorch caching allocator segments 2 + 20 MiB (CUDACachingAllocator.cpp kSmallBuffer/kLargeBuffer); "
    "cuBLAS workspace {cublas:g} MiB (CublasHandlePool.cpp default CUBLAS_WORKSPACE_CONFIG{config})"
)


@dataclass(frozen=True)
class Allowance:
    framework: str
    workspace_mib: int  # added to memory_mib: counted by the limiter
    workspace_source: str
    context_mib: int | None  # per process, booked beside the share by the scheduler; None: not known
    context_source: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def allowance(framework: str, device: DeviceTraits | None) -> Allowance:
    """The allowance of ``framework`` on ``device`` (None: any device, the largest known figure)."""
    if framework not in FRAMEWORKS:
        raise InvalidRequest("framework", f"one of {', '.join(FRAMEWORKS)}, not {framework!r}")
    context, context_source = _context(device)
    if framework == "none":
        return Allowance(framework, 0, "no framework: the model's tensors only", context, context_source)
    vendor = device.vendor if device is not None else "nvidia"
    if vendor != "nvidia":
        return Allowance(framework, 0, f"none measured for {framework} on {vendor}: add one with --headroom",
                         context, context_source)
    newer = device is None or device.generation in CUBLAS_WORKSPACE_MIB
    cublas = CUBLAS_WORKSPACE_MIB.get(device.generation if device else "hopper", CUBLAS_WORKSPACE_OLDER_MIB)
    source = SOURCE_PYTORCH.format(cublas=cublas, config=" :4096:8" if newer else " :4096:2:16:8")
    if device is None:
        source += "; no --device-model: the Hopper figure, the larger"
    return Allowance(framework, math.ceil(ALLOCATOR_SEGMENTS_MIB + cublas), source, context, context_source)


def _context(device: DeviceTraits | None) -> tuple[int | None, str]:
    if device is None:
        return None, "give --device-model: the traits catalog's context_mib (measured: H200 518 MiB)"
    if device.context_mib:
        return device.context_mib, f"traits catalog context_mib of {device.model} (measured)"
    return None, f"no measured context_mib for {device.model} in the traits catalog"
