"""The processes of the check and the limiter environment of each: who runs alone, who runs together, when.

Environment (issue 36 item 3): ``HAMI_DEVICE_CORE_LIMIT`` (percent; 0 or 100 means no limit) and
``HAMI_DEVICE_CORE_POLICY`` (``cap``: a ceiling; ``share``: a guarantee and weight), each allocation with its own
region file; HAMi-core's ``CUDA_DEVICE_SM_LIMIT`` with ``GPU_CORE_UTILIZATION_POLICY`` (``force`` is ``cap``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from .device import KINDS

# Inherited variables that would put a limit (or a shim) into the bare runs.
_LIMITER_PREFIXES = ("HAMI_", "CUDA_DEVICE_MEMORY_", "CUDA_DEVICE_SM_LIMIT")
_LIMITER_NAMES = ("LD_PRELOAD", "GPU_CORE_UTILIZATION_POLICY")


@dataclass(frozen=True)
class Limit:
    """One allocation's compute settings; ``shim`` False means no limiter at all (the bare baseline)."""

    shim: bool = True
    core: int | None = None
    policy: str | None = None
    hami_core_policy: str | None = None  # drive the limit through HAMi-core's names instead of HAMI_*

    def __str__(self) -> str:
        if not self.shim:
            return "bare (no shim)"
        if self.core is None:
            return "shim, no core limit"
        if self.hami_core_policy is not None:
            return f"HAMi-core CUDA_DEVICE_SM_LIMIT={self.core} GPU_CORE_UTILIZATION_POLICY={self.hami_core_policy}"
        return f"{self.policy} {self.core} %"

    def environment(self, base: Mapping[str, str], shim_path: Path, region: Path) -> dict[str, str]:
        env = {k: v for k, v in base.items() if not (k.startswith(_LIMITER_PREFIXES) or k in _LIMITER_NAMES)}
        if not self.shim:
            return env
        env["LD_PRELOAD"] = str(shim_path)
        if self.hami_core_policy is not None:
            env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(region)
            env["CUDA_DEVICE_SM_LIMIT"] = str(self.core)
            env["GPU_CORE_UTILIZATION_POLICY"] = self.hami_core_policy
            return env
        env["HAMI_REGION_PATH"] = str(region)
        if self.core is not None:
            env["HAMI_DEVICE_CORE_LIMIT"] = str(self.core)
            env["HAMI_DEVICE_CORE_POLICY"] = self.policy or "cap"
        return env


BARE = Limit(shim=False)
NO_LIMIT = Limit()


def cap(core: int) -> Limit:
    return Limit(core=core, policy="cap")


def share(core: int) -> Limit:
    return Limit(core=core, policy="share")


@dataclass(frozen=True)
class Timing:
    """Seconds of each phase (``scaled`` shrinks them for the self-test); ``startup_s`` is what one process is
    budgeted for its interpreter, ``import torch`` and CUDA initialisation."""

    startup_s: float = 8.0
    warmup_s: float = 0.3
    solo_s: float = 1.5
    decode_s: float = 2.5
    together_s: float = 4.0  # two tenants run together this long ...
    together_window: tuple[float, float] = (1.0, 3.5)  # ... and are measured here (settled, neither alone yet)
    arrival_s: float = 3.0  # the second share tenant arrives here ...
    arrival_end_s: float = 6.5  # ... and both run until here
    alone_window: tuple[float, float] = (1.0, 3.0)  # the first share tenant, alone

    def scaled(self, factor: float, startup_s: float) -> Timing:
        return Timing(startup_s, self.warmup_s * factor, self.solo_s * factor, self.decode_s * factor,
                      self.together_s * factor, (self.together_window[0] * factor, self.together_window[1] * factor),
                      self.arrival_s * factor, self.arrival_end_s * factor,
                      (self.alone_window[0] * factor, self.alone_window[1] * factor))


@dataclass(frozen=True)
class Solo:
    name: str
    limit: Limit
    kinds: tuple[str, ...] = KINDS
    decode: bool = False
    kernel_time: bool = False  # measure each kernel's device time (only where nothing paces the launches)
    launch: bool = False

    def cost(self, t: Timing) -> float:
        return (t.startup_s + len(self.kinds) * (t.warmup_s + t.solo_s + (0.3 if self.kernel_time else 0.0))
                + (t.warmup_s + t.decode_s + 1.0 if self.decode else 0.0) + (0.2 if self.launch else 0.0))


@dataclass(frozen=True)
class Tenant:
    name: str
    limit: Limit
    start_s: float = 0.0  # after the go; every tenant runs until the group's end


@dataclass(frozen=True)
class Group:
    """Tenants of separate allocations on the one GPU, started together by a go file; big matmul streams."""

    name: str
    tenants: tuple[Tenant, ...]
    end_s: float = 0.0
    kind: str = "big"

    def cost(self, t: Timing) -> float:
        return t.startup_s + t.warmup_s + self.end_s + 1.0


def solos() -> list[Solo]:
    """In the order they run: bare first (every share is of it), the launch path next to it."""
    return [
        Solo("bare", BARE, decode=True, kernel_time=True, launch=True),
        Solo("no_limit", NO_LIMIT, kernel_time=True, launch=True),
        Solo("cap30", cap(30), decode=True),
        Solo("cap50", cap(50), decode=True),
    ]


def groups(t: Timing) -> list[Group]:
    return [
        Group("two_cap50", (Tenant("a", cap(50)), Tenant("b", cap(50))), t.together_s),
        Group("two_share50", (Tenant("a", share(50)), Tenant("b", share(50))), t.together_s),
        Group("cap30_unlimited", (Tenant("capped", cap(30)), Tenant("unlimited", NO_LIMIT)), t.together_s),
        Group("share_arrival", (Tenant("first", share(30)), Tenant("second", share(70), start_s=t.arrival_s)),
              t.arrival_end_s),
    ]


HAMI_CORE_FORCE = Solo("hami_core_force30", replace(cap(30), hami_core_policy="force"), kinds=("big",))
