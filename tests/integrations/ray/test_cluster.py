"""Against a real local Ray cluster: shares granted by the plugin, enforced by the limiter, released by Ray.

Every task runs in a real Ray worker process that the runtime-env plugin started under its
share's environment (LD_PRELOAD of the CUDA shim, the region, the limits); the workload
calls the fake libcuda through the global symbol scope, where the shim comes first.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import ray

import hami_devices as hd
from hami_devices.integrations import ray as hray
from hami_devices.integrations.ray.resources import resource_name
from hami_devices.limiter import Region
from tests.integrations.ray.conftest import GPU_MIB, RayNode

pytestmark = pytest.mark.ray

MIB = 1 << 20
T4_MEMORY = resource_name("nvidia", "T4", "memory_mib")
T4_CORES = resource_name("nvidia", "T4", "cores")


def hami_view(resources: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in resources.items() if k.startswith("hami/")}


def wait_until(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def cuda_allocations(sizes_mib: list[int], hold: str | None = None) -> dict[str, Any]:
    """In this worker: allocate each size on device 0, report return codes and the region's limit and usage."""
    from hami_conformance.workloads.cuda import _context, _driver

    cu = _driver()
    _context(cu)
    codes = []
    for mib in sizes_mib:
        ptr = ctypes.c_uint64()
        codes.append(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib * MIB)))
    region = Region.open(os.environ["HAMI_REGION_PATH"])
    (usage,) = region.device_usage()
    report = {
        "codes": codes,
        "share": hray.require_share(),
        "pid": os.getpid(),
        "visible": os.environ["CUDA_VISIBLE_DEVICES"],
        "region": os.environ["HAMI_REGION_PATH"],
        "limit_mib": usage.memory_limit_bytes // MIB,
        "used_mib": usage.memory_used_bytes // MIB,
    }
    if hold:  # keep the share alive until the test has looked at the cluster
        Path(hold, f"{os.getpid()}.ready").write_text("")
        while not Path(hold, "go").exists():
            time.sleep(0.05)
    return report


def test_node_offers_its_devices_as_ray_resources(ray_node: RayNode) -> None:
    offered = hami_view(ray.cluster_resources())
    assert offered == hray.node_resources(ray_node.devices())
    assert offered[T4_MEMORY] == GPU_MIB
    assert offered[T4_CORES] == 100


def test_two_tasks_on_one_gpu_each_get_their_own_limit(ray_node: RayNode, tmp_path: Path) -> None:
    small = hray.share(memory_mib=1024, cores=30, models=["T4"])(cuda_allocations)
    large = hray.share(memory_mib=4096, cores=50, models=["T4"])(cuda_allocations)
    # the small share asks for 512 (fits) then 1024 more (past its 1024): refused by the limiter;
    # the large one takes 3072 on the same GPU at the same time, unaffected
    refs = [small.remote([512, 1024], str(tmp_path)), large.remote([3072], str(tmp_path))]
    wait_until(lambda: len(list(tmp_path.glob("*.ready"))) == 2, timeout=60)

    live = ray_node.ledger.handles()
    assert sorted(h.grants[0].memory_mib for h in live) == [1024, 4096]
    assert len({h.grants[0].uuid for h in live}) == 1  # one GPU, two shares
    assert hami_view(ray.available_resources()) == hray.node_resources(ray_node.devices())
    assert hami_view(ray.available_resources())[T4_MEMORY] == GPU_MIB - 5120

    (tmp_path / "go").write_text("")
    first, second = ray.get(refs, timeout=60)
    assert first["codes"] == [0, 2]  # CUDA_SUCCESS, then CUDA_ERROR_OUT_OF_MEMORY
    assert (first["limit_mib"], first["used_mib"]) == (1024, 512)
    assert second["codes"] == [0]
    assert (second["limit_mib"], second["used_mib"]) == (4096, 3072)
    assert first["visible"] == second["visible"]
    assert first["region"] != second["region"]
    assert {first["share"], second["share"]} == {h.id for h in live}

    # max_calls=1: the workers exit with their tasks and the plugin releases both shares
    wait_until(lambda: ray_node.ledger.handles() == [])
    assert not Path(first["region"]).exists() and not Path(second["region"]).exists()
    # Ray's own view of what is free catches up with its tasks' ends on its own schedule (its resource reports)
    wait_until(lambda: hami_view(ray.available_resources()) == hami_view(ray.cluster_resources()))


