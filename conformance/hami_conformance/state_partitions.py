"""Partitions as a fake vendor library's own state file lists them: the release and restart checks'
ground truth for a built-in adapter on its fake hardware, read from the file, not through the
adapter's binding objects.

The fake DCMI keeps one ``vnpu <card> <device> <vdev_id> <template>`` line per vNPU in its state
file (``HAMI_FAKE_DCMI_STATE``, default ``<fixture>.state``); the device is found by the card and
device discovery reported in its DeviceInfo.  (The fake NVML keeps MIG instances in the process and
the fake CNDev names instances by name, not by the uuid grants carry: those two are still read
through the library binding, see builtin.py.)
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


def state_partition_reader(adapter: VendorAdapter) -> PartitionReader | None:
    """For a built-in vendor on its fake library with a state file: that file's partitions."""
    if adapter.name == "ascend" and _dcmi_state() is not None:
        return _dcmi_vnpus
    return None
