"""The Example Runtime's fault hook (native/exrt.h): faults written to the EXRT_FAULTS control file are
answered, from the next call on, with the codes the header defines."""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

import pytest
from hami_example_accel.driver import library

HEADER = Path(__file__).resolve().parent.parent / "native" / "exrt.h"
CODES = {m[1]: int(m[2]) for m in re.finditer(r"#define (EXRT_\w+) (\d+)", HEADER.read_text())}


@pytest.fixture
def runtime() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library("libexrt.so")))
    lib.exrtDeviceGetHealth.argtypes = (ctypes.c_int, ctypes.POINTER(ctypes.c_int))
    return lib


@pytest.fixture
def faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "faults"
    monkeypatch.setenv("EXRT_FAULTS", str(path))
    return path


def write(path: Path, text: str) -> None:
    staged = path.with_name("faults.new")
    staged.write_text(text)
    os.replace(staged, path)  # a new inode: seen even within one tick of the file system's clock


def health(runtime: ctypes.CDLL, device: int) -> tuple[int, int]:
    answer = ctypes.c_int(-1)
    rc = runtime.exrtDeviceGetHealth(device, ctypes.byref(answer))
    return rc, answer.value


def test_no_control_file_means_no_fault(runtime: ctypes.CDLL, faults: Path) -> None:
    assert health(runtime, 0) == (CODES["EXRT_SUCCESS"], 1)


def test_each_fault_is_answered_with_the_headers_code(runtime: ctypes.CDLL, faults: Path) -> None:
    write(faults, "unhealthy 1\nlost 2  # fell off the bus\nerror 3 exrtDeviceGetHealth\n")
    assert health(runtime, 0) == (CODES["EXRT_SUCCESS"], 1)
    assert health(runtime, 1) == (CODES["EXRT_SUCCESS"], 0)
    assert health(runtime, 2)[0] == CODES["EXRT_ERROR_DEVICE_LOST"]
    assert health(runtime, 3)[0] == CODES["EXRT_ERROR_UNKNOWN"]
    assert runtime.exrtSetDevice(2) == CODES["EXRT_ERROR_DEVICE_LOST"]  # every call about a lost device
    assert runtime.exrtSetDevice(3) == CODES["EXRT_SUCCESS"]  # the error names one entry point only


def test_a_rewritten_file_is_seen_by_the_next_call(runtime: ctypes.CDLL, faults: Path) -> None:
    write(faults, "lost *\n")
    assert [health(runtime, d)[0] for d in range(3)] == [CODES["EXRT_ERROR_DEVICE_LOST"]] * 3
    write(faults, "# cleared\n")
    assert [health(runtime, d) for d in range(3)] == [(CODES["EXRT_SUCCESS"], 1)] * 3
