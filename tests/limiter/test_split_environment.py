"""A request split over two vendors gets one environment per vendor, each enforcing its own grant."""

from __future__ import annotations

import pytest

import hami_devices as hd
from hami_devices.inventory import parse_inventory
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import NO_CONTEXT, Env, fields, run

MIB = 1 << 20
CUDA_ERROR_OUT_OF_MEMORY = "2"
CNRT_ERROR_NO_MEM = "100100"
INVENTORY = {
    "nodes": [
        {
            "name": "edge",
            "devices": [
                {"vendor": "nvidia", "model": "T4", "count": 1},
                {"vendor": "cambricon", "model": "MLU370-X4", "count": 1},
            ],
        }
    ]
}


def test_mlu_and_t4_parts_each_get_their_own_limits(drivers: Drivers, wenv: Env) -> None:
    devices = hd.discover(parse_inventory(INVENTORY))
    handle = hd.allocate(
        devices,
        {"parts": [{"models": ["T4"], "memory_mib": 64, "cores": 30}, {"models": ["MLU370-X4"], "memory_mib": 200}]},
    )
    with pytest.raises(hd.AmbiguousEnvironment):
        _ = handle.env  # one merged environment would let one vendor's limits overwrite the other's
    gpu, mlu = handle.env_for("edge", "nvidia"), handle.env_for("edge", "cambricon")
    assert gpu["HAMI_DEVICE_MEMORY_LIMIT_0"] == "64m" and mlu["HAMI_DEVICE_MEMORY_LIMIT_0"] == "256m"  # 256 MiB units
    assert gpu["HAMI_REGION_PATH"] != mlu["HAMI_REGION_PATH"]
    assert gpu["HAMI_REGION_PATH"] == handle.region_for("edge", "nvidia")
    assert gpu["LD_PRELOAD"].endswith("libhami_cuda.so") and mlu["LD_PRELOAD"].endswith("libhami_cambricon.so")
    assert "CUDA_VISIBLE_DEVICES" not in mlu and "MLU_VISIBLE_DEVICES" not in gpu

    cuda = fields(run([drivers.cuda, "oom"], {**wenv.build(**NO_CONTEXT, shim=None), **gpu}).stdout)
    assert cuda["filled"] == f"{64 * MIB} rc=0"
    assert cuda["one_more"] == CUDA_ERROR_OUT_OF_MEMORY
    cnrt = fields(run([drivers.cn, "oom", "cnrt", str(256 * MIB)], {**wenv.build(shim=None), **mlu}).stdout)
    assert cnrt["meminfo"] == f"0 free={256 * MIB} total={256 * MIB}"
    assert cnrt["filled"] == "0"
    assert cnrt["one_more"] == CNRT_ERROR_NO_MEM
    hd.release(handle)
