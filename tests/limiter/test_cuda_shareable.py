"""VMM shareable handles: memory exported as a POSIX file descriptor is charged once, across processes.

An imported handle keeps the physical memory alive after the exporter releases its own, in this process or
another.  Before, ``cuMemCreate -> export -> import -> cuMemRelease(original) -> cuMemMap(imported)`` left
the mapped memory uncharged, and could repeat without bound.  The fake driver keeps exported memory until its
last holder, in any process, lets go or dies (native/fakes/cuda/fake_cuda_share.c).
"""

from __future__ import annotations

import subprocess

from hami_devices.limiter import DeviceLimit, Region, fake_gpu_snapshot
from tests.limiter.conftest import Drivers
from tests.limiter.helpers import NO_CONTEXT, Env, fields, run

MIB = 1 << 20
OK, OOM = "0", "2"


def limited(wenv: Env, mib: int) -> dict[str, str]:
    Region.create(wenv.region, [DeviceLimit(mib * MIB, 0)]).close()
    return wenv.build(**NO_CONTEXT, HAMI_REGION_PATH=str(wenv.region), HAMI_FAKE_CUDA_MEMORY_MIB="4096")


def region_used(wenv: Env) -> int:
    with Region.open(wenv.region) as region:
        region.reclaim_dead()
        return region.device_usage()[0].memory_used_bytes


def test_export_import_release_map_cannot_repeat_past_the_limit(drivers: Drivers, wenv: Env) -> None:
    out = run([drivers.scenarios, "share", "16", "6"], limited(wenv, 64))
    assert out.returncode == 0, out.stdout + out.stderr
    f = fields(out.stdout)
    assert [f[f"create{i}"] for i in range(1, 7)] == [OK, OK, OK, OK, OOM, OOM]
    assert fake_gpu_snapshot(wenv.state)[0].peak_used_bytes <= 64 * MIB
    assert region_used(wenv) == 0  # the process is gone: so are its shared allocations' charges
    # The control: on the bare driver the same loop goes on.
    wenv.state.unlink()
    control = wenv.build(**NO_CONTEXT, shim=None, HAMI_FAKE_CUDA_MEMORY_MIB="4096")
    out = run([drivers.scenarios, "share", "16", "6"], control)
    assert all(fields(out.stdout)[f"create{i}"] == OK for i in range(1, 7))


class Proc:
    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.p = subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def until_ready(self) -> dict[str, str]:
        assert self.p.stdout is not None
        found: dict[str, str] = {}
        for line in self.p.stdout:
            if line.strip() == "READY":
                return found
            head, _, rest = line.strip().partition(" ")
            found[head] = rest.removeprefix("rc=")
        raise AssertionError(f"ended early: {found}")

    def go(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def stop(self) -> None:
        self.p.kill()
        self.p.wait()


def test_memory_an_importer_holds_stays_charged_after_the_exporter_releases(drivers: Drivers, wenv: Env) -> None:
    env = limited(wenv, 64)
    exporter = Proc([str(drivers.scenarios), "share-export", "48"], env)
    importer = None
    try:
        f = exporter.until_ready()
        assert f["create"] == OK
        importer = Proc([str(drivers.scenarios), "share-import", f"/proc/{exporter.p.pid}/fd/{f['fd']}"], env)
        assert importer.until_ready() == {"import": OK, "map": OK}
        exporter.go()
        assert exporter.until_ready()["released"] == OK
        # The importer's mapping keeps the 48 MiB alive: they stay charged, now to the importer.
        assert region_used(wenv) == 48 * MIB
        third = run([drivers.cuda, "lookup", str(32 * MIB)], env)
        assert fields(third.stdout)["dlsym_alloc"] == OOM
        assert fake_gpu_snapshot(wenv.state)[0].peak_used_bytes <= 64 * MIB
        with Region.open(wenv.region) as region:
            holders = {r.pid: r.memory_used_bytes for r in region.process_usage() if r.memory_used_bytes}
        assert holders == {importer.p.pid: 48 * MIB}
        # The last holder dies: the memory is freed, and so is its charge.
        importer.stop()
        assert region_used(wenv) == 0
        assert fields(run([drivers.cuda, "lookup", str(32 * MIB)], env).stdout)["dlsym_alloc"] == OK
    finally:
        exporter.stop()
        if importer is not None:
            importer.stop()
