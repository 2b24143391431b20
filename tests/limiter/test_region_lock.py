"""The region lock never hangs, and a killed process's charge goes back only once its memory is freed.

A robust process-shared mutex alone can leave a process asleep forever: an unlock wakes one waiter, and
if that waiter is killed before it takes the lock, the remaining waiters sleep on a free lock.  The first
test puts a waiter in exactly that state (the lock word cleared under it, as the killed wakee leaves it)
and requires it to get the lock.  A process whose main thread has exited (a zombie leader) while another
thread still holds device memory keeps its charge.  The chaos storm then kills workers every 20 ms, run after run, and
requires no worker to hang and neither the region nor the fake driver -- which frees a process's memory
only when the process's "device node" is released, as a driver does -- to pass the limit.

The fake driver is the oracle there, so its own books must survive the storm: a driver keeps them in the
kernel, where SIGKILL cannot land between two writes, and the fake keeps them in a shared file, where it can.
A storm on the fake alone (no limiter) requires the device's total to stay the sum of what its processes hold.
Kills are counted, not timed, so a loaded machine changes how long a storm takes, not what it proves.
"""

from __future__ import annotations

import mmap
import struct
import subprocess
import time
from pathlib import Path

import pytest

from hami_devices.limiter import DeviceLimit, Region, fake_gpu_snapshot
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import NO_CONTEXT, PYTHON, Env, fields, python_env, run

MIB = 1 << 20
# hami_region_shm: a 48-byte header padded to 64, then the pthread_mutex_t, whose first int is glibc's
# lock word (0 free; the owner's tid, plus FUTEX_WAITERS when someone sleeps on it).
LOCK_WORD = 64
FUTEX_WAITERS = 0x80000000
TID_MASK = 0x3FFFFFFF

_LOCKER = """
import sys, time
from hami_devices import _native
from hami_devices.limiter import Region
r = Region.open(sys.argv[1])
assert _native.lib.hami_region_lock(r._handle) == 0
print("LOCKED", flush=True)
if sys.argv[2] == "hold":
    time.sleep(600)
"""


def _locker(path: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-c", _LOCKER, str(path), mode], env=python_env(), stdout=subprocess.PIPE, text=True
    )


def _word(view: mmap.mmap) -> int:
    return int(struct.unpack_from("<I", view, LOCK_WORD)[0])


def test_a_waiter_whose_wakeup_was_lost_still_gets_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "a.region"
    Region.create(path, [DeviceLimit(MIB, 0)]).close()
    holder = _locker(path, "hold")
    waiter = None
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "LOCKED"
        with path.open("r+b") as f, mmap.mmap(f.fileno(), 0) as view:
            assert _word(view) & TID_MASK == holder.pid  # the layout assumption holds: this is the lock word
            waiter = _locker(path, "once")
            deadline = time.monotonic() + 20
            while not _word(view) & FUTEX_WAITERS:  # the waiter is queued on the lock
                assert waiter.poll() is None and time.monotonic() < deadline
                time.sleep(0.001)
            # What a woken waiter killed before taking the lock leaves behind: a free lock, nobody to wake.
            struct.pack_into("<I", view, LOCK_WORD, 0)
        assert waiter.stdout is not None
        out, _ = waiter.communicate(timeout=10)  # the current lock's waits are bounded: it looks again
        assert out.strip() == "LOCKED" and waiter.returncode == 0
    finally:
        for proc in (holder, waiter):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_zombie_leader_whose_threads_still_hold_memory_keeps_its_charge(drivers: Drivers, wenv: Env) -> None:
    # A process whose main thread has exited is a zombie to /proc while its other threads run on, holding
    # device memory.  A forked child sharing its region (a private one: no liveness lock) must not take
    # that memory for free: 48 MiB held, 32 MiB more refused under a 64 MiB limit.
    env = wenv.build(**NO_CONTEXT, HAMI_DEVICE_MEMORY_LIMIT="64m", HAMI_FAKE_CUDA_MEMORY_MIB="4096")
    out = run([drivers.scenarios, "zombieleader", "48"], env, timeout=60)
    f = fields(out.stdout)
    assert f["holder_alloc"] == "0" and f["leader_state"] == "Z", out.stdout + out.stderr
    assert f["child_alloc"] == "2"
    assert fake_gpu_snapshot(wenv.state)[0].peak_used_bytes <= 64 * MIB


def chaos(drivers: Drivers, env: dict[str, str], runs: int) -> None:
    """Runs of 12 two-thread workers allocating up to 8 MiB at a time, one SIGKILLed every 20 ms (6 a run)."""
    out = subprocess.run(
        [str(drivers.cuda), "chaos", str(runs), "12", "120", "20", str(8 * MIB)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    counts = dict(part.split("=") for part in out.stdout.split())
    assert counts["runs"] == str(runs) and counts["kills"] == str(6 * runs), counts
    assert counts["hangs"] == "0" and counts["failed"] == "0", (counts, out.stderr)


def books_balance(state: Path) -> None:
    """The fake device's total is what its process slots hold (dead ones not yet reaped included)."""
    device = fake_gpu_snapshot(state)[0]
    assert device.used_bytes == sum(device.process_used_bytes.values()), device


@pytest.mark.slow
def test_the_fake_drivers_books_survive_a_sigkill_storm(drivers: Drivers, wenv: Env) -> None:
    # No limiter: the workers spend their time in the fake's bookkeeping, where the kills land.  Before the
    # fake kept its books under a robust lock with an undo record, 30 runs left 9-49 MB that no process held.
    chaos(drivers, wenv.build(**NO_CONTEXT, shim=None, HAMI_FAKE_CUDA_MEMORY_MIB="4096"), runs=20)
    books_balance(wenv.state)


@pytest.mark.slow
def test_chaos_storm_with_sigkill_never_hangs_nor_passes_the_limit(drivers: Drivers, wenv: Env) -> None:
    # 100 runs against a 32 MiB limit on a 4 GiB fake device, 600 kills; a worker still alive 5 s after
    # its time was up is counted as hung.
    limit = 32 * MIB
    Region.create(wenv.region, [DeviceLimit(limit, 0)]).close()
    env = wenv.build(**NO_CONTEXT, HAMI_REGION_PATH=str(wenv.region), HAMI_FAKE_CUDA_MEMORY_MIB="4096")
    chaos(drivers, env, runs=100)
    books_balance(wenv.state)  # what the fake reports is what the workers held: no artefact of its own
    with Region.open(wenv.region) as region:
        region.reclaim_dead()
        usage = region.device_usage()[0]
    assert 0 < usage.memory_peak_bytes <= limit  # the region's high-water mark
    assert 0 < fake_gpu_snapshot(wenv.state)[0].peak_used_bytes <= limit  # and the fake driver's
    assert usage.memory_used_bytes == 0  # every worker is gone: nothing stays charged
