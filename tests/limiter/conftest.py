"""Fixtures for the limiter tests: the C test drivers, built once, and per-test workload environments.

Every test here runs real processes: C drivers linked against the fake vendor libraries (found by
soname through LD_LIBRARY_PATH) with the shim injected by LD_PRELOAD, exactly as a workload runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hami_devices import limiter
from tests.limiter.helpers import INCLUDE, PROGS, Env, need


@dataclass
class Drivers:
    cuda: Path
    acl: Path
    cn: Path
    fakes: Path
    scenarios: Path  # cuda_scenarios.c: VMM, pools, arrays, graphs, NVML, fork


@pytest.fixture(scope="session")
def drivers(tmp_path_factory: pytest.TempPathFactory) -> Drivers:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the test drivers")
    fakes = need(limiter.fake_library, "libcuda.so.1").parent
    out = tmp_path_factory.mktemp("drivers")
    specs = {
        "cuda": ("cuda_driver.c", ["libcuda.so.1"], ["-lpthread", "-ldl"]),
        "acl": ("acl_driver.c", ["libascendcl.so"], []),
        "cn": ("cn_driver.c", ["libcnrt.so", "libcndrv.so"], []),
        "scenarios": ("cuda_scenarios.c", ["libcuda.so.1"], ["-lpthread", "-ldl"]),
    }
    built = {}
    for key, (source, libs, extra) in specs.items():
        exe = out / key
        cmd = [cc, "-O2", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}", str(PROGS / source)]
        cmd += [str(need(limiter.fake_library, lib)) for lib in libs] + extra + ["-o", str(exe)]
        subprocess.run(cmd, check=True)
        built[key] = exe
    return Drivers(cuda=built["cuda"], acl=built["acl"], cn=built["cn"], fakes=fakes, scenarios=built["scenarios"])


@pytest.fixture
def wenv(tmp_path: Path, drivers: Drivers) -> Iterator[Env]:
    yield Env(tmp=tmp_path, fakes=drivers.fakes, state=tmp_path / "fakegpu", region=tmp_path / "alloc.region")
