"""Refusals are counted in the region where they happen: every allocation a shim hands the runtime's
out-of-memory code back for, once (whatever the shim retried itself), and every launch the pacer holds
back past its burst.  Real workload processes against the fake runtimes; the expected counts are what
each workload reports it was refused."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hami_devices.limiter import DeviceLimit, Region
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import REPO, Env, fields, run
from tests.limiter.test_other_vendors import ACL_ERROR_RT_MEMORY_ALLOCATION, CNRT_ERROR_NO_MEM

MIB = 1 << 20
CUDA_ERROR_OUT_OF_MEMORY = "2"
EXAMPLE = REPO / "examples" / "vendor-plugin"
EXAMPLE_LIBS = EXAMPLE / "hami_example_accel" / "libs"  # built by scripts/test.sh as a plugin author builds it
EXRT_ERROR_OUT_OF_MEMORY = 2


def _counts(env: Env) -> tuple[int, int]:
    with Region.open(env.region) as region:
        usage = region.device_usage()[0]
    return usage.memory_refusals, usage.compute_refusals


def test_six_cuda_refusals_are_six_in_the_region(drivers: Drivers, wenv: Env) -> None:
    Region.create(wenv.region, [DeviceLimit(64 * MIB, 0)]).close()
    env = wenv.build(HAMI_REGION_PATH=str(wenv.region))
    assert fields(run([drivers.cuda, "tries", "6", str(100 * MIB)], env).stdout)["refused"] == "6"
    assert _counts(wenv) == (6, 0)
    # admitted allocations are not refusals; a refusal of another process of the allocation adds to the count
    assert fields(run([drivers.cuda, "tries", "3", str(20 * MIB)], env).stdout)["refused"] == "0"
    assert fields(run([drivers.cuda, "tries", "1", str(100 * MIB)], env).stdout)["refused"] == "1"
    assert _counts(wenv) == (7, 0)


def test_every_cuda_entry_point_counts_one_refusal_per_refused_call(drivers: Drivers, wenv: Env) -> None:
    # cuMemAlloc_v2, cuMemAllocPitch_v2, cuMemAllocManaged, cuMemAllocAsync (a pool trimmed and retried
    # first: still one refusal) and cuMemCreate, each refused once past the filled limit
    Region.create(wenv.region, [DeviceLimit(16 * MIB, 0)]).close()
    env = wenv.build(HAMI_REGION_PATH=str(wenv.region), HAMI_FAKE_CONTEXT_MIB="0")
    f = fields(run([drivers.cuda, "oom"], env).stdout)
    refused = [f[k] for k in ("one_more", "pitch", "managed", "async", "create")]
    assert refused == [CUDA_ERROR_OUT_OF_MEMORY] * 5
    assert _counts(wenv) == (5, 0)


def test_ascend_refusals_are_counted(drivers: Drivers, wenv: Env) -> None:
    Region.create(wenv.region, [DeviceLimit(100 * MIB, 0)]).close()
    env = wenv.build("libhami_ascend.so", HAMI_REGION_PATH=str(wenv.region))
    f = fields(run([drivers.acl, "oom", str(100 * MIB)], env).stdout)
    assert [f["one_more"], f["align32"]] == [ACL_ERROR_RT_MEMORY_ALLOCATION] * 2
    assert _counts(wenv) == (2, 0)


@pytest.mark.parametrize("api", ["cnrt", "cndrv"])
def test_cambricon_refusals_are_counted(drivers: Drivers, wenv: Env, api: str) -> None:
    Region.create(wenv.region, [DeviceLimit(100 * MIB, 0)]).close()
    env = wenv.build("libhami_cambricon.so", HAMI_REGION_PATH=str(wenv.region))
    assert fields(run([drivers.cn, "oom", api, str(100 * MIB)], env).stdout)["one_more"] == CNRT_ERROR_NO_MEM
    assert _counts(wenv) == (1, 0)


def test_launches_held_back_by_the_pacer_are_compute_refusals(drivers: Drivers, wenv: Env) -> None:
    # 1 ms kernels back to back for 0.4 s: at 100 % nothing is held back; at a 20 % share the pacer
    # holds launches back once the burst is spent (10 ms of charges), so many times in 0.4 s
    for limit, held_back in ((0, False), (20, True)):
        Region.create(wenv.region, [DeviceLimit(0, limit)]).close()
        env = wenv.build(hooks=True, HAMI_REGION_PATH=str(wenv.region))
        out = run([drivers.cuda, "launch", "kernel", "1000", "0.4", "0"], env).stdout
        launches = int(fields(out)["device"].split()[2])
        memory, compute = _counts(wenv)
        assert memory == 0 and (0 < compute <= launches if held_back else compute == 0), (limit, compute, launches)


def test_the_example_plugins_shim_counts_through_the_core(wenv: Env) -> None:
    """A third-party shim that reserves through the region API counts its refusals with it too."""
    Region.create(wenv.region, [DeviceLimit(64 * MIB, 0)]).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAMI_")}
    env.update(LD_PRELOAD=str(EXAMPLE_LIBS / "libhami_example.so"), PYTHONPATH=str(EXAMPLE),
               HAMI_EXAMPLE_RUNTIME=str(EXAMPLE_LIBS / "libexrt.so"), HAMI_REGION_PATH=str(wenv.region))
    workload = subprocess.run([sys.executable, "-m", "hami_example_accel.workload", "alloc", "100"], env=env,
                              capture_output=True, text=True, timeout=60)
    assert workload.returncode == EXRT_ERROR_OUT_OF_MEMORY, workload.stdout + workload.stderr
    assert _counts(wenv) == (1, 0)
