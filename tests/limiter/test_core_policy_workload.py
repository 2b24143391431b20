"""What a real workload's shim makes of an allocation's compute policy.

The shim applies ``HAMI_DEVICE_CORE_POLICY_<i>`` (else HAMi-core's ``GPU_CORE_UTILIZATION_POLICY``) to the region
when it starts, so the environment an allocation hands the workload must say what the SDK wrote in the region:
a process started under it leaves each device's policy as the grant has it, even where the container also
carries HAMi-core's variable.
"""

from __future__ import annotations

import hami_devices as hd
from hami_devices.inventory import parse_inventory
from hami_devices.limiter import Region
from hami_devices.models import DeviceHandle
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import Env, fields, run

INVENTORY = {"nodes": [{"name": "n", "devices": [{"vendor": "nvidia", "model": "T4", "count": 2}]}]}


def policies(handle: DeviceHandle) -> list[tuple[int, str]]:
    with Region.open(handle.env["HAMI_REGION_PATH"]) as region:
        return [(u.core_limit_pct, u.core_policy) for u in region.device_usage()[:2]]


def test_a_workload_under_the_environment_keeps_each_grants_policy(drivers: Drivers, wenv: Env) -> None:
    devices = hd.discover(parse_inventory(INVENTORY))
    handle = hd.allocate(devices, {"parts": [{"memory_mib": 64, "cores": 30, "core_policy": "share"},
                                   {"memory_mib": 64, "cores": 40, "core_policy": "cap"}]})
    assert policies(handle) == [(30, "share"), (40, "cap")]
    # HAMi-core's variable says cap ("force") for every device; the allocation's own names win
    env = {**wenv.build(shim=None), **handle.env, "GPU_CORE_UTILIZATION_POLICY": "force"}
    out = fields(run([drivers.cuda, "oom"], env).stdout)
    assert out["one_more"] == "2"  # the shim ran in the workload (CUDA_ERROR_OUT_OF_MEMORY past 64 MiB)
    assert policies(handle) == [(30, "share"), (40, "cap")]

    # the check can fail: without the allocation's variable, HAMi-core's does turn the share into a cap
    bare = {k: v for k, v in env.items() if k != "HAMI_DEVICE_CORE_POLICY_0"}
    run([drivers.cuda, "oom"], bare)
    assert policies(handle) == [(30, "cap"), (40, "cap")]
