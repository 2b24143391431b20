"""NVML through nvidia-ml-py (module ``pynvml``): loading, errors, and per-symbol fallbacks.

Library location: pynvml opens ``libnvidia-ml.so.1`` by SONAME, as NVML users
expect.  ``HAMI_NVML_LIBRARY=/path/to/libnvidia-ml.so.1`` names another file
(containers often mount the driver elsewhere): it is opened by path and
installed as pynvml's library handle before ``nvmlInit``.  pynvml keeps one
library per process, so the first one opened wins.

Every failing call becomes ``VendorLibraryError`` carrying NVML's own return
code.  Queries a driver cannot answer (``NVML_ERROR_NOT_SUPPORTED``, or a symbol
the driver lacks) read as ``NOT_AVAILABLE``; a newer symbol falls back to the
older one (``_v3`` -> ``_v2`` -> v1), and the version that served is recorded.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from hami_devices.errors import VendorLibraryError
from hami_devices.models import NOT_AVAILABLE, NotAvailable

LIBRARY_ENV = "HAMI_NVML_LIBRARY"
DEFAULT_LIBRARY = "libnvidia-ml.so.1"
VENDOR = "nvidia"
MIB = 1024 * 1024

T = TypeVar("T")

# Codes that mean "this driver cannot say", not "this device is broken".
UNAVAILABLE_CODES = frozenset(
    {pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_NO_PERMISSION}
)
# Codes that mean the device itself has failed.
DEVICE_FAILED_CODES = frozenset(
    {pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED, pynvml.NVML_ERROR_CORRUPTED_INFOROM}
)


class ProcessInfoV1(ctypes.Structure):
    """``nvmlProcessInfo_v1_t`` (pid, usedGpuMemory), filled by the unversioned process query."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class NvmlError(VendorLibraryError):
    """An NVML call failed; ``code`` is NVML's return code."""

    @property
    def device_failed(self) -> bool:
        return self.code in DEVICE_FAILED_CODES

    @property
    def unavailable(self) -> bool:
        return self.code in UNAVAILABLE_CODES


def _error(function: str, exc: pynvml.NVMLError) -> NvmlError:
    code = int(getattr(exc, "value", pynvml.NVML_ERROR_UNKNOWN))
    try:
        text = str(exc)
    except Exception:  # pynvml's __str__ calls back into the library
        text = "NVML error"
    return NvmlError(VENDOR, function, code, text)


def call(function: str, *args: Any, **kwargs: Any) -> Any:
    """``pynvml.<function>(*args)`` with NVML errors as ``NvmlError``."""
    try:
        return getattr(pynvml, function)(*args, **kwargs)
    except pynvml.NVMLError as exc:
        raise _error(function, exc) from None


def raw(symbol: str, *args: Any) -> None:
    """Call an NVML symbol pynvml has no wrapper for (older versions), through pynvml's handle."""
    try:
        fn = pynvml._nvmlGetFunctionPointer(symbol)
        ret = fn(*args)
        pynvml._nvmlCheckReturn(ret)
    except pynvml.NVMLError as exc:
        raise _error(symbol, exc) from None


def optional(fn: Callable[[], T]) -> T | NotAvailable:
    """The reading, or ``NOT_AVAILABLE`` where the driver cannot give it (never 0)."""
    try:
        return fn()
    except NvmlError as exc:
        if exc.unavailable:
            return NOT_AVAILABLE
        raise


def symbol_present(symbol: str) -> bool:
    try:
        pynvml._nvmlGetFunctionPointer(symbol)
    except pynvml.NVMLError:
        return False
    return True


def first_of(function: str, attempts: list[tuple[str, Callable[[], T]]], served: dict[str, str]) -> T:
    """Try each (version, call) in order; a missing symbol falls through to the next."""
    last: NvmlError | None = None
    for version, attempt in attempts:
        try:
            value = attempt()
        except NvmlError as exc:
            if exc.code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                last = exc
                continue
            raise
        served[function] = version
        return value
    assert last is not None
    raise last


@dataclass
class MemoryInfo:
    total_mib: int
    used_mib: float
    reserved_mib: float | NotAvailable


@dataclass
class PciInfo:
    bus_id: str
    device_id: int


@dataclass
class ProcessInfo:
    pid: int
    used_mib: float | NotAvailable


