"""Ways around cuMemAlloc that real programs use, each held to the limit on CUDA's own semantics.

The fake libcuda models them faithfully (native/fakes/cuda/fake_cuda.h): VMM memory lives until its last
mapping and handle are gone, pools keep freed memory until a synchronisation, stream-ordered frees happen
when the stream gets there, arrays have padded layouts, graphs take memory at launch.  Every test checks
two things: the shim's answers (CUDA_ERROR_OUT_OF_MEMORY where the limit is reached) and the fake device's
own high-water mark of bytes really held, which must never pass the limit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from hami_devices import limiter
from hami_devices.limiter import DeviceLimit, Region, fake_gpu_snapshot
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import NO_CONTEXT, Env, fields, need, run

MIB = 1 << 20
OK, OOM = "0", "2"  # CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY


def scenario(drivers: Drivers, env: dict[str, str], *args: str | int) -> dict[str, str]:
    out = run([drivers.scenarios, *(str(a) for a in args)], env)
    assert out.returncode == 0, out.stdout + out.stderr
    return fields(out.stdout)


def limited(wenv: Env, mib: int, **extra: str) -> dict[str, str]:
    Region.create(wenv.region, [DeviceLimit(mib * MIB, 0)]).close()
    return wenv.build(**NO_CONTEXT, HAMI_REGION_PATH=str(wenv.region), HAMI_FAKE_CUDA_MEMORY_MIB="4096", **extra)


def peak(wenv: Env, device: int = 0) -> int:
    return fake_gpu_snapshot(wenv.state)[device].peak_used_bytes


def region_used(wenv: Env, device: int = 0) -> int:
    with Region.open(wenv.region) as region:
        region.reclaim_dead()
        return region.device_usage()[device].memory_used_bytes


def test_vmm_memory_is_held_until_unmapped_and_released(drivers: Drivers, wenv: Env) -> None:
    # create -> map -> release, three times: released handles still back their mappings.
    f = scenario(drivers, limited(wenv, 64), "vmm", 32)
    assert (f["map_released1"], f["map_released2"], f["map_released3"]) == (OK, OK, OOM)
    assert f["unmap1"] == OK and f["map_released_after_unmap"] == OK  # unmapped and released: freed
    # A retained handle keeps the memory after the mapping goes, until it is released as well.
    assert f["retain2"] == OK and f["unmap2"] == OK
    assert f["map_released_while_retained"] == OOM
    assert f["release_retained2"] == OK and f["map_released_after_retained"] == OK
    assert peak(wenv) == 64 * MIB
    assert region_used(wenv) == 0


def test_allocation_from_an_explicit_pool_is_limited(drivers: Drivers, wenv: Env) -> None:
    f = scenario(drivers, limited(wenv, 64), "pool-explicit", 100)
    assert f["pool_create"] == OK and f["from_pool"] == OOM
    assert peak(wenv) == 0
    f = scenario(drivers, limited(wenv, 64), "pool-explicit", 48)
    assert f["from_pool"] == OK and f["destroy"] == OK
    assert region_used(wenv) == 0


def test_stream_ordered_free_gives_memory_back_only_when_the_stream_gets_there(
    drivers: Drivers, wenv: Env
) -> None:
    f = scenario(drivers, limited(wenv, 64), "pool-deferred", 48)
    assert f["async"] == OK and f["free_async"] == OK
    assert f["alloc_before_sync"] == OOM  # the stream has not reached the free: the pool holds the 48 MiB
    assert f["alloc_after_sync"] == OK  # synchronised, and the pool (threshold 0) gave it back
    assert peak(wenv) <= 64 * MIB


def test_stream_ordered_free_of_a_cumemalloc_allocation_waits_for_the_stream(drivers: Drivers, wenv: Env) -> None:
    f = scenario(drivers, limited(wenv, 64), "plain-deferred", 48)
    assert f["alloc"] == OK and f["free_async"] == OK
    assert f["alloc_before_sync"] == OOM and f["alloc_after_sync"] == OK
    assert peak(wenv) <= 64 * MIB


def test_memory_a_pool_keeps_is_counted_and_trimmed_at_the_limit(drivers: Drivers, wenv: Env) -> None:
    # With its release threshold at the maximum the pool keeps the freed 48 MiB after the sync; the
    # allocation that needs them is admitted only once the shim has trimmed the pool.
    f = scenario(drivers, limited(wenv, 64), "pool-retained", 48)
    assert f["threshold"] == OK and f["sync"] == OK
    assert f["alloc_after_sync"] == OK
    assert peak(wenv) <= 64 * MIB
    assert region_used(wenv) == 0


def test_async_allocation_is_charged_to_the_streams_device(drivers: Drivers, wenv: Env) -> None:
    # Device 0 is current, the stream belongs to device 1: its pool, and its limit, are device 1's.
    Region.create(wenv.region, [DeviceLimit(1024 * MIB, 0), DeviceLimit(64 * MIB, 0)]).close()
    env = wenv.build(
        **NO_CONTEXT, HAMI_REGION_PATH=str(wenv.region), HAMI_FAKE_CUDA_DEVICES="2", HAMI_FAKE_CUDA_MEMORY_MIB="4096"
    )
    f = scenario(drivers, env, "pool-stream", 100)
    assert f["async_on_device1"] == OOM
    assert peak(wenv, 1) == 0
    proc = subprocess.Popen(
        [str(drivers.scenarios), "pool-stream", "48"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline().strip() == f"async_on_device1 rc={OK}"
    assert proc.stdout.readline().strip() == "READY"
    with Region.open(wenv.region) as region:
        usage = region.device_usage()
        assert (usage[0].memory_used_bytes, usage[1].memory_used_bytes) == (0, 48 * MIB)
    out, _ = proc.communicate("go\n", timeout=30)
    assert proc.returncode == 0 and f"sync rc={OK}" in out


@pytest.mark.parametrize("deferred_mapping", [True, False], ids=["driver-sized", "estimated"])
def test_arrays_and_mipmapped_arrays_are_limited(drivers: Drivers, wenv: Env, deferred_mapping: bool) -> None:
    # 1000 x 1000 float4 arrays take ~15.3 MiB each in the fake's padded layout.  Where the device can
    # size an array for the shim (deferred mapping) the shim reserves exactly that; where it cannot, an
    # upper bound of the layout -- never less than the array really takes.
    extra = {} if deferred_mapping else {"HAMI_FAKE_CUDA_NO_DEFERRED_MAPPING": "1"}
    f = scenario(drivers, limited(wenv, 64, **extra), "arrays", 10, 1000, 1000)
    assert f["arrays"] == "4" and f["array_refused"] == OOM
    assert f["array_destroy"] == OK and f["array_again"] == OK  # a destroy gives its bytes back
    assert f["array3d_x16"] == OOM and f["array3d_x2"] == OK
    assert f["mipmapped_2x"] == OOM and f["mipmapped_1x"] == OK and f["mipmapped_destroy"] == OK
    assert peak(wenv) <= 64 * MIB
    assert region_used(wenv) == 0


def test_graph_memory_nodes_are_limited_at_instantiation(drivers: Drivers, wenv: Env) -> None:
    f = scenario(drivers, limited(wenv, 64), "graph", 48)
    assert f["graph_big"] == OK and f["instantiate_big"] == OOM  # a 96 MiB allocation node: refused
    assert f["instantiate_small"] == OK and f["launch_small"] == OK
    assert f["alloc_while_graph_lives"] == OOM  # the executable graph may take its 48 MiB at any launch
    assert f["exec_destroy"] == OK
    assert f["alloc_after_destroy"] == OK  # the cached graph memory was trimmed to make room
    assert peak(wenv) <= 64 * MIB
    assert region_used(wenv) == 0


def test_without_the_shim_every_path_passes_the_limit(drivers: Drivers, wenv: Env) -> None:
    # The control: the same scenarios on the bare fake hold more than 64 MiB, so the tests above measure
    # the shim, not the fake.
    for args in (
        ("vmm", 32),
        ("pool-explicit", 100),
        ("pool-deferred", 48),
        ("plain-deferred", 48),
        ("arrays", 10, 1000, 1000),
        ("graph", 48),
    ):
        wenv.state.unlink(missing_ok=True)
        env = wenv.build(shim=None, HAMI_FAKE_CUDA_MEMORY_MIB="4096")
        scenario(drivers, env, *args)
        assert peak(wenv) > 64 * MIB, args


def nvml_env(wenv: Env, **extra: str) -> dict[str, str]:
    fixture = wenv.tmp / "nvml.conf"
    fixture.write_text("[gpu]\nname = NVIDIA Fake GPU\n[gpu]\nname = NVIDIA Fake GPU\n")
    env = wenv.build(HAMI_FAKE_NVML_FIXTURE=str(fixture), HAMI_FAKE_CUDA_DEVICES="2", **extra)
    env["LD_LIBRARY_PATH"] = f"{need(limiter.fake_library, 'nvml/libnvidia-ml.so.1').parent}:{env['LD_LIBRARY_PATH']}"
    return env


def test_nvml_inside_the_workload_reports_the_grant(drivers: Drivers, wenv: Env) -> None:
    Region.create(wenv.region, [DeviceLimit(64 * MIB, 0), DeviceLimit(32 * MIB, 0)]).close()
    env = nvml_env(wenv, HAMI_REGION_PATH=str(wenv.region))
    holder = subprocess.Popen([str(drivers.cuda), "hold", str(24 * MIB)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "READY rc=0"
        # As nvidia-smi: NVML only, CUDA never initialised; CUDA_VISIBLE_DEVICES (UUIDs, as an allocation
        # sets it) puts GPU 1 first, so NVML's GPU 1 is the allocation's device 0.
        visible = "GPU-00000000-0000-0000-0000-000000000001,GPU-00000000-0000-0000-0000-000000000000"
        f = scenario(drivers, {**env, "CUDA_VISIBLE_DEVICES": visible}, "nvml")
        total0, total1 = 32 * MIB, 64 * MIB
        assert f["nvml0"] == f"{OK} total={total0} used=0 free={total0}"
        assert f["nvml0_v2"] == f"{OK} total={total0} used=0 free={total0} reserved=0"
        # The holder's 24 MiB (allocated on its device 0, which was fake GPU 0) are the allocation's
        # device 0 usage: NVML's GPU 1 reports them within the grant.
        assert f["nvml1"] == f"{OK} total={total1} used={24 * MIB} free={total1 - 24 * MIB}"
        assert f["nvml1_v2"] == f"{OK} total={total1} used={24 * MIB} free={total1 - 24 * MIB} reserved=0"
        bare = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
        assert scenario(drivers, bare, "nvml")["nvml0"].startswith(f"{OK} total={16384 * MIB} ")  # the whole GPU
    finally:
        holder.kill()
        holder.wait()


def test_threads_of_a_forked_child_register_one_slot(drivers: Drivers, wenv: Env) -> None:
    # After fork the child's threads make their first allocations at once: one slot for the child with
    # all of its bytes in it, and the parent's slot untouched.
    env = limited(wenv, 256)
    for _ in range(5):
        cmd = [str(drivers.scenarios), "forkthreads", "16"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        seen: dict[str, str] = {}
        try:
            assert proc.stdout is not None
            while len(seen) < 3:
                head, _, rest = proc.stdout.readline().strip().partition(" ")
                seen[head] = rest
            child = int(seen["child"])
            with Region.open(wenv.region) as region:
                records = {(r.pid, r.memory_used_bytes) for r in region.process_usage() if r.device == 0}
                assert records == {(proc.pid, MIB), (child, 16 * MIB)}, records
                assert region.device_usage()[0].memory_used_bytes == 17 * MIB
        finally:
            if "child" in seen:
                os.kill(int(seen["child"]), signal.SIGKILL)
            proc.kill()
            proc.wait()
        deadline = time.monotonic() + 10
        while region_used(wenv) and time.monotonic() < deadline:
            time.sleep(0.01)  # the killed child is reaped by init, not by this test
        assert region_used(wenv) == 0


def test_mixed_storm_never_passes_the_limit(drivers: Drivers, wenv: Env) -> None:
    # 8 processes x 4 threads allocating through cuMemAlloc, cuMemAllocAsync, an explicit pool and VMM
    # (create, map, release; unmap later), freeing in stream order with occasional syncs.
    limit = 32 * MIB
    env = limited(wenv, 32)
    procs = [
        subprocess.Popen(
            [str(drivers.cuda), "storm", "4", "3000", str(8 * MIB), str(seed), "mixed"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(8)
    ]
    admitted = refused = 0
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        counts = dict(part.split("=") for part in out.split())
        admitted, refused = admitted + int(counts["ok"]), refused + int(counts["oom"])
    assert admitted > 1000 and refused > 1000  # it really pressed against the limit
    with Region.open(wenv.region) as region:
        usage = region.device_usage()[0]
    assert 0 < usage.memory_peak_bytes <= limit
    assert 0 < peak(wenv) <= limit
    assert usage.memory_used_bytes == 0 and fake_gpu_snapshot(wenv.state)[0].used_bytes == 0