class Holder:
    def __init__(self) -> None:
        self.share = hray.require_share()

    def info(self) -> tuple[str, int, str]:
        return self.share, os.getpid(), os.environ["HAMI_REGION_PATH"]


@pytest.mark.parametrize("end", ["ray.kill", "SIGKILL"])
def test_a_dead_actor_share_is_released(ray_node: RayNode, end: str) -> None:
    if end == "ray.kill":  # the decorator on a class ...
        actor = hray.share(memory_mib=2048, cores=20, models=["T4"])(Holder).remote()
    else:  # ... or a plain Ray actor with the options of one share
        actor = ray.remote(Holder).options(**hray.options(memory_mib=2048, cores=20, models=["T4"])).remote()
    share, pid, region = ray.get(actor.info.remote(), timeout=60)
    assert [h.id for h in ray_node.ledger.handles()] == [share]
    assert Path(region).exists()
    if end == "ray.kill":
        ray.kill(actor)
    else:
        os.kill(pid, signal.SIGKILL)  # a crash: nothing in the worker gets to clean up
    wait_until(lambda: ray_node.ledger.handles() == [])
    assert not Path(region).exists()
    wait_until(lambda: hami_view(ray.available_resources()) == hami_view(ray.cluster_resources()))


def probe() -> str:
    return hray.require_share()


def test_a_share_the_node_cannot_grant_fails_with_reason_codes(ray_node: RayNode) -> None:
    # memory taken outside Ray (another client of the node's ledger): Ray still counts it free
    (device,) = ray_node.devices()
    outside = hd.allocate([device], {"parts": [{"memory_mib": GPU_MIB - 512}]})
    try:
        task = hray.share(memory_mib=1024, models=["T4"], grant_timeout_s=0.5)(probe)
        with pytest.raises(ray.exceptions.RuntimeEnvSetupError) as failed:
            ray.get(task.remote(), timeout=60)
        refused = hray.refusal(failed.value)
        assert refused is not None
        assert "CardInsufficientMemory" in refused["codes"]  # the device's reason (and the node's)
        assert refused["permanent"] is False
        assert refused["share"] in str(failed.value) and "CardInsufficientMemory" in str(failed.value)
        reason = [line for line in str(failed.value).splitlines() if "ShareRefused" in line or "Traceback" in line]
        assert len(reason) == 1 and "CardInsufficientMemory" in reason[0]  # one line, no traceback
    finally:
        hd.release(outside)
    assert ray_node.ledger.handles() == []


def test_a_raw_runtime_env_share_is_granted_or_refused_by_the_engine(ray_node: RayNode) -> None:
    task = ray.remote(max_calls=1)(probe)
    share = ray.get(task.options(runtime_env={"hami": {"memory_mib": 256, "models": ["T4"]}}).remote(), timeout=60)
    assert share.startswith("ray.")
    with pytest.raises(ray.exceptions.RuntimeEnvSetupError) as failed:
        ray.get(task.options(runtime_env={"hami": {"memory_mib": 256, "models": ["A100"]}}).remote(), timeout=60)
    refused = hray.refusal(failed.value)
    assert refused is not None and refused["codes"] == ["UnknownModel"] and refused["permanent"] is True
    with pytest.raises(ray.exceptions.RuntimeEnvSetupError, match=r"hami\.cores"):
        ray.get(task.options(runtime_env={"hami": {"memory_mib": 256, "cores": 101}}).remote(), timeout=60)
    wait_until(lambda: ray_node.ledger.handles() == [])


def test_more_shares_than_fit_queue_in_ray_and_all_run(ray_node: RayNode) -> None:
    # two 6 GiB shares fit the 15 GiB GPU at a time: Ray holds the rest back by its resources,
    # and starts each as one finishes, possibly before that worker's share is released:
    # the plugin waits for it (grant_timeout_s) instead of failing the task
    task = hray.share(memory_mib=6144, cores=10, models=["T4"])(cuda_allocations)
    reports = ray.get([task.remote([6000]) for _ in range(4)], timeout=120)
    assert [r["codes"] for r in reports] == [[0]] * 4
    assert len({r["share"] for r in reports}) == 4
    wait_until(lambda: ray_node.ledger.handles() == [])
