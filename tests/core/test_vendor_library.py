"""The one vendor-library loader every cffi binding uses (hami_devices.vendor_library)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from hami_devices.errors import VendorLibraryError
from hami_devices.limiter import fake_library
from hami_devices.vendor_library import LibraryLoader


def test_an_override_is_the_only_candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loader = LibraryLoader("libx.so", "HAMI_TEST_X_LIBRARY", lambda: ["/opt/x/libx.so"], ctypes.CDLL)
    assert loader.candidates() == ["/opt/x/libx.so", "libx.so"]
    monkeypatch.setenv("HAMI_TEST_X_LIBRARY", str(tmp_path / "missing.so"))
    assert loader.candidates() == [str(tmp_path / "missing.so")]
    with pytest.raises(OSError, match=r"libx.so not loadable \(.*missing.so: not found\)"):
        loader.load()


def test_the_first_path_that_opens_is_kept_for_the_process(tmp_path: Path) -> None:
    not_a_library = tmp_path / "libdcmi.so"
    not_a_library.write_text("not an ELF file")
    dcmi = fake_library("dcmi/libdcmi.so")  # the real fake DCMI, opened by the dynamic loader
    search = [str(tmp_path / "absent" / "libdcmi.so"), str(not_a_library), str(dcmi)]
    loader = LibraryLoader("libdcmi.so", "HAMI_TEST_UNSET_LIBRARY", lambda: search, ctypes.CDLL)
    first = loader.load()
    assert first._name == str(dcmi) and loader.load() is first


def test_a_library_that_opens_but_will_not_initialise_ends_the_search() -> None:
    def broken(path: str) -> ctypes.CDLL:
        raise VendorLibraryError("x", "xInit", 7, "unknown error")

    loader = LibraryLoader("libx.so", "HAMI_TEST_UNSET_LIBRARY", lambda: [], broken)
    with pytest.raises(VendorLibraryError, match="xInit failed with code 7"):
        loader.load()
