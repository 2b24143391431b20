"""CNDev struct layouts, written down from cndev.h (LP64), against cffi and the C declarations."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hami_cambricon.binding import ffi

REPO_ROOT = Path(__file__).resolve().parents[3]

# type -> (size, {field: offset}); every struct starts with its API version at offset 0
LAYOUTS: dict[str, tuple[int, dict[str, int]]] = {
    "cndevCardInfo_t": (8, {"version": 0, "number": 4}),
    "cndevUUID_t": (56, {"version": 0, "uuid": 4, "ncsUUID64": 48}),
    "cndevMemoryInfo_t": (
        216,
        {"version": 0, "physicalMemoryTotal": 8, "physicalMemoryUsed": 16, "virtualMemoryTotal": 24,
         "channelNumber": 40, "channelMemoryUsed": 48, "globalMemory": 208},
    ),
    "cndevPowerInfo_t": (
        32, {"version": 0, "usage": 4, "cap": 8, "capDecimal": 20, "thermalDesignPower": 24,
             "instantaneousPowerUsage": 26, "instantaneousPowerUsageDecimal": 28},
    ),
    "cndevTemperatureInfo_t": (
        148, {"version": 0, "board": 4, "cluster": 8, "memoryDie": 88, "chip": 120, "memory": 132, "isp": 144}
    ),
    "cndevUtilizationInfo_t": (328, {"version": 0, "averageCoreUtilization": 4, "coreUtilization": 8}),
    "cndevCardCoreCount_t": (8, {"version": 0, "count": 4}),
    "cndevFrequencyInfo_t": (
        68, {"version": 0, "boardFreq": 4, "ddrFreq": 8, "overtempDfsFlag": 12, "fastDfsFlag": 13,
             "mluClusterFreqCount": 14, "mluClusterFreq": 16, "boardDefaultFreq": 56, "boardFreqArange": 60},
    ),
    "cndevECCInfo_t": (
        72, {"version": 0, "oneBitError": 8, "multipleError": 24, "correctedError": 40, "uncorrectedError": 48,
             "totalError": 56, "addressForbiddenError": 64},
    ),
    "cndevPCIethroughput_t": (24, {"version": 0, "pcieRead": 8, "pcieWrite": 16}),
    "cndevPCIeInfo_t": (
        48,
        {"version": 0, "subsystemId": 4, "deviceId": 8, "vendor": 12, "subsystemVendor": 14, "domain": 16,
         "bus": 20, "device": 24, "function": 28, "physicalSlot": 32, "slotID": 40},
    ),
    "cndevCardHealthState_t": (16, {"version": 0, "health": 4, "deviceState": 8, "driverState": 12}),
    "cndevNUMANodeId_t": (8, {"version": 0, "nodeId": 4}),
    "cndevMLULinkStatus_t": (16, {"version": 0, "isActive": 4, "serdesState": 8, "cableState": 12}),
    "cndevSMLUMode_t": (8, {"version": 0, "smluMode": 4}),
    "cndevSMluSet_t": (16, {"version": 0, "mluQuota": 4, "memorySize": 8}),
    "cndevSMluInfo_t": (
        904,
        {"version": 0, "profileId": 4, "instanceId": 8, "uuid": 12, "domain": 52, "bus": 56, "device": 60,
         "function": 64, "profileName": 68, "instanceName": 168, "devNodeName": 268, "mluQuota": 368,
         "memorySize": 376, "reserved": 392},
    ),
    "cndevSMluProfileIdInfo_t": (520, {"version": 0, "count": 4, "profileId": 8}),
    "cndevSMluProfileInfo_t": (
        144,
        {"version": 0, "profileId": 4, "name": 8, "totalCapacity": 108, "remainCapacity": 112, "mluQuota": 116,
         "memorySize": 128},
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
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "hami_cndev_api.h"', "int main(void) {",
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
