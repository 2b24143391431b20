"""The NVIDIA kernel module's version, to compare with the user-space driver NVML reports.

After a driver upgrade without a reboot, or with a container that mounts another release's
``libnvidia-ml.so``, the two differ and NVML fails with "Driver/library version mismatch" (or, worse,
half works).  ``/proc/driver/nvidia/version`` names the loaded kernel module's release.
"""

from __future__ import annotations

import re
from pathlib import Path

VERSION_FILE = Path("/proc/driver/nvidia/version")

# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar ..." (proprietary) or
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build ..." (open)
_RELEASE = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def kernel_module_version(path: Path = VERSION_FILE) -> str | None:
    """The loaded kernel module's release, or None when this node does not say (no module, no /proc)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    found = _RELEASE.search(text)
    return found.group(1) if found else None


def agreement(library_version: str, kernel_version: str | None) -> tuple[bool, str] | None:
    """Whether the user-space driver (NVML's ``nvmlSystemGetDriverVersion``) is the kernel module's release."""
    if kernel_version is None:
        return None
    if library_version.strip() == kernel_version:
        return True, f"NVML driver {library_version} is the loaded kernel module's release"
    return False, (
        f"NVML reports driver {library_version} but the loaded kernel module is {kernel_version}: "
        "user-space and kernel parts of the driver differ"
    )
