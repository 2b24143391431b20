"""The fault injector (``Profile.faults``) of the built-in vendors on the project's fake libraries.

The fake NVML, DCMI and CNDev share one fault hook (``native/fakes/common/fake_faults.h``): the
control file named by ``HAMI_FAKE_FAULTS``, one ``<fault> <device> [<call>]`` line per fault, which
the loaded library looks at on every call about a device.  This injector writes that file, so the
adapter under test meets each fault in the middle of its run, through its real binding, as the
vendor's own return codes: a lost GPU answers ``NVML_ERROR_GPU_IS_LOST``, a lost NPU
``DCMI_ERR_CODE_DEVICE_NOT_EXIST``, a lost MLU ``CNDEV_ERROR_IN_PROBLEM``.

Each fake names a device its own way: NVML by its UUID, DCMI by ``<card>:<device>``, CNDev by the
UUID in its node fixture (the adapter reports it behind an ``MLU-`` prefix).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from hami_conformance.fixture_facts import fixture_blocks
from hami_devices.adapter import VendorAdapter
from hami_devices.device import Device

VARIABLE = "HAMI_FAKE_FAULTS"
"""Names the control file every fake vendor library reads its injected faults from."""

DeviceName = Callable[[Device], str]


def _nvml_name(device: Device) -> str:
    return device.uuid


def _dcmi_name(device: Device) -> str:
    card, chip = device.info.attributes.get("card"), device.info.attributes.get("device")
    if card is None or chip is None:
        raise LookupError(f"{device.uuid}: no DCMI card and device in its attributes to name it by")
    return f"{card}:{chip}"


def _cndev_name(device: Device) -> str:
    fixture = os.environ.get("HAMI_FAKE_CNDEV_FIXTURE")
    uuids = [b["uuid"] for b in fixture_blocks(Path(fixture), "[mlu]") if "uuid" in b] if fixture else []
    for uuid in uuids:
        if device.uuid == uuid or device.uuid.endswith(f"-{uuid}"):
            return uuid
    raise LookupError(f"{device.uuid}: not a device of the fake CNDev's fixture {fixture}")


_NAMES: dict[str, tuple[DeviceName, str]] = {
    # vendor: (the fake's name of a device, the variable naming its node fixture)
    "nvidia": (_nvml_name, "HAMI_FAKE_NVML_FIXTURE"),
    "ascend": (_dcmi_name, "HAMI_FAKE_DCMI_FIXTURE"),
    "cambricon": (_cndev_name, "HAMI_FAKE_CNDEV_FIXTURE"),
}


class FakeLibraryFaults:
    """Faults in a loaded fake vendor library, made by rewriting its control file.

    The file is replaced, never edited in place: a new inode is a change the library sees even
    within one tick of the file system's clock.  ``HAMI_FAKE_FAULTS`` is set only while a fault
    stands, so the suite's other checks (and the workload processes they start) run as without one.
    """

    def __init__(self, path: Path, name: DeviceName) -> None:
        self.path = path
        self.name = name
        self._lines: list[str] = []
        self._set_variable = False

    def unhealthy(self, device: Device) -> None:
        self._add(f"unhealthy {self.name(device)}")

    def disappear(self, device: Device) -> None:
        self._add(f"lost {self.name(device)}")

    def fail_calls(self, device: Device) -> None:
        self._add(f"error {self.name(device)}")

    def clear(self) -> None:
        self._lines.clear()
        self._write()
        if self._set_variable:
            os.environ.pop(VARIABLE, None)
            self._set_variable = False

    def _add(self, line: str) -> None:
        self._lines.append(line)
        self._write()
        if os.environ.get(VARIABLE) != str(self.path):
            os.environ[VARIABLE] = str(self.path)  # the loaded library reads the variable on every call
            self._set_variable = True

    def _write(self) -> None:
        staged = self.path.with_name(f"{self.path.name}.{os.getpid()}.new")
        staged.write_text("".join(f"{line}\n" for line in self._lines))
        os.replace(staged, self.path)


def fake_library_faults(adapter: VendorAdapter) -> FakeLibraryFaults | None:
    """For a built-in vendor on its fake library: faults made through the fakes' shared hook."""
    known = _NAMES.get(adapter.name)
    if known is None:
        return None
    name, fixture = known
    chosen = os.environ.get(VARIABLE)
    if chosen:
        path = Path(chosen)
    elif os.environ.get(fixture):
        path = Path(f"{os.environ[fixture]}.faults")  # beside the fixture: a test's private folder
    else:
        return None
    return FakeLibraryFaults(path, name)
