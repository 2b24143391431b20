"""The one fixture reader of the fake vendor libraries (native/fakes/common/fake_fixture.c).

The fake NVML, DCMI and CNDev read their device tables through it: every line the fakes accepted
before still loads, and a line that is not part of the format is reported on stderr as
``<file>:<line>: ...`` while the rest of the table loads as before.  Each library runs in a fresh
process (its tables are process-wide), driven through its real entry points with ctypes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import hami_devices

LIBS = Path(hami_devices.__path__[0]).resolve() / "libs" / "fakes"
REPO = Path(__file__).resolve().parents[2]

# Each probe prints what the library says about its table, one fact a line.
NVML_PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
assert lib.nvmlInit_v2() == 0
count = ctypes.c_uint()
assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
version = ctypes.create_string_buffer(80)
lib.nvmlSystemGetDriverVersion(version, 80)
print("driver", version.value.decode())
for i in range(count.value):
    handle = ctypes.c_void_p()
    lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle))
    name, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
    lib.nvmlDeviceGetName(handle, name, 96)
    lib.nvmlDeviceGetUUID(handle, uuid, 96)
    print("gpu", name.value.decode(), uuid.value.decode())
"""

DCMI_PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
assert lib.dcmi_init() == 0
num, cards = ctypes.c_int(), (ctypes.c_int * 64)()
assert lib.dcmi_get_card_list(ctypes.byref(num), cards, 64) == 0
for card in cards[: num.value]:
    logic = ctypes.c_int()
    assert lib.dcmi_get_device_logic_id(ctypes.byref(logic), card, 0) == 0
    print("chip", card, logic.value)
"""

CNDEV_PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.cndevGetCardNameStringByDevId.restype = ctypes.c_char_p
assert lib.cndevInit(0) == 0
class CardInfo(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int), ("number", ctypes.c_uint)]
info = CardInfo(5, 0)
assert lib.cndevGetDeviceCount(ctypes.byref(info)) == 0
for i in range(info.number):
    print("mlu", lib.cndevGetCardNameStringByDevId(i).decode())
"""


def probe(code: str, library: Path, variable: str, fixture: Path, scratch: Path) -> tuple[list[str], list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAMI_FAKE_")}
    env[variable] = str(fixture)
    # vNPU and sMLU state beside the test, never beside a shipped fixture
    env["HAMI_FAKE_DCMI_STATE"] = str(scratch / f"{fixture.name}.dcmi-state")
    env["HAMI_FAKE_CNDEV_STATE"] = str(scratch / f"{fixture.name}.cndev-state")
    done = subprocess.run(
        [sys.executable, "-c", code, str(library)], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines(), done.stderr.splitlines()


def numbered(path: Path, lines: list[str]) -> dict[str, int]:
    """Where each line stands in the file (1-based), as an editor numbers it."""
    path.write_text("\n".join(lines) + "\n")
    return {line: number for number, line in enumerate(lines, start=1)}


def test_nvml_reports_each_faulty_line_by_file_and_number_and_loads_the_rest(tmp_path: Path) -> None:
    fixture = tmp_path / "faulty.nvml"
    long_line = "name = " + "x" * 600
    lines = [
        "# global keys first",
        "driver_version = 535.104.05   # a comment after a value",
        "[gpu]",
        "name = NVIDIA T4",
        "uuid = GPU-11111111-2222-3333-4444-555555555555",
        "memory_mib 15360",
        "[gpus]",
        "= 7",
        long_line,
        "  [gpu]  ",
        "name = Second GPU",
    ]
    at = numbered(fixture, lines)
    out, err = probe(NVML_PROBE, LIBS / "nvml" / "libnvidia-ml.so.1", "HAMI_FAKE_NVML_FIXTURE", fixture, tmp_path)
    assert out == [
        "driver 535.104.05",
        "gpu NVIDIA T4 GPU-11111111-2222-3333-4444-555555555555",
        "gpu Second GPU GPU-00000000-0000-0000-0000-000000000001",
    ]
    where = [line.split(": ", 1)[0] for line in err]
    assert where == [f"{fixture}:{at[line]}" for line in ("memory_mib 15360", "[gpus]", "= 7", long_line)]
    assert "neither [gpu] nor key = value" in err[0] and "memory_mib 15360" in err[0]
    assert "a section other than [gpu]" in err[1]
    assert "longer than 510 characters" in err[3]


def test_dcmi_and_cndev_report_keys_before_their_first_section(tmp_path: Path) -> None:
    dcmi = tmp_path / "faulty.dcmi"
    at = numbered(dcmi, ["card=9", "[chip]", "card=0", "[chip]", "card=1", "[npu]", "device=0"])
    out, err = probe(DCMI_PROBE, LIBS / "dcmi" / "libdcmi.so", "HAMI_FAKE_DCMI_FIXTURE", dcmi, tmp_path)
    assert out == ["chip 0 0", "chip 1 1"]
    assert [line.split(": ", 1)[0] for line in err] == [f"{dcmi}:{at['card=9']}", f"{dcmi}:{at['[npu]']}"]
    assert "a key before the first [chip]" in err[0]

    cndev = tmp_path / "faulty.cndev"
    at = numbered(cndev, ["[mlu]", "name = MLU370-X8", "power", "[mlu]", "name=MLU590"])
    out, err = probe(CNDEV_PROBE, LIBS / "cndev" / "libcndev.so", "HAMI_FAKE_CNDEV_FIXTURE", cndev, tmp_path)
    assert out == ["mlu MLU370-X8", "mlu MLU590"]
    assert err == [f"{cndev}:{at['power']}: neither [mlu] nor key = value, skipped: power"]


def test_the_shipped_fixtures_read_without_a_report(tmp_path: Path) -> None:
    cases = [
        (NVML_PROBE, LIBS / "nvml/libnvidia-ml.so.1", "HAMI_FAKE_NVML_FIXTURE", "vendors/nvidia/tests/fixtures/*.conf"),
        (DCMI_PROBE, LIBS / "dcmi/libdcmi.so", "HAMI_FAKE_DCMI_FIXTURE", "vendors/ascend/tests/fixtures/*.dcmi"),
        (
            CNDEV_PROBE,
            LIBS / "cndev/libcndev.so",
            "HAMI_FAKE_CNDEV_FIXTURE",
            "vendors/cambricon/tests/fixtures/*.cndev",
        ),
    ]
    for code, library, variable, pattern in cases:
        fixtures = sorted(REPO.glob(pattern))
        assert fixtures, pattern
        for fixture in fixtures[:1]:
            out, err = probe(code, library, variable, fixture, tmp_path)
            assert out and err == [], (fixture, err)