@dataclass
class Session:
    """The NVML library this process uses, initialised once."""

    library: str
    driver_version: str
    served: dict[str, str] = field(default_factory=dict)

    # -- per-device queries, with fallbacks --------------------------------
    def memory(self, handle: Any) -> MemoryInfo:
        def v2() -> MemoryInfo:
            m = call("nvmlDeviceGetMemoryInfo", handle, version=pynvml.nvmlMemory_v2)
            return MemoryInfo(m.total // MIB, m.used / MIB, m.reserved / MIB)

        def v1() -> MemoryInfo:
            m = call("nvmlDeviceGetMemoryInfo", handle)
            return MemoryInfo(m.total // MIB, m.used / MIB, NOT_AVAILABLE)

        try:
            return first_of("memory", [("v2", v2), ("v1", v1)], self.served)
        except NvmlError as exc:
            if exc.code != pynvml.NVML_ERROR_NOT_SUPPORTED:
                raise
            self.served["memory"] = "v1"
            return v1()

    def pci(self, handle: Any) -> PciInfo:
        def v3() -> PciInfo:
            p = call("nvmlDeviceGetPciInfo_v3", handle)
            return PciInfo(_text(p.busId), int(p.pciDeviceId))

        def legacy(symbol: str) -> Callable[[], PciInfo]:
            def query() -> PciInfo:
                p = pynvml.nvmlPciInfo_v2_t()
                raw(symbol, handle, ctypes.byref(p))
                return PciInfo(_text(p.busId), int(p.pciDeviceId))

            return query

        return first_of(
            "pci",
            [("v3", v3), ("v2", legacy("nvmlDeviceGetPciInfo_v2")), ("v1", legacy("nvmlDeviceGetPciInfo"))],
            self.served,
        )

    def processes(self, handle: Any) -> list[ProcessInfo]:
        def versioned(function: str) -> Callable[[], list[ProcessInfo]]:
            def query() -> list[ProcessInfo]:
                return [
                    ProcessInfo(int(p.pid), NOT_AVAILABLE if p.usedGpuMemory is None else p.usedGpuMemory / MIB)
                    for p in call(function, handle)
                ]

            return query

        def v1() -> list[ProcessInfo]:
            count = ctypes.c_uint(0)
            try:
                raw("nvmlDeviceGetComputeRunningProcesses", handle, ctypes.byref(count), None)
                return []
            except NvmlError as exc:
                if exc.code != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
                    raise
            size = count.value * 2 + 5
            infos = (ProcessInfoV1 * size)()
            count.value = size
            raw("nvmlDeviceGetComputeRunningProcesses", handle, ctypes.byref(count), infos)
            not_available = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
            return [
                ProcessInfo(
                    int(infos[i].pid),
                    NOT_AVAILABLE if infos[i].usedGpuMemory == not_available else infos[i].usedGpuMemory / MIB,
                )
                for i in range(count.value)
            ]

        return first_of(
            "processes",
            [
                ("v3", versioned("nvmlDeviceGetComputeRunningProcesses_v3")),
                ("v2", versioned("nvmlDeviceGetComputeRunningProcesses_v2")),
                ("v1", v1),
            ],
            self.served,
        )

    def nvlink_remote_bus_id(self, handle: Any, link: int) -> str:
        def v2() -> str:
            return _text(call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link).busId)

        def v1() -> str:
            p = pynvml.nvmlPciInfo_v2_t()
            raw("nvmlDeviceGetNvLinkRemotePciInfo", handle, link, ctypes.byref(p))
            return _text(p.busId)

        return first_of("nvlink_remote_pci", [("v2", v2), ("v1", v1)], self.served)

    def gpu_instance_profile(self, handle: Any, index: int) -> Any:
        def v2() -> Any:
            return call("nvmlDeviceGetGpuInstanceProfileInfo", handle, index, version=2)

        def v1() -> Any:
            return call("nvmlDeviceGetGpuInstanceProfileInfo", handle, index, version=1)

        return first_of("gpu_instance_profile", [("v2", v2), ("v1", v1)], self.served)


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def normalize_bus_id(bus_id: str) -> str:
    """``0000:18:00.0`` (legacy) and ``00000000:18:00.0`` name the same function: use the long form."""
    text = bus_id.strip().upper()
    parts = text.split(":")
    if len(parts) != 3:
        return text
    try:
        return f"{int(parts[0], 16):08X}:{parts[1]}:{parts[2]}"
    except ValueError:
        return text


_lock = threading.Lock()
_session: Session | None = None
_failure: NvmlError | None = None


def requested_library() -> str:
    return os.environ.get(LIBRARY_ENV) or DEFAULT_LIBRARY


def _install_library(path: str) -> str:
    """Make pynvml use ``path``; returns the library pynvml ends up with."""
    with pynvml.libLoadLock:
        if pynvml.nvmlLib is None and os.environ.get(LIBRARY_ENV):
            try:
                pynvml.nvmlLib = ctypes.CDLL(path)
            except OSError as exc:
                raise NvmlError(
                    VENDOR, "dlopen", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, f"{path}: {exc}"
                ) from None
            pynvml._nvmlGetFunctionPointer_cache.clear()
        lib = pynvml.nvmlLib
    return str(getattr(lib, "_name", path)) if lib is not None else path


def _init() -> None:
    try:
        pynvml.nvmlInitWithFlags(0)
        return
    except pynvml.NVMLError as exc:
        if getattr(exc, "value", None) != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            raise _error("nvmlInitWithFlags", exc) from None
    raw("nvmlInit_v2")  # drivers before nvmlInitWithFlags


def session() -> Session:
    """The process-wide NVML session, opened on first use.  Raises ``NvmlError``."""
    global _session, _failure
    with _lock:
        if _session is not None:
            return _session
        if _failure is not None:
            raise _failure
        path = requested_library()
        try:
            library = _install_library(path)
            _init()
            driver = call("nvmlSystemGetDriverVersion")
        except NvmlError as exc:
            _failure = exc
            raise
        _session = Session(library=library, driver_version=_text(driver))
        return _session


def reset_failure() -> None:
    """Forget a failed open, so that the next ``session()`` tries again."""
    global _failure
    with _lock:
        _failure = None
