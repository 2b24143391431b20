"""The fake runtimes honour the real visible-devices variables as the real runtimes read them.

CUDA_VISIBLE_DEVICES (CUDA C Programming Guide, "CUDA Environment Variables"): indices, GPU UUIDs or a unique
prefix of one, MIG UUIDs; devices are numbered in the list's order; the first entry naming no device ends the
list ("0,2,-1,1" shows devices 0 and 2); set but empty shows none (cuInit: CUDA_ERROR_NO_DEVICE).  The Ascend
(ASCEND_RT_VISIBLE_DEVICES) and Cambricon (MLU_VISIBLE_DEVICES) fakes take indices the same way.  Each fake
device has its own memory size here, so the sizes a process sees say which devices it sees, in which order."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.limiter.conftest import Drivers
from tests.limiter.helpers import Env, run

SIZES = {"CUDA": "1000,2000,3000", "ASCEND": "1000,2000,3000", "CAMBRICON": "1000,2000,3000"}
UUIDS = [
    "GPU-aaaa0000-1111-2222-3333-000000000000",
    "GPU-aaaa1111-1111-2222-3333-000000000001",
    "GPU-cccccccc-1111-2222-3333-000000000002",
]
CUDA_ERROR_NO_DEVICE = 100
REAL = ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "MLU_VISIBLE_DEVICES")


def _env(wenv: Env, vendor: str, fixture: Path | None, **visible: str) -> dict[str, str]:
    env = wenv.build(shim=None, HAMI_FAKE_VISIBLE_DEVICES="")  # no pin: the real variable decides
    for name in REAL:
        env.pop(name, None)
    env.update({f"HAMI_FAKE_{vendor}_DEVICES": "3", f"HAMI_FAKE_{vendor}_MEMORY_MIB": SIZES[vendor]})
    if fixture is not None:
        env["HAMI_FAKE_NVML_FIXTURE"] = str(fixture)
    env.update(visible)
    return env


def _seen(cmd: list[str | Path], env: dict[str, str]) -> list[int] | int:
    """The memory sizes (MiB) of the devices a process sees, in ordinal order; cuInit's error if it fails."""
    out = run(cmd, env)
    lines = out.stdout.split()
    if lines[:1] == ["cuInit"]:
        return int(lines[1].removeprefix("rc="))
    assert out.returncode == 0, out.stdout + out.stderr
    count = int(lines[1])
    sizes = [int(lines[3 + 2 * i]) for i in range(count)]
    return sizes


@pytest.fixture
def fixture(tmp_path: Path) -> Path:
    path = tmp_path / "gpus.conf"
    path.write_text("".join(f"[gpu]\nname = NVIDIA T4\nuuid = {u}\nmemory_mib = 15360\n" for u in UUIDS))
    return path


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [1000, 2000, 3000]),  # unset: every device
        ("2,0", [3000, 1000]),  # the list's order
        ("0,2,-1,1", [1000, 3000]),  # the guide's example: the invalid -1 ends the list
        ("0,7,1", [1000]),  # an index past the devices ends it too
        ("", CUDA_ERROR_NO_DEVICE),  # set but empty: no device
        (f"{UUIDS[2]},0", [3000, 1000]),  # a full GPU UUID
        ("GPU-cccc", [3000]),  # a unique prefix
        ("gpu-CCCCCCCC", [3000]),  # in either case
        ("1,GPU-aaaa,0", [2000]),  # a prefix of two devices names none: the list ends
        ("0,GPU-ffffffff,1", [1000]),  # a UUID of no device on this host
        ("1,1,0", [2000]),  # a device named twice
        ("MIG-aaaa1111-1111-2222-3333-000001000001", [2000]),  # a MIG device (the fake NVML's form): its GPU
        (f"MIG-{UUIDS[2]}/1/0", [3000]),  # a MIG device, as drivers before R470 named it
        ("1, 2", [2000, 3000]),  # spaces around an entry
    ],
)
def test_cuda_visible_devices(drivers: Drivers, wenv: Env, fixture: Path, visible: str | None,
                              expected: list[int] | int) -> None:
    variables = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert _seen([drivers.cuda, "devices"], _env(wenv, "CUDA", fixture, **variables)) == expected


def test_cuda_uuids_without_a_fixture_are_the_fake_nvml_defaults(drivers: Drivers, wenv: Env) -> None:
    env = _env(wenv, "CUDA", None, CUDA_VISIBLE_DEVICES="GPU-00000000-0000-0000-0000-000000000002,0")
    assert _seen([drivers.cuda, "devices"], env) == [3000, 1000]


def test_the_test_pin_wins_over_the_real_variable(drivers: Drivers, wenv: Env, fixture: Path) -> None:
    env = _env(wenv, "CUDA", fixture, CUDA_VISIBLE_DEVICES="0", HAMI_FAKE_CUDA_VISIBLE_DEVICES="2,1")
    assert _seen([drivers.cuda, "devices"], env) == [3000, 2000]
    env = _env(wenv, "CUDA", fixture, CUDA_VISIBLE_DEVICES="GPU-ffffffff", HAMI_FAKE_VISIBLE_DEVICES="all")
    assert _seen([drivers.cuda, "devices"], env) == [1000, 2000, 3000]
    env = _env(wenv, "CUDA", fixture, HAMI_FAKE_CUDA_VISIBLE_DEVICES="2,9,0")  # the pin skips what is not there
    assert _seen([drivers.cuda, "devices"], env) == [3000, 1000]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [(None, [1000, 2000, 3000]), ("2,0", [3000, 1000]), ("1,7,0", [2000]), ("0,GPU-1", [1000]), ("", [])],
)
def test_ascend_rt_visible_devices(drivers: Drivers, wenv: Env, visible: str | None, expected: list[int]) -> None:
    variables = {} if visible is None else {"ASCEND_RT_VISIBLE_DEVICES": visible}
    assert _seen([drivers.acl, "devices"], _env(wenv, "ASCEND", None, **variables)) == expected
    pinned = _env(wenv, "ASCEND", None, HAMI_FAKE_ASCEND_VISIBLE_DEVICES="1", **variables)
    assert _seen([drivers.acl, "devices"], pinned) == [2000]


@pytest.mark.parametrize("api", ["cnrt", "cndrv"])
@pytest.mark.parametrize(("visible", "expected"), [(None, [1000, 2000, 3000]), ("2,1", [3000, 2000]),
                                                   ("0,-1,2", [1000])])
def test_mlu_visible_devices(drivers: Drivers, wenv: Env, api: str, visible: str | None,
                             expected: list[int]) -> None:
    variables = {} if visible is None else {"MLU_VISIBLE_DEVICES": visible}
    assert _seen([drivers.cn, "devices", api], _env(wenv, "CAMBRICON", None, **variables)) == expected
