"""MIG devices as NVML itself lists them: the release and restart checks' ground truth for an NVIDIA
adapter, read through NVML's C API with this module's own ctypes declarations, not through the
adapter's binding objects.

The fake NVML keeps MIG instances in the loaded library (it has no state file), and a real driver
keeps them in the GPU, so the one independent source on both is the library's API.  Loading the
file the adapter's probe found gives this process the same library, hence the same instances,
the adapter made.  ``nvmlInit`` is called once and never undone: NVML counts its users, so a
shutdown here could never tear down the adapter's session, but it would add nothing either.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Collection

from hami_conformance.profile import PartitionReader
from hami_devices.device import Device

SUCCESS = 0
NOT_FOUND = 6
UUID_BUFFER = 96
"""NVML_DEVICE_UUID_V2_BUFFER_SIZE."""


class _Nvml:
    """The handful of NVML entry points a MIG listing needs."""

    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path)
        handle = ctypes.c_void_p
        self.lib.nvmlInit_v2.restype = ctypes.c_int
        self.lib.nvmlDeviceGetHandleByUUID.argtypes = (ctypes.c_char_p, ctypes.POINTER(handle))
        self.lib.nvmlDeviceGetMaxMigDeviceCount.argtypes = (handle, ctypes.POINTER(ctypes.c_uint))
        self.lib.nvmlDeviceGetMigDeviceHandleByIndex.argtypes = (handle, ctypes.c_uint, ctypes.POINTER(handle))
        self.lib.nvmlDeviceGetUUID.argtypes = (handle, ctypes.c_char_p, ctypes.c_uint)
        self.initialised = self.lib.nvmlInit_v2() == SUCCESS

    def mig_uuids(self, gpu_uuid: str) -> list[str] | None:
        """The MIG devices of the GPU with this uuid; None when NVML does not know the GPU."""
        gpu = ctypes.c_void_p()
        if not self.initialised or self.lib.nvmlDeviceGetHandleByUUID(gpu_uuid.encode(), ctypes.byref(gpu)):
            return None
        count = ctypes.c_uint(0)
        if self.lib.nvmlDeviceGetMaxMigDeviceCount(gpu, ctypes.byref(count)) != SUCCESS:
            return []  # MIG not supported: no partitions
        found = []
        for index in range(count.value):
            mig = ctypes.c_void_p()
            if self.lib.nvmlDeviceGetMigDeviceHandleByIndex(gpu, index, ctypes.byref(mig)) != SUCCESS:
                continue  # an empty slot (NOT_FOUND), or MIG mode off (INVALID_ARGUMENT)
            text = ctypes.create_string_buffer(UUID_BUFFER)
            if self.lib.nvmlDeviceGetUUID(mig, text, UUID_BUFFER) == SUCCESS:
                found.append(text.value.decode())
        return found


@functools.cache
def _nvml(path: str) -> _Nvml | None:
    try:
        return _Nvml(path)
    except (OSError, AttributeError):
        return None  # not loadable, or an NVML too old for MIG: nothing to compare with


def nvml_partition_reader(library: str) -> PartitionReader | None:
    """The MIG devices the NVML at ``library`` lists for a device, by its uuid."""
    if _nvml(library) is None:
        return None

    def reader(device: Device) -> Collection[str] | None:
        nvml = _nvml(library)
        return nvml.mig_uuids(device.uuid) if nvml is not None else None

    return reader
