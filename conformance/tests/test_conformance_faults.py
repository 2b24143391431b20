"""Faults during the run (issue 40): the fake vendor libraries' shared fault hook, and faults.during-run as
a MUST on the built-in adapters' fake hardware.

The built-ins pass it in their full fake-hardware runs (test_conformance_suite.py); here, the hook itself
answers with each vendor's own codes mid-run, and a built-in adapter that mishandles a failed device is
refused by that check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hami_conformance_testing import HERE, certify, failures, fake_hardware_environment, results
from hami_fault_broken_adapters import FAULT_BROKEN

FAULT_BROKEN_MODULE = HERE / "hami_fault_broken_adapters.py"

PROBE = textwrap.dedent(
    """
    import ctypes, json, os, sys
    from ctypes import byref, c_int, c_uint, c_ulonglong, c_void_p, create_string_buffer

    control = sys.argv[1]
    os.environ["HAMI_FAKE_FAULTS"] = control  # set after the libraries load: they read it on every call

    def faults(text):
        with open(control + ".new", "w") as f:
            f.write(text)
        os.replace(control + ".new", control)

    nvml = ctypes.CDLL(os.environ["HAMI_NVML_LIBRARY"])
    dcmi = ctypes.CDLL(os.environ["HAMI_DCMI_LIBRARY"])
    cndev = ctypes.CDLL(os.environ["HAMI_CNDEV_LIBRARY"])
    assert nvml.nvmlInit_v2() == 0 and dcmi.dcmi_init() == 0 and cndev.cndevInit(0) == 0

    class Memory(ctypes.Structure):
        _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]

    class CndevHealth(ctypes.Structure):
        _fields_ = [("version", c_int), ("health", c_int), ("deviceState", c_int), ("driverState", c_int)]

    gpus = [c_void_p(), c_void_p()]
    for i, gpu in enumerate(gpus):
        assert nvml.nvmlDeviceGetHandleByIndex_v2(i, byref(gpu)) == 0
    name = create_string_buffer(96)
    assert nvml.nvmlDeviceGetUUID(gpus[0], name, 96) == 0
    gpu0 = name.value.decode()

    def nvml_memory(gpu):
        return nvml.nvmlDeviceGetMemoryInfo(gpu, byref(Memory()))

    def nvml_temperature():
        return nvml.nvmlDeviceGetTemperature(gpus[0], 0, byref(c_uint()))

    def dcmi_health():
        health = c_uint(99)
        rc = dcmi.dcmi_get_device_health(0, 0, byref(health))
        return [rc, health.value]

    def cndev_health():
        state = CndevHealth(version=5)
        rc = cndev.cndevGetCardHealthState(byref(state), 0)
        return [rc, state.health]

    mlu0 = "59000100-7f6e-4d5c-9b4a-392817061500"
    seen = {}

    def look(step):
        seen[step] = {
            "nvml": [nvml_memory(gpus[0]), nvml_temperature(), nvml_memory(gpus[1])],
            "dcmi": dcmi_health(),
            "cndev": cndev_health(),
        }

    look("before")
    faults(f"lost {gpu0}\\nlost 0:0\\nlost {mlu0}\\n")
    look("lost")
    faults(f"unhealthy {gpu0}\\nunhealthy 0:0\\nunhealthy {mlu0}\\n")
    look("unhealthy")
    faults(f"error {gpu0} nvmlDeviceGetTemperature\\nerror 0:0\\nerror {mlu0}\\n")
    look("error")
    faults("")
    look("cleared")
    print(json.dumps(seen))
    """
)


def test_each_fake_library_fails_a_device_mid_run_with_its_vendors_own_codes(tmp_path: Path) -> None:
    """One process loads the three fakes once; the control file changes under it between calls."""
    env = {}
    for vendor in ("nvidia", "ascend", "cambricon"):
        env.update(fake_hardware_environment(vendor, tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "faults")], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout)
    # Expected codes from the vendors' references: nvml.h (GPU_IS_LOST 15, RESET_REQUIRED 16, UNKNOWN 999),
    # the DCMI API return-code table (DEVICE_NOT_EXIST -8008, INNER_ERR -8005; health 3 critical) and
    # cndev.h (IN_PROBLEM 18, UNKNOWN 7; health 1 good, 0 in problem).  The fixtures' chips start healthy.
    assert seen["before"] == {"nvml": [0, 0, 0], "dcmi": [0, 0], "cndev": [0, 1]}
    assert seen["lost"] == {"nvml": [15, 15, 0], "dcmi": [-8008, 99], "cndev": [18, 0]}
    assert seen["unhealthy"] == {"nvml": [16, 16, 0], "dcmi": [0, 3], "cndev": [0, 0]}
    # NVML: only the call the fault names fails; DCMI and CNDev: every call about the device
    assert seen["error"] == {"nvml": [0, 999, 0], "dcmi": [-8005, 99], "cndev": [7, 0]}
    assert seen["cleared"] == seen["before"]


@pytest.mark.parametrize("adapter", sorted(FAULT_BROKEN))
def test_a_builtin_adapter_that_mishandles_a_failed_device_is_refused(adapter: str, tmp_path: Path) -> None:
    vendor, bug = FAULT_BROKEN[adapter]
    env = fake_hardware_environment(vendor, tmp_path)
    args = ["--adapter-class", f"{FAULT_BROKEN_MODULE}:{adapter}", "-k", "faults"]
    proc, report = certify(args, env, tmp_path)
    assert report["adapter"]["backend"] == "hardware", proc.stderr[-2000:]
    assert results(report)["faults.during-run"] == "fail", f"{adapter} {bug}, yet faults.during-run passed"
    assert proc.returncode == 1 and "faults.during-run" in report["must_failed"]
    reason = failures(report)["faults.during-run"]
    assert "expected unhealthy" in reason or "expected a typed HamiError" in reason, reason
