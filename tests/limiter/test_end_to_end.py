"""The whole path a scheduler uses: allocate -> workload under the handle's environment -> monitor -> release.

The workload is a real process linked against the fake libcuda with the shim the
handle names in LD_PRELOAD; nothing is set by hand except where the fake lives.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from hami_devices import discover, limiter
from hami_devices.inventory import parse_inventory
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import Env, fields, need, run

MIB = 1 << 20
INVENTORY = {"nodes": [{"name": "n", "devices": [{"vendor": "nvidia", "model": "T4", "count": 1}]}]}


def test_allocation_environment_enforces_and_monitor_reports(drivers: Drivers, wenv: Env) -> None:
    (device,) = discover(parse_inventory(INVENTORY))
    handle = device.allocate({"parts": [{"memory_mib": 64, "cores": 30}]})
    region = Path(handle.regions[f"{device.info.node}/nvidia"])
    assert region.exists()
    assert handle.env["HAMI_REGION_PATH"] == str(region)
    assert handle.env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "64m"
    assert handle.env["CUDA_DEVICE_SM_LIMIT_0"] == "30"
    env = {**wenv.build(shim=None), **handle.env}
    assert env["LD_PRELOAD"].endswith("libhami_cuda.so")

    oom = fields(run([drivers.cuda, "oom"], env).stdout)
    assert oom["filled"] == f"{64 * MIB} rc=0"
    assert oom["one_more"] == "2"  # CUDA_ERROR_OUT_OF_MEMORY

    # NVML inside the workload (nvidia-smi, pynvml) sees the grant: the handle's LD_PRELOAD and
    # CUDA_VISIBLE_DEVICES are all it takes.  The fake NVML describes the same GPU as the inventory.
    fixture = wenv.tmp / "nvml.conf"
    fixture.write_text(f"[gpu]\nname = NVIDIA T4\nuuid = {device.uuid}\nmemory_mib = 15360\n")
    nvml_dir = need(limiter.fake_library, "nvml/libnvidia-ml.so.1").parent
    nvml_env = {**env, "HAMI_FAKE_NVML_FIXTURE": str(fixture)}
    nvml_env["LD_LIBRARY_PATH"] = f"{nvml_dir}:{env['LD_LIBRARY_PATH']}"
    seen = fields(run([drivers.scenarios, "nvml"], nvml_env).stdout)
    assert seen["nvml0"].startswith(f"0 total={64 * MIB} ")
    assert seen["nvml0_v2"].startswith(f"0 total={64 * MIB} ")

    holder = subprocess.Popen(
        [str(drivers.cuda), "hold", str(24 * MIB)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "READY rc=0"
        (usage,) = device.monitor().allocations
        assert usage.handle_id == handle.id
        assert usage.memory_limit_mib == 64
        assert usage.memory_used_mib == 24
        assert [p.pid for p in usage.processes] == [holder.pid]
    finally:
        holder.kill()
        holder.wait()
    # SIGKILL: no exit handler gave the 24 MiB back, and no workload has allocated since to reclaim them.
    # The process is gone, so monitor must not report its memory.
    (usage,) = device.monitor().allocations
    assert usage.memory_used_mib == 0 and usage.processes == []

    device.release(handle)
    assert not region.exists()
    assert device.monitor().allocations == []
