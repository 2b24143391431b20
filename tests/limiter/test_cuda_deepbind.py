"""Backends loaded with ``dlopen(..., RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)`` are held to the limit.

Deep binding puts a library's own dependencies ahead of the preloaded shim: a plugin linked with -lcuda
called the driver directly, and one opening libcuda itself reached libc's dlsym, not the shim's.  The
plugins here are built as a framework builds its backends (tests/limiter/progs/cuda_plugin.c), one of
them with full RELRO, and loaded by a host whose RUNPATH is the only way to find them -- so the test also
shows that the shim's dlopen leaves a caller's search path alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from hami_devices import limiter
from hami_devices.limiter import DeviceLimit, Region, fake_gpu_snapshot
from tests.limiter.helpers import INCLUDE, NO_CONTEXT, PROGS, Env, fields, need, run

MIB = 1 << 20
OK, OOM = "0", "2"
PLUGINS = {  # library name -> (defines, extra link flags)
    "libplug_linked.so": ([], ["LIBCUDA"]),
    "libplug_dlsym.so": (["-DBY_DLSYM"], ["-ldl", "-Wl,-z,now", "-Wl,-z,relro"]),  # full RELRO: a read-only GOT
    "libplug_procaddr.so": (["-DBY_PROC_ADDR"], ["-ldl"]),
}


@dataclass
class Host:
    exe: Path


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Host:
    cc = shutil.which(os.environ.get("CC", "cc")) or "gcc"
    out = tmp_path_factory.mktemp("deepbind")
    (out / "plugins").mkdir()
    libcuda = str(need(limiter.fake_library, "libcuda.so.1"))
    for name, (defines, link) in PLUGINS.items():
        link = [libcuda if flag == "LIBCUDA" else flag for flag in link]
        cmd = [cc, "-O2", "-Wall", "-Werror", "-fPIC", "-shared", f"-I{INCLUDE}", *defines]
        subprocess.run([*cmd, str(PROGS / "cuda_plugin.c"), *link, "-o", str(out / "plugins" / name)], check=True)
    exe = out / "plugin_host"
    cmd = [cc, "-O2", "-Wall", "-Werror", f"-I{INCLUDE}", str(PROGS / "plugin_host.c"), libcuda, "-ldl"]
    subprocess.run([*cmd, "-Wl,--enable-new-dtags,-rpath,$ORIGIN/plugins", "-o", str(exe)], check=True)
    return Host(exe)


def load(host: Host, env: dict[str, str], plugin: str, mode: str) -> dict[str, str]:
    out = run([host.exe, plugin, mode, str(100 * MIB)], env)
    assert out.returncode == 0, out.stdout + out.stderr
    f = fields(out.stdout)
    assert f["load"] == "ok", f  # found through the host's RUNPATH, with or without the shim
    return f


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_deep_bound_plugin_is_limited(host: Host, wenv: Env, plugin: str) -> None:
    Region.create(wenv.region, [DeviceLimit(64 * MIB, 0)]).close()
    env = wenv.build(**NO_CONTEXT, HAMI_REGION_PATH=str(wenv.region), HAMI_FAKE_CUDA_MEMORY_MIB="4096")
    for mode in ("deep", "plain"):
        assert load(host, env, plugin, mode)["plugin_alloc"] == OOM, mode  # 100 MiB against 64 MiB
    assert fake_gpu_snapshot(wenv.state)[0].peak_used_bytes == 0
    # The control: without the shim the deep-bound plugin gets its 100 MiB.
    wenv.state.unlink()
    control = wenv.build(**NO_CONTEXT, shim=None, HAMI_FAKE_CUDA_MEMORY_MIB="4096")
    assert load(host, control, plugin, "deep")["plugin_alloc"] == OK


def test_deep_bound_plugin_within_the_limit_is_charged(host: Host, wenv: Env) -> None:
    Region.create(wenv.region, [DeviceLimit(256 * MIB, 0)]).close()
    env = wenv.build(HAMI_REGION_PATH=str(wenv.region), HAMI_FAKE_CUDA_MEMORY_MIB="4096")
    assert load(host, env, "libplug_linked.so", "deep")["plugin_alloc"] == OK
    with Region.open(wenv.region) as region:
        assert region.device_usage()[0].memory_peak_bytes == 100 * MIB  # the plugin's allocation was charged
