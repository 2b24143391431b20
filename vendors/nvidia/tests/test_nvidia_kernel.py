"""Reading the loaded kernel module's release, and comparing it with the driver NVML reports."""

from __future__ import annotations

from pathlib import Path

from hami_nvidia.kernel import agreement, kernel_module_version

PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:15 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build  (dvs-builder@U16)\n"


def test_both_kernel_module_flavours_are_read(tmp_path: Path) -> None:
    for text, release in ((PROPRIETARY, "535.161.08"), (OPEN, "550.54.14")):
        (tmp_path / "version").write_text(text)
        assert kernel_module_version(tmp_path / "version") == release
    assert kernel_module_version(tmp_path / "absent") is None


def test_a_library_of_another_release_disagrees() -> None:
    assert agreement("535.161.08", None) is None  # no module to compare with: cannot tell
    ok, why = agreement("535.161.08", "535.161.08") or (False, "")
    assert ok and "535.161.08" in why
    ok, why = agreement("550.54.14", "535.161.08") or (True, "")
    assert not ok and "550.54.14" in why and "535.161.08" in why
