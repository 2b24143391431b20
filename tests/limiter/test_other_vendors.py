"""The Ascend and Cambricon shims: limit, the runtime's own OOM code, memory info, launch throttling."""

from __future__ import annotations

import pytest

from tests.limiter.conftest import Drivers
from tests.limiter.helpers import Env, fields, run
from tests.limiter.test_compute import TOLERANCE, UNTIL_STOPPED, launcher, utilization

MIB = 1 << 20
ACL_ERROR_RT_MEMORY_ALLOCATION = "207001"
CNRT_ERROR_NO_MEM = "100100"  # cnrtErrorNoMem
CN_MEMORY_ERROR_OUT_OF_MEMORY = "100100"


def test_ascend_memory_limit(drivers: Drivers, wenv: Env) -> None:
    env = wenv.build("libhami_ascend.so", HAMI_DEVICE_MEMORY_LIMIT="100m")
    f = fields(run([drivers.acl, "oom", str(100 * MIB)], env).stdout)
    assert f["meminfo"] == f"0 free={100 * MIB} total={100 * MIB}"
    assert f["filled"] == "0,0"
    assert f["one_more"] == ACL_ERROR_RT_MEMORY_ALLOCATION
    assert f["align32"] == ACL_ERROR_RT_MEMORY_ALLOCATION
    assert f["free"] == "0" and f["again"] == "0"  # a free gives its bytes back
    control = fields(run([drivers.acl, "oom", str(100 * MIB)], wenv.build(None)).stdout)
    assert control["one_more"] == "0"


@pytest.mark.parametrize(("api", "oom"), [("cnrt", CNRT_ERROR_NO_MEM), ("cndrv", CN_MEMORY_ERROR_OUT_OF_MEMORY)])
def test_cambricon_memory_limit(drivers: Drivers, wenv: Env, api: str, oom: str) -> None:
    env = wenv.build("libhami_cambricon.so", HAMI_DEVICE_MEMORY_LIMIT_0="100m")
    f = fields(run([drivers.cn, "oom", api, str(100 * MIB)], env).stdout)
    assert f["meminfo"] == f"0 free={100 * MIB} total={100 * MIB}"
    assert f["filled"] == "0"
    assert f["one_more"] == oom
    assert f["free"] == "0" and f["again"] == "0"
    control = fields(run([drivers.cn, "oom", api, str(100 * MIB)], wenv.build(None)).stdout)
    assert control["one_more"] == "0"


def test_ascend_and_cambricon_launches_are_throttled(drivers: Drivers, wenv: Env) -> None:
    runs = {
        "acl": ([drivers.acl, "launch", "1000", UNTIL_STOPPED], "libhami_ascend.so"),
        "cnrt": ([drivers.cn, "launch", "cnrt", "1000", UNTIL_STOPPED], "libhami_cambricon.so"),
        "cndrv": ([drivers.cn, "launch", "cndrv", "1000", UNTIL_STOPPED], "libhami_cambricon.so"),
    }
    loads = []
    for name, (cmd, shim) in runs.items():
        env = wenv.build(
            shim,
            hooks=True,  # device time from the fake state: only the test build of a shim reads it
            HAMI_DEVICE_CORE_LIMIT="30",
            HAMI_FAKE_GPU_STATE=str(wenv.tmp / f"{name}.state"),
            HAMI_REGION_PATH=str(wenv.tmp / f"{name}.region"),
        )
        loads.append(launcher([str(c) for c in cmd], env))
    for name, got in zip(runs, utilization(loads), strict=True):
        assert abs(got[0] - 30) <= TOLERANCE, f"{name}: {got[0]:.1f}%"
