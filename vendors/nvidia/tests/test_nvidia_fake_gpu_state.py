"""With HAMI_FAKE_GPU_STATE the fake NVML reports the memory and processes of the shared fake-GPU state."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nvidia_helpers import nvml_env, run_json

INCLUDE = Path(__file__).resolve().parents[3] / "native" / "include"
HERE = Path(__file__).resolve().parent

# A fake-runtime process: it attaches the shared state and holds 300 MiB on device 0.
WRITER = r"""
#include "hami_fake_gpu.h"
int main(void) {
    hami_fake_gpu_state *s = hami_fake_gpu_attach("CUDA");
    if (!s) return 1;
    hami_fake_proc *p = hami_fake_proc_slot(&s->devices[0], (int32_t)getpid());
    if (!p || hami_fake_mem_take(&s->devices[0], p, 300ull << 20) != 0) return 2;
    printf("%d\n", (int)getpid());
    return 0;
}
"""


def test_memory_and_processes_come_from_the_shared_state(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("a C compiler is needed")
    (tmp_path / "writer.c").write_text(WRITER)
    subprocess.run([cc, f"-I{INCLUDE}", "-o", str(tmp_path / "writer"), str(tmp_path / "writer.c")], check=True)
    state = tmp_path / "gpu.state"
    env = nvml_env("t4-pcie.conf")
    env.update({"HAMI_FAKE_GPU_STATE": str(state), "HAMI_FAKE_CUDA_DEVICES": "2", "HAMI_FAKE_MEMORY_MIB": "15360"})
    pid = int(subprocess.run([str(tmp_path / "writer")], env=env, check=True, capture_output=True,
                             text=True).stdout)
    metrics = run_json([sys.executable, str(HERE / "nvidia_scenarios.py"), "monitor"], env)["metrics"]
    assert metrics[0]["memory_used_mib"] == 300
    assert metrics[0]["processes"] == [{"pid": pid, "memory_used_mib": 300, "utilization_pct": "n/a"}]
    assert metrics[1]["memory_used_mib"] == 0 and metrics[1]["processes"] == []
