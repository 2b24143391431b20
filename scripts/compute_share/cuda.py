"""PyTorch on GPU 0: the kernels of issue 36's table, timing events, a spin kernel and a small decoder LM.

Only public PyTorch calls, plus ``torch.cuda._sleep`` (a one-thread kernel spinning for a number of clock
cycles, which PyTorch's own stream tests use) to hold the stream while a burst of kernels queues behind it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def _torch() -> Any:
    return importlib.import_module("torch")


class CudaEvent:
    def __init__(self, torch: Any) -> None:
        self._event = torch.cuda.Event(enable_timing=True)

    def record(self) -> None:
        self._event.record()

    def synchronize(self) -> None:
        self._event.synchronize()

    def elapsed_s(self, end: Any) -> float:
        return float(self._event.elapsed_time(end._event)) / 1e3  # elapsed_time is in milliseconds


class TorchDecoder:
    """A decoder-only transformer with random fp16 weights (nothing downloaded) and a KV cache: 8 layers,
    width 1024, 16 heads, vocabulary 8192.  One token costs about 200 small kernels, so decoding is launch-bound,
    like serving a small model one sequence at a time."""

    LAYERS, WIDTH, HEADS, VOCAB, MAX_LEN = 8, 1024, 16, 8192, 256

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._f = importlib.import_module("torch.nn.functional")
        gen = torch.Generator(device="cuda").manual_seed(0)
        d, h = self.WIDTH, self.HEADS

        def weight(*shape: int) -> Any:
            return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float16) * 0.02

        self._embed = weight(self.VOCAB, d)
        self._layers = [(weight(d, 3 * d), weight(d, d), weight(d, 4 * d), weight(4 * d, d)) for _ in
                        range(self.LAYERS)]
        cache = (self.LAYERS, 1, h, self.MAX_LEN, d // h)
        self._keys = torch.zeros(cache, device="cuda", dtype=torch.float16)
        self._values = torch.zeros(cache, device="cuda", dtype=torch.float16)
        self._pos = 0
        self._tok = torch.zeros(1, dtype=torch.long, device="cuda")

    def reset(self) -> None:
        self._pos = 0
        self._tok.zero_()

    def _norm(self, x: Any) -> Any:
        return x * self._torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)

    def step(self) -> None:
        if self._pos == self.MAX_LEN:  # a new sequence overwrites the cache
            self._pos = 0
        d, h, p = self.WIDTH, self.HEADS, self._pos
        x = self._embed[self._tok]  # (1, d)
        for i, (qkv, out, up, down) in enumerate(self._layers):
            q, k, v = (self._norm(x) @ qkv).view(1, 3, h, d // h).unbind(1)  # each (1, h, d/h)
            self._keys[i, :, :, p] = k
            self._values[i, :, :, p] = v
            att = self._f.scaled_dot_product_attention(q.unsqueeze(2), self._keys[i, :, :, : p + 1],
                                                       self._values[i, :, :, : p + 1])
            x = x + att.reshape(1, d) @ out
            x = x + self._f.gelu(self._norm(x) @ up) @ down
        self._tok = (self._norm(x) @ self._embed.T).argmax(-1)
        self._pos += 1

    def token(self) -> int:
        return int(self._tok.item())


class TorchDevice:
    def __init__(self) -> None:
        torch = self._torch = _torch()
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False: no CUDA device for the compute-share check")
        torch.cuda.set_device(0)
        self._tiny = torch.zeros(16, device="cuda")
        self._mats = {n: (torch.randn(n, n, device="cuda"), torch.empty(n, n, device="cuda")) for n in (1024, 4096)}
        torch.cuda.synchronize()
        self._cycles_per_s: float | None = None

    def launcher(self, kind: str) -> Callable[[], None]:
        if kind == "tiny":
            tiny = self._tiny
            return lambda: tiny.add_(1.0)
        a, out = self._mats[{"medium": 1024, "big": 4096}[kind]]
        mm = self._torch.mm
        return lambda: mm(a, a, out=out)

    def _clock(self) -> float:
        """Spin-kernel cycles per second, from events around two spins (the first loads the kernel)."""
        if self._cycles_per_s is None:
            cycles = 20_000_000
            for _ in range(2):
                start, end = self.event(), self.event()
                start.record()
                self._torch.cuda._sleep(cycles)
                end.record()
                end.synchronize()
                self._cycles_per_s = cycles / start.elapsed_s(end)
        assert self._cycles_per_s is not None
        return self._cycles_per_s

    def spin(self, seconds: float) -> None:
        self._torch.cuda._sleep(int(seconds * self._clock()))

    def event(self) -> CudaEvent:
        return CudaEvent(self._torch)

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()

    def decoder(self) -> TorchDecoder:
        return TorchDecoder(self._torch)

    def describe(self) -> dict[str, Any]:
        torch = self._torch
        return {"backend": "torch", "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                "cuda_runtime": torch.version.cuda}
