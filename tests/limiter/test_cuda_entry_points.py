"""Driver entry points beyond the current ABI, each held to the limit on the fake driver's own model.

- The v1 entry points of the 32-bit ABI, which every driver still exports: ``dlsym(h, "cuMemAlloc")`` and
  ``cuGetProcAddress`` with a version below 3020 return them (cuMemAlloc, cuMemAllocPitch, cuArrayCreate,
  cuArray3DCreate, and the cuMemFree/cuMemGetInfo that go with them).
- ``cuCtxSetLimit``: the malloc heap, the printf FIFO and the thread stacks take device memory that no
  allocation call shows (the fake takes what is raised above the defaults, stacks for every resident thread).
- CUDA 13's ``cuCtxSynchronize_v2`` and the stream and event queries: each settles stream-ordered frees, or
  a freed block stays charged and the next allocation is refused although the memory is free.

Each test runs the same scenario without the shim as its control, so it measures the shim, not the fake.
"""

from __future__ import annotations

from hami_devices.limiter import DeviceLimit, Region, fake_gpu_snapshot
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import NO_CONTEXT, Env, fields, run

MIB = 1 << 20
OK, OOM = "0", "2"  # CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY


def scenario(drivers: Drivers, wenv: Env, *args: str | int, shim: bool = True) -> dict[str, str]:
    wenv.state.unlink(missing_ok=True)
    if shim:
        Region.create(wenv.region, [DeviceLimit(64 * MIB, 0)]).close()
        env = wenv.build(**NO_CONTEXT, HAMI_REGION_PATH=str(wenv.region), HAMI_FAKE_CUDA_MEMORY_MIB="4096")
    else:
        env = wenv.build(**NO_CONTEXT, shim=None, HAMI_FAKE_CUDA_MEMORY_MIB="4096")
    out = run([drivers.scenarios, *(str(a) for a in args)], env)
    assert out.returncode == 0, out.stdout + out.stderr
    return fields(out.stdout)


def peak(wenv: Env) -> int:
    return fake_gpu_snapshot(wenv.state)[0].peak_used_bytes


def region_used(wenv: Env) -> int:
    with Region.open(wenv.region) as region:
        region.reclaim_dead()
        return region.device_usage()[0].memory_used_bytes


LEGACY = ("dlsym_alloc_v1_2x", "gpa_alloc_v1_2x", "dlsym_pitch_v1_2x", "dlsym_array_v1_2x", "dlsym_array3d_v1_2x")


def test_v1_entry_points_are_limited(drivers: Drivers, wenv: Env) -> None:
    # 96 MiB through each v1 entry point against a 64 MiB limit: refused, as the _v2 ones are.
    f = scenario(drivers, wenv, "legacy", 48)
    assert {name: f[name] for name in LEGACY} == dict.fromkeys(LEGACY, OOM)
    assert f["info_v1"] == OK and f["info_v1_total"] == str(64 * MIB)  # the v1 memory query sees the grant
    assert (f["dlsym_alloc_v1_1x"], f["free_v1"], f["alloc_v2_after_free_v1"]) == (OK, OK, OK)
    assert peak(wenv) <= 64 * MIB
    assert region_used(wenv) == 0
    control = scenario(drivers, wenv, "legacy", 48, shim=False)
    assert {name: control[name] for name in LEGACY} == dict.fromkeys(LEGACY, OK)
    assert peak(wenv) > 64 * MIB


def test_context_limits_are_charged(drivers: Drivers, wenv: Env) -> None:
    # Each limit raised by 96 MiB: refused; by 24 MiB: granted, and then 48 MiB more do not fit until
    # the limit is lowered again.
    f = scenario(drivers, wenv, "limits", 48)
    for limit in ("heap", "fifo", "stack"):
        assert f[f"{limit}_2x"] == OOM and f[f"{limit}_half"] == OK, limit
        assert f[f"alloc_after_{limit}"] == OOM, limit
        assert f[f"{limit}_back"] == OK and f[f"alloc_after_{limit}_back"] == OK, limit
    assert peak(wenv) <= 64 * MIB
    assert region_used(wenv) == 0
    control = scenario(drivers, wenv, "limits", 48, shim=False)
    assert all(control[f"{limit}_2x"] == OK for limit in ("heap", "fifo", "stack"))
    assert peak(wenv) > 64 * MIB


def test_cuda_13_context_synchronize_settles_stream_ordered_frees(drivers: Drivers, wenv: Env) -> None:
    # 48 MiB freed in stream order, a CUDA 13 synchronisation, 48 MiB again under a 64 MiB limit.
    f = scenario(drivers, wenv, "sync13", 48)
    for way in ("ctx_sync_v2", "dlsym_ctx_sync_v2", "gpa13_ctx_sync"):
        assert f[way] == OK and f[f"alloc_after_{way}"] == OK, way
    assert peak(wenv) <= 64 * MIB
    assert region_used(wenv) == 0


def test_stream_and_event_queries_settle_stream_ordered_frees(drivers: Drivers, wenv: Env) -> None:
    f = scenario(drivers, wenv, "query", 48)
    for way in ("event_query", "stream_query"):
        assert f[way] == OK and f[f"alloc_after_{way}"] == OK, way
    assert peak(wenv) <= 64 * MIB
    assert region_used(wenv) == 0
