"""Partitions as a fake vendor library's own state file lists them: the release and restart checks'
ground truth for a built-in adapter on its fake hardware, read from the file, not through the
adapter's binding objects.

* The fake DCMI keeps one ``vnpu <card> <device> <vdev_id> <template>`` line per vNPU in its state
  file (``HAMI_FAKE_DCMI_STATE``, default ``<fixture>.state``); the device is found by the card and
  device discovery reported in its DeviceInfo.
* The fake CNDev keeps one ``instance <device> <instance_id> <profile_id> <name>`` line per sMLU
  instance (``HAMI_FAKE_CNDEV_STATE``, default ``<fixture>.state``), ``<device>`` counting the
  fixture's ``[mlu]`` blocks from 0.  Until the first call writes the file, the instances are the
  fixture's ``smlu_instance`` lines, numbered from 1.  An instance's uuid, the id its grant carries,
  is its device's fixture uuid with the last six digits ``a`` and the instance id in three hex
  digits (native/fakes/cndev/fake_cndev.c).
* The fake NVML has no state file (its MIG devices live in the loaded library): nvml_partitions.py
  reads them through NVML's own API.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from hami_conformance.profile import PartitionReader
from hami_devices.adapter import VendorAdapter
from hami_devices.device import Device


def _dcmi_state() -> Path | None:
    state = os.environ.get("HAMI_FAKE_DCMI_STATE")
    if state:
        return Path(state)
    fixture = os.environ.get("HAMI_FAKE_DCMI_FIXTURE")
    return Path(f"{fixture}.state") if fixture else None


def _dcmi_vnpus(device: Device) -> Collection[str] | None:
    path = _dcmi_state()
    card, chip = device.info.attributes.get("card"), device.info.attributes.get("device")
    if path is None or card is None or chip is None:
        return None
    if not path.is_file():
        return []  # no vNPU was ever made
    found = []
    for line in path.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 4 and words[0] == "vnpu" and (words[1], words[2]) == (card, chip):
            found.append(words[3])
    return found


def _cndev_files() -> tuple[Path, Path] | None:
    """The fake CNDev's fixture and state file."""
    fixture = os.environ.get("HAMI_FAKE_CNDEV_FIXTURE")
    if not fixture:
        return None
    return Path(fixture), Path(os.environ.get("HAMI_FAKE_CNDEV_STATE") or f"{fixture}.state")


def _mlu_blocks(fixture: Path) -> list[tuple[str, int]]:
    """Each ``[mlu]`` block's uuid and how many ``smlu_instance`` lines it has (a repeatable key)."""
    blocks: list[tuple[str, int]] = []
    for raw in fixture.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        key, _, value = line.partition("=")
        if line == "[mlu]":
            blocks.append(("", 0))
        elif blocks and key.strip() == "uuid":
            blocks[-1] = (value.strip(), blocks[-1][1])
        elif blocks and key.strip() == "smlu_instance":
            blocks[-1] = (blocks[-1][0], blocks[-1][1] + 1)
    return blocks


def _instance_uuid(device_uuid: str, instance_id: int) -> str:
    return device_uuid[:-6] + f"{0xA00000 | (instance_id & 0xFFF):06x}"


def _cndev_instances(device: Device) -> Collection[str] | None:
    files = _cndev_files()
    if files is None:
        return None
    fixture, state = files
    blocks = _mlu_blocks(fixture)
    index = next(
        (i for i, (uuid, _) in enumerate(blocks) if uuid and (device.uuid == uuid or device.uuid.endswith(f"-{uuid}"))),
        None,
    )
    if index is None:
        return None  # a device the fake library does not have
    uuid, seeded = blocks[index]
    if not state.is_file() or not state.read_text().strip():
        return [_instance_uuid(uuid, i) for i in range(1, seeded + 1)]
    found = []
    for line in state.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 4 and words[0] == "instance" and words[1] == str(index):
            found.append(_instance_uuid(uuid, int(words[2])))
    return found


def state_partition_reader(adapter: VendorAdapter, library: str | None = None) -> PartitionReader | None:
    """For a built-in vendor on its fake library: the partitions that library's state lists."""
    if adapter.name == "ascend" and _dcmi_state() is not None:
        return _dcmi_vnpus
    if adapter.name == "cambricon" and _cndev_files() is not None:
        return _cndev_instances
    if adapter.name == "nvidia" and library:
        from hami_conformance.nvml_partitions import nvml_partition_reader

        return nvml_partition_reader(library)
    return None
