"""What the workloads need of a device: kernels to launch, a spin kernel, timing events, a small decoder.

Two implementations: ``cuda.TorchDevice`` (PyTorch on GPU 0) and ``standin.StandInDevice`` (a CPU model used by
``--selftest``, so the orchestration and arithmetic run where there is no GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

KINDS = ("tiny", "medium", "big")  # add_ on 16 floats, 1024x1024 matmul, 4096x4096 matmul (issue 36's table)


class Event(Protocol):
    """A point in the stream's work; the device stamps it when everything launched before it has run."""

    def record(self) -> None: ...

    def synchronize(self) -> None: ...

    def elapsed_s(self, end: Event) -> float: ...


class Decoder(Protocol):
    """Greedy token-by-token generation: ``step`` launches one token's kernels and keeps the token on the
    device; ``token`` reads it back (a host sync, as a server does to detokenize and stop)."""

    def reset(self) -> None: ...

    def step(self) -> None: ...

    def token(self) -> int: ...


class Device(Protocol):
    def launcher(self, kind: str) -> Callable[[], None]: ...

    def spin(self, seconds: float) -> None:
        """Launch one kernel that holds the stream for about ``seconds``."""
        ...

    def event(self) -> Event: ...

    def synchronize(self) -> None: ...

    def decoder(self) -> Decoder: ...

    def describe(self) -> dict[str, Any]: ...
