"""The NVML structs the fake declares (native/include/hami_nvml_api.h) match pynvml's ctypes layouts."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
from pathlib import Path

import pynvml
import pytest
from hami_nvidia.binding import ProcessInfoV1

INCLUDE = Path(__file__).resolve().parents[3] / "native" / "include"

# C type in hami_nvml_api.h -> the ctypes structure pynvml (or the binding) passes for it
PAIRS: dict[str, type[ctypes.Structure]] = {
    "nvmlMemory_t": pynvml.c_nvmlMemory_t,
    "nvmlMemory_v2_t": pynvml.c_nvmlMemory_v2_t,
    "nvmlPciInfo_t": pynvml.nvmlPciInfo_t,
    "nvmlPciInfoLegacy_t": pynvml.nvmlPciInfo_v2_t,
    "nvmlProcessInfo_t": pynvml.c_nvmlProcessInfo_v3_t,
    "nvmlProcessInfo_v1_t": ProcessInfoV1,
    "nvmlUtilization_t": pynvml.c_nvmlUtilization_t,
    "nvmlProcessUtilizationSample_t": pynvml.c_nvmlProcessUtilizationSample_t,
    "nvmlGpuInstancePlacement_t": pynvml.c_nvmlGpuInstancePlacement_t,
    "nvmlGpuInstanceProfileInfo_t": pynvml.c_nvmlGpuInstanceProfileInfo_t,
    "nvmlGpuInstanceProfileInfo_v2_t": pynvml.c_nvmlGpuInstanceProfileInfo_v2_t,
    "nvmlGpuInstanceInfo_t": pynvml.c_nvmlGpuInstanceInfo_t,
    "nvmlComputeInstanceInfo_t": pynvml.c_nvmlComputeInstanceInfo_t,
    "nvmlFieldValue_t": pynvml.c_nvmlFieldValue_t,
    "nvmlEventData_t": pynvml.c_nvmlEventData_t,
    "nvmlGpmMetric_t": pynvml.c_nvmlGpmMetric_t,
    "nvmlGpmSupport_t": pynvml.c_nvmlGpmSupport_t,
}


def _c_program() -> str:
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "hami_nvml_api.h"', "int main(void) {",
             '  printf("{");']
    for i, (ctype, py) in enumerate(PAIRS.items()):
        sep = "," if i else ""
        fields = ",".join(f'\\"{name}\\": %zu' for name, *_ in py._fields_)
        args = ", ".join(f"offsetof({ctype}, {name})" for name, *_ in py._fields_)
        lines.append(f'  printf("{sep}\\"{ctype}\\": {{\\"__sizeof__\\": %zu, {fields}}}", sizeof({ctype}), {args});')
    lines.append('  printf(",\\"versions\\": {\\"memory_v2\\": %u, \\"profile_v2\\": %u}", '
                 "nvmlMemory_v2, nvmlGpuInstanceProfileInfo_v2);")
    lines += ['  printf("}\\n");', "  return 0;", "}"]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, int]]:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("a C compiler is needed to check struct layouts")
    work = tmp_path_factory.mktemp("layout")
    (work / "layout.c").write_text(_c_program())
    subprocess.run([cc, f"-I{INCLUDE}", "-o", str(work / "layout"), str(work / "layout.c")], check=True)
    out = subprocess.run([str(work / "layout")], check=True, capture_output=True, text=True).stdout
    layout: dict[str, dict[str, int]] = json.loads(out)
    return layout


@pytest.mark.parametrize("ctype", sorted(PAIRS))
def test_size_and_offsets_match_pynvml(c_layout: dict[str, dict[str, int]], ctype: str) -> None:
    py = PAIRS[ctype]
    assert c_layout[ctype]["__sizeof__"] == ctypes.sizeof(py)
    for name, *_ in py._fields_:
        assert c_layout[ctype][name] == getattr(py, name).offset, f"{ctype}.{name}"


def test_struct_version_constants_match(c_layout: dict[str, dict[str, int]]) -> None:
    assert c_layout["versions"]["memory_v2"] == pynvml.nvmlMemory_v2
    assert c_layout["versions"]["profile_v2"] == pynvml.nvmlGpuInstanceProfileInfo_v2
