"""DCMI struct layouts, written down from dcmi_interface_api.h (LP64), against cffi and the C declarations."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hami_ascend.binding import ffi

REPO_ROOT = Path(__file__).resolve().parents[3]

# type -> (size, {field: offset})
LAYOUTS: dict[str, tuple[int, dict[str, int]]] = {
    "struct dcmi_chip_info": (100, {"chip_type": 0, "chip_name": 32, "chip_ver": 64, "aicore_cnt": 96}),
    "struct dcmi_pcie_info_all": (
        64,
        {"venderid": 0, "deviceid": 8, "domain": 16, "bdf_busid": 20, "bdf_deviceid": 24, "bdf_funcid": 28,
         "reserve": 32},
    ),
    "struct dcmi_die_id": (20, {"soc_die": 0}),
    "struct dcmi_ecc_info": (
        60,
        {"enable_flag": 0, "single_bit_error_cnt": 4, "double_bit_error_cnt": 8, "total_single_bit_error_cnt": 12,
         "total_double_bit_error_cnt": 16, "single_bit_isolated_pages_cnt": 20, "double_bit_isolated_pages_cnt": 24},
    ),
    "struct dcmi_hbm_info": (
        32, {"memory_size": 0, "freq": 8, "memory_usage": 16, "temp": 24, "bandwith_util_rate": 28}
    ),
    "struct dcmi_get_memory_info_stru": (
        112,
        {"memory_size": 0, "memory_available": 8, "freq": 16, "hugepagesize": 24, "hugepages_free": 40,
         "utiliza": 48, "reserve": 52},
    ),
    "struct dcmi_base_resource": (64, {"token": 0, "task_timeout": 16, "vfg_id": 24, "vip_mode": 28, "reserved": 29}),
    "struct dcmi_computing_resource": (
        96,
        {"aic": 0, "aiv": 4, "dsa": 8, "pcie_dma": 22, "memory_size": 24, "event_id": 32, "model_id": 44,
         "topic_schedule_aicpu": 48, "topic_ctrl_cpu_slot": 56, "vdev_aicore_utilization": 60,
         "vdev_memory_total": 64, "vdev_memory_free": 72, "reserved": 80},
    ),
    "struct dcmi_media_resource": (56, {"jpegd": 0, "venc": 20, "reserved": 24}),
    "struct dcmi_create_vdev_out": (52, {"vdev_id": 0, "pcie_bus": 4, "vfg_id": 16, "reserved": 20}),
    "struct dcmi_create_vdev_res_stru": (104, {"vdev_id": 0, "vfg_id": 4, "template_name": 8, "reserved": 40}),
    "struct dcmi_vdev_query_info": (
        256,
        {"name": 0, "status": 16, "vfid": 24, "container_id": 32, "base": 40, "computing": 104, "media": 200},
    ),
    "struct dcmi_vdev_query_stru": (264, {"vdev_id": 0, "query_info": 8}),
    "struct dcmi_soc_total_resource": (
        360,
        {"vdev_num": 0, "vdev_id": 4, "vfg_num": 132, "vfg_bitmap": 136, "base": 144, "computing": 208,
         "media": 304},
    ),
}


@pytest.mark.parametrize("ctype", sorted(LAYOUTS))
def test_cffi_layout_matches_the_vendor_header(ctype: str) -> None:
    size, fields = LAYOUTS[ctype]
    assert ffi.sizeof(ctype) == size
    for field, offset in fields.items():
        assert ffi.offsetof(ctype, field) == offset, field


def test_c_declarations_match_the_vendor_header(tmp_path: Path) -> None:
    """The header the fake library is compiled with has the same layouts."""
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "hami_dcmi_api.h"', "int main(void) {",
             'printf("{");']
    first = True
    for ctype, (_, fields) in LAYOUTS.items():
        for key, expr in [("sizeof", f"sizeof({ctype})"), *((f, f"offsetof({ctype}, {f})") for f in fields)]:
            sep = "" if first else ","
            first = False
            lines.append(f'printf("{sep}\\"{ctype}.{key}\\": %zu", (size_t){expr});')
    lines += ['printf("}\\n");', "return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines))
    binary = tmp_path / "layout"
    subprocess.run(["cc", f"-I{REPO_ROOT / 'native/include'}", "-o", str(binary), str(source)], check=True)
    measured = json.loads(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout)
    for ctype, (size, fields) in LAYOUTS.items():
        assert measured[f"{ctype}.sizeof"] == size, ctype
        for field, offset in fields.items():
            assert measured[f"{ctype}.{field}"] == offset, f"{ctype}.{field}"
