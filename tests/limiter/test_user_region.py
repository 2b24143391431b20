"""Limits from the environment alone: per process by default, or one region per user on request.

With only ``CUDA_DEVICE_MEMORY_LIMIT`` (HAMi-core's variable) and no region path, each process accounts in a
private region: the limit is per process, and a fork/exec child gets a full limit of its own.
``HAMI_REGION_PATH=user`` names the per-user default region instead, shared by every process of the user that
asks for it, children included -- as HAMi-core's default cache file is.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from hami_devices.limiter import Region
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import NO_CONTEXT, Env, fields, run

MIB = 1 << 20
OK, OOM = "0", "2"


def hold(drivers: Drivers, env: dict[str, str], mib: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([str(drivers.cuda), "hold", str(mib * MIB)], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "READY rc=0"
    return proc


def second_allocation(drivers: Drivers, env: dict[str, str], mib: int) -> str:
    return fields(run([drivers.cuda, "lookup", str(mib * MIB)], env).stdout)["dlsym_alloc"]


def test_without_a_region_path_the_limit_is_per_process(drivers: Drivers, wenv: Env) -> None:
    env = wenv.build(CUDA_DEVICE_MEMORY_LIMIT="64m", HAMI_FAKE_CUDA_MEMORY_MIB="4096")
    holder = hold(drivers, env, 48)
    try:
        assert second_allocation(drivers, env, 48) == OK  # another process: another 64 MiB
    finally:
        holder.kill()
        holder.wait()


def test_the_per_user_region_is_shared_by_the_users_processes(drivers: Drivers, wenv: Env, tmp_path: Path) -> None:
    folder = tmp_path / "regions"
    env = wenv.build(
        **NO_CONTEXT,
        CUDA_DEVICE_MEMORY_LIMIT="64m",
        HAMI_REGION_PATH="user",
        HAMI_REGION_DIR=str(folder),
        HAMI_FAKE_CUDA_MEMORY_MIB="4096",
    )
    holder = hold(drivers, env, 48)
    try:
        assert second_allocation(drivers, env, 32) == OOM  # 48 + 32 > 64: one limit for both
        assert second_allocation(drivers, env, 16) == OK
        region = folder / "user-default.region"
        assert oct(region.stat().st_mode & 0o777) == "0o600" and oct(folder.stat().st_mode & 0o777) == "0o700"
        with Region.open(region) as shared:
            assert shared.device_usage()[0].memory_limit_bytes == 64 * MIB
            assert {r.pid for r in shared.process_usage() if r.memory_used_bytes} >= {holder.pid}
    finally:
        holder.kill()
        holder.wait()
    # Nobody holds memory in it any more: the next process's environment sets the limits.
    assert second_allocation(drivers, {**env, "CUDA_DEVICE_MEMORY_LIMIT": "128m"}, 96) == OK


def test_forked_children_share_the_per_user_region(drivers: Drivers, wenv: Env, tmp_path: Path) -> None:
    env = wenv.build(
        **NO_CONTEXT,
        HAMI_DEVICE_MEMORY_LIMIT="256m", HAMI_REGION_PATH="user", HAMI_REGION_DIR=str(tmp_path / "regions")
    )
    # The parent holds 1 MiB and its forked child's 16 threads 1 MiB each: all in one region.
    proc = subprocess.Popen([str(drivers.scenarios), "forkthreads", "16"], env=env, stdout=subprocess.PIPE, text=True)
    seen: dict[str, str] = {}
    try:
        assert proc.stdout is not None
        while len(seen) < 3:
            head, _, rest = proc.stdout.readline().strip().partition(" ")
            seen[head] = rest
        with Region.open(tmp_path / "regions" / "user-default.region") as region:
            assert region.device_usage()[0].memory_used_bytes == 17 * MIB
    finally:
        if "child" in seen:
            os.kill(int(seen["child"]), signal.SIGKILL)
        proc.kill()
        proc.wait()
