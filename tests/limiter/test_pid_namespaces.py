"""Workload processes in other PID namespaces: their pids mean nothing here, yet they are never taken for
dead while they live, and everything they held comes back when they die.

Each holder runs under ``unshare --pid --fork`` (root), so it is pid 1 of a namespace of its own: two of
them with their own /proc (as in a container), one still seeing the host's /proc (where /proc/1 is the
host's init), and one in this test's namespace.  Killing ``unshare`` (``--kill-child``) kills the holder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hami_devices.limiter import DeviceLimit, Region, fake_gpu_snapshot
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import NO_CONTEXT, Env, fields, run

MIB = 1 << 20
UNSHARE = shutil.which("unshare")

pytestmark = pytest.mark.skipif(
    UNSHARE is None or os.geteuid() != 0, reason="needs util-linux unshare and root for new PID namespaces"
)

NAMESPACES = {
    "own-proc-a": ["--pid", "--fork", "--mount-proc", "--kill-child"],
    "own-proc-b": ["--pid", "--fork", "--mount-proc", "--kill-child"],
    "host-proc": ["--pid", "--fork", "--kill-child"],
    "this-namespace": None,
}


def _holder(drivers: Drivers, env: dict[str, str], ns: list[str] | None, nbytes: int) -> subprocess.Popen[str]:
    cmd = [str(drivers.cuda), "hold", str(nbytes)]
    if ns is not None:
        assert UNSHARE is not None
        cmd = [UNSHARE, *ns, *cmd]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "READY rc=0", (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
    return proc


def test_holders_in_other_pid_namespaces_are_alive_until_they_die(drivers: Drivers, wenv: Env) -> None:
    limit = 64 * MIB
    Region.create(wenv.region, [DeviceLimit(limit, 0)]).close()
    env = wenv.build(**NO_CONTEXT, HAMI_REGION_PATH=str(wenv.region), HAMI_FAKE_CUDA_MEMORY_MIB="4096")
    holders = {name: _holder(drivers, env, ns, 16 * MIB) for name, ns in NAMESPACES.items()}
    try:
        with Region.open(wenv.region) as region:
            # Both "pid 1"s hold their own slot: registering one did not free the other's.
            assert region.device_usage()[0].memory_used_bytes == limit
            records = [r for r in region.process_usage() if r.device == 0]
            assert len(records) == 4 and all(r.alive for r in records), records
            assert sorted(r.pid for r in records).count(1) == 3  # pid 1 in three namespaces
            # Nothing is reclaimed while they live: not by this process's scans ...
            for _ in range(3):
                assert region.reclaim_dead() == 0
                time.sleep(0.05)
            # ... nor by a workload's scan before it refuses, from yet another namespace, which is refused.
            assert UNSHARE is not None
            probe = run([UNSHARE, "--pid", "--fork", "--mount-proc", str(drivers.cuda), "oom"], env)
            assert probe.returncode == 0, probe.stderr
            assert fields(probe.stdout)["one_more"] == "2"  # CUDA_ERROR_OUT_OF_MEMORY
            assert region.device_usage()[0].memory_used_bytes == limit
            assert fake_gpu_snapshot(wenv.state)[0].used_bytes == limit
        # When they die, everything comes back.
        for proc in holders.values():
            proc.send_signal(signal.SIGKILL)
        for proc in holders.values():
            proc.wait(timeout=30)
        with Region.open(wenv.region) as region:
            deadline = time.monotonic() + 10
            while region.device_usage()[0].memory_used_bytes and time.monotonic() < deadline:
                region.reclaim_dead()
                time.sleep(0.01)
            assert region.device_usage()[0].memory_used_bytes == 0
            assert region.process_usage() == []
    finally:
        for proc in holders.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_new_workload_gets_the_memory_of_dead_holders_in_other_namespaces(drivers: Drivers, wenv: Env) -> None:
    # The refusal path reclaims too: a workload that needs the dead holders' memory is admitted without
    # anyone calling reclaim_dead().
    limit = 32 * MIB
    Region.create(wenv.region, [DeviceLimit(limit, 0)]).close()
    env = wenv.build(HAMI_REGION_PATH=str(wenv.region))
    ns = NAMESPACES["own-proc-a"]
    assert ns is not None
    first = _holder(drivers, env, ns, 32 * MIB)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert UNSHARE is not None
    deadline = time.monotonic() + 10
    while True:
        again = run([UNSHARE, *ns[:-1], str(drivers.cuda), "oom"], env)
        filled = fields(again.stdout)["filled"]
        if filled == f"{limit} rc=0" or time.monotonic() > deadline:
            break
        time.sleep(0.01)  # --kill-child: the holder dies just after unshare
    assert filled == f"{limit} rc=0", again.stdout


def test_registration_frees_a_dead_predecessor_but_never_a_live_process_with_the_same_pid(tmp_path: Path) -> None:
    from hami_devices import _native  # type: ignore[attr-defined]

    lib = _native.lib
    with Region.create(tmp_path / "a.region", [DeviceLimit(64 * MIB, 0)]) as region:
        handle, me = region._handle, os.getpid()
        start = lib.hami_proc_start_time(me)
        # A process that had this pid before (another start time, long gone) still holds 2 MiB ...
        dead = lib.hami_region_register(handle, me, start + 1)
        assert dead >= 0 and lib.hami_region_reserve(handle, dead, 0, 2 * MIB) == 0
        # ... and is given back when the pid's live owner registers.
        live = lib.hami_region_register(handle, me, start)
        assert live >= 0 and region.device_usage()[0].memory_used_bytes == 0
        assert lib.hami_region_reserve(handle, live, 0, MIB) == 0
        # A registration of the same pid number with another start time (in a namespace this process
        # cannot see into, say) must not free the live owner's slot.
        other = lib.hami_region_register(handle, me, start + 2)
        assert other >= 0 and other != live
        assert region.device_usage()[0].memory_used_bytes == MIB
        assert [r.memory_used_bytes for r in region.process_usage() if r.device == 0 and r.alive] == [MIB]
