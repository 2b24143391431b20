"""``libcndev.so`` through cffi's ABI mode: finding the library, the declarations, error codes.

Only the entry points hami-devices needs are declared, with the signatures and
struct layouts of Cambricon's ``cndev.h`` (``native/include/hami_cndev_api.h``
holds the same declarations for the C side; tests pin both layouts).  Every
CNDev struct starts with an API ``version`` that the caller sets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cffi import FFI

from hami_devices.errors import VendorLibraryError
from hami_devices.vendor_library import LibraryLoader

VENDOR = "cambricon"
LIBRARY_ENV = "HAMI_CNDEV_LIBRARY"
LIBRARY_NAME = "libcndev.so"
DEFAULT_NEUWARE = "/usr/local/neuware"

CDEF = """
typedef int32_t cndevDevice_t;
typedef int32_t cndevMluInstance_t;
typedef int cndevRet_t;

typedef struct { int version; unsigned number; } cndevCardInfo_t;
typedef struct { int version; uint8_t uuid[37]; uint64_t ncsUUID64; } cndevUUID_t;
typedef struct {
    int version;
    int64_t physicalMemoryTotal;
    int64_t physicalMemoryUsed;
    int64_t virtualMemoryTotal;
    int64_t virtualMemoryUsed;
    int64_t channelNumber;
    int64_t channelMemoryUsed[20];
    uint64_t globalMemory;
} cndevMemoryInfo_t;
typedef struct {
    int version;
    int usage;
    int cap;
    int usageDecimal;
    int machine;
    int capDecimal;
    uint16_t thermalDesignPower;
    uint16_t instantaneousPowerUsage;
    uint16_t instantaneousPowerUsageDecimal;
} cndevPowerInfo_t;
typedef struct {
    int version;
    int board;
    int cluster[20];
    int memoryDie[8];
    int chip;
    int airInlet;
    int airOutlet;
    int memory;
    int videoInput;
    int cpu;
    int isp;
} cndevTemperatureInfo_t;
typedef struct { int version; int averageCoreUtilization; int coreUtilization[80]; } cndevUtilizationInfo_t;
typedef struct { int version; int count; } cndevCardCoreCount_t;
typedef struct {
    int version;
    unsigned int subsystemId;
    unsigned int deviceId;
    uint16_t vendor;
    uint16_t subsystemVendor;
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int function;
    const char *physicalSlot;
    int slotID;
} cndevPCIeInfo_t;
typedef struct { int version; int health; int deviceState; int driverState; } cndevCardHealthState_t;
typedef struct { int version; int32_t nodeId; } cndevNUMANodeId_t;
typedef struct { int version; int isActive; int serdesState; int cableState; } cndevMLULinkStatus_t;
typedef struct { int version; int smluMode; } cndevSMLUMode_t;
typedef struct { int version; uint32_t mluQuota; uint64_t memorySize; } cndevSMluSet_t;
typedef struct {
    int version;
    int profileId;
    int instanceId;
    uint8_t uuid[37];
    int domain;
    int bus;
    int device;
    int function;
    char profileName[100];
    char instanceName[100];
    char devNodeName[100];
    uint32_t mluQuota[2];
    uint64_t memorySize[2];
    unsigned int reserved[128];
} cndevSMluInfo_t;
typedef struct { int version; int count; int profileId[128]; } cndevSMluProfileIdInfo_t;
typedef struct {
    int version;
    int profileId;
    char name[100];
    uint32_t totalCapacity;
    uint32_t remainCapacity;
    uint32_t mluQuota[2];
    uint64_t memorySize[2];
} cndevSMluProfileInfo_t;

/* MHz; later drivers append fields after boardFreqArange */
typedef struct {
    int version;
    int boardFreq;          /* the MLU's (IPU) operating frequency */
    int ddrFreq;            /* its memory's */
    uint8_t overtempDfsFlag;
    uint8_t fastDfsFlag;
    uint16_t mluClusterFreqCount;
    uint16_t mluClusterFreq[20];
    int boardDefaultFreq;
    int boardFreqArange[2];
} cndevFrequencyInfo_t;

/* counts since the driver loaded */
typedef struct {
    int version;
    uint64_t oneBitError;
    uint64_t multipleOneError;
    uint64_t multipleError;
    uint64_t multipleMultipleError;
    uint64_t correctedError;
    uint64_t uncorrectedError;
    uint64_t totalError;
    uint64_t addressForbiddenError;
} cndevECCInfo_t;

/* bytes moved over PCIe in the last 20 ms */
typedef struct {
    int version;
    int64_t pcieRead;
    int64_t pcieWrite;
} cndevPCIethroughput_t;
cndevRet_t cndevGetFrequencyInfo(cndevFrequencyInfo_t *freqInfo, cndevDevice_t device);
cndevRet_t cndevGetECCInfo(cndevECCInfo_t *eccInfo, cndevDevice_t device);
cndevRet_t cndevGetPCIethroughput(cndevPCIethroughput_t *pciethroughput, cndevDevice_t device);
cndevRet_t cndevInit(int reserved);
cndevRet_t cndevRelease(void);
const char *cndevGetErrorString(cndevRet_t errorId);
cndevRet_t cndevGetDeviceCount(cndevCardInfo_t *cardNum);
cndevRet_t cndevGetDeviceHandleByIndex(int index, cndevDevice_t *handle);
cndevRet_t cndevGetUUID(cndevUUID_t *uuidInfo, cndevDevice_t device);
const char *cndevGetCardNameStringByDevId(cndevDevice_t device);
cndevRet_t cndevGetPCIeInfo(cndevPCIeInfo_t *deviceInfo, cndevDevice_t device);
cndevRet_t cndevGetMemoryUsage(cndevMemoryInfo_t *memInfo, cndevDevice_t device);
cndevRet_t cndevGetCardHealthState(cndevCardHealthState_t *cardHealthState, cndevDevice_t device);
cndevRet_t cndevGetNUMANodeIdByDevId(cndevNUMANodeId_t *numaNodeId, cndevDevice_t device);
int cndevGetMLULinkPortNumber(cndevDevice_t device);
cndevRet_t cndevGetMLULinkStatus(cndevMLULinkStatus_t *status, cndevDevice_t device, int link);
cndevRet_t cndevGetDeviceUtilizationInfo(cndevUtilizationInfo_t *utilInfo, cndevDevice_t device);
cndevRet_t cndevGetTemperatureInfo(cndevTemperatureInfo_t *tempInfo, cndevDevice_t device);
cndevRet_t cndevGetPowerInfo(cndevPowerInfo_t *powerInfo, cndevDevice_t device);
cndevRet_t cndevGetCardCoreCount(cndevCardCoreCount_t *cardCoreCount, cndevDevice_t device);
cndevRet_t cndevGetSMLUMode(cndevSMLUMode_t *mode, cndevDevice_t device);
cndevRet_t cndevCreateSMluProfileInfo(cndevSMluSet_t *profileInfo, int *profileId, cndevDevice_t device);
cndevRet_t cndevDestroySMluProfileInfo(int profileId, cndevDevice_t device);
cndevRet_t cndevGetSMluProfileIdInfo(cndevSMluProfileIdInfo_t *profileId, cndevDevice_t device);
cndevRet_t cndevGetSMluProfileInfo(cndevSMluProfileInfo_t *profileInfo, int profile, cndevDevice_t device);
cndevRet_t cndevCreateSMluInstanceByProfileId(cndevMluInstance_t *miHandle, unsigned int profileId,
                                              cndevDevice_t device, char *instanceName);
cndevRet_t cndevDestroySMluInstanceByHandle(cndevMluInstance_t miHandle);
cndevRet_t cndevGetAllSMluInstanceInfo(int *count, cndevSMluInfo_t *smluInfo, cndevDevice_t device);
"""

CNDEV_SUCCESS = 0
API_VERSION = 5
"""CNDEV_VERSION_5: understood by current drivers, and by older ones than version 6."""
ERROR_NAMES: dict[int, str] = {
    1: "CNDEV_ERROR_NO_DRIVER",
    2: "CNDEV_ERROR_LOW_DRIVER_VERSION",
    3: "CNDEV_ERROR_UNSUPPORTED_API_VERSION",
    4: "CNDEV_ERROR_UNINITIALIZED",
    5: "CNDEV_ERROR_INVALID_ARGUMENT",
    6: "CNDEV_ERROR_INVALID_DEVICE_ID",
    7: "CNDEV_ERROR_UNKNOWN",
    8: "CNDEV_ERROR_MALLOC",
    9: "CNDEV_ERROR_INSUFFICIENT_SPACE",
    10: "CNDEV_ERROR_NOT_SUPPORTED",
    11: "CNDEV_ERROR_INVALID_LINK",
    12: "CNDEV_ERROR_NO_DEVICES",
    13: "CNDEV_ERROR_NO_PERMISSION",
    14: "CNDEV_ERROR_NOT_FOUND",
    15: "CNDEV_ERROR_IN_USE",
    16: "CNDEV_ERROR_DUPLICATE",
    17: "CNDEV_ERROR_TIMEOUT",
    18: "CNDEV_ERROR_IN_PROBLEM",
}
NOT_SUPPORTED = 10
DEVICE_LOST = (18,)
"""CNDEV_ERROR_IN_PROBLEM: the MLU itself is in trouble and stopped answering."""
INSUFFICIENT_SPACE = 9
NOT_FOUND = 14
DUPLICATE = 16
HEALTH_GOOD = 1
DRIVER_RUNNING = 4
MIB = 1024 * 1024

ffi = FFI()
ffi.cdef(CDEF)


def device_lost(exc: VendorLibraryError) -> bool:
    """Whether a failed call says the MLU itself is gone, not that this one call failed."""
    return exc.code in DEVICE_LOST


def _text(data: Any) -> str:
    return bytes(ffi.string(data)).decode("utf-8", "replace").strip()


@dataclass(frozen=True)
class Health:
    good: bool
    detail: str


@dataclass(frozen=True)
class SmluProfile:
    profile_id: int
    name: str
    quota: int
    memory_mib: int
    total_capacity: int
    remain_capacity: int


@dataclass(frozen=True)
class SmluInstance:
    instance_id: int
    profile_id: int
    uuid: str
    name: str
    quota: int
    memory_mib: int
    dev_node: str


class Cndev:
    """One loaded libcndev, initialised once; every call checks its return code."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lib: Any = ffi.dlopen(path)
        self._check("cndevInit", self.lib.cndevInit(0))

    # -- plumbing ------------------------------------------------------------
    def _check(self, function: str, code: int) -> None:
        if code != CNDEV_SUCCESS:
            message = ERROR_NAMES.get(code, "unknown CNDev error")
            raise VendorLibraryError(VENDOR, function, code, message)

    def _call(self, function: str, *args: Any) -> None:
        self._check(function, getattr(self.lib, function)(*args))

    @staticmethod
    def _new(ctype: str) -> Any:
        value = ffi.new(f"{ctype} *")
        value.version = API_VERSION
        return value

    # -- enumeration -----------------------------------------------------------
    def device_count(self) -> int:
        info = self._new("cndevCardInfo_t")
        self._call("cndevGetDeviceCount", info)
        return int(info.number)

    def handle(self, index: int) -> int:
        out = ffi.new("cndevDevice_t *")
        self._call("cndevGetDeviceHandleByIndex", index, out)
        return int(out[0])

    def uuid(self, device: int) -> str:
        info = self._new("cndevUUID_t")
        self._call("cndevGetUUID", info, device)
        return _text(info.uuid)

    def card_name(self, device: int) -> str:
        name = self.lib.cndevGetCardNameStringByDevId(device)
        return _text(name) if name != ffi.NULL else ""

    def pci_bus_id(self, device: int) -> str:
        info = self._new("cndevPCIeInfo_t")
        self._call("cndevGetPCIeInfo", info, device)
        return f"{info.domain:04x}:{info.bus:02x}:{info.device:02x}.{info.function:x}"

    def memory_mb(self, device: int) -> tuple[int, int]:
        """(total, used) physical memory in MB."""
        info = self._new("cndevMemoryInfo_t")
        self._call("cndevGetMemoryUsage", info, device)
        return int(info.physicalMemoryTotal), int(info.physicalMemoryUsed)

    def health(self, device: int) -> Health:
        info = self._new("cndevCardHealthState_t")
        self._call("cndevGetCardHealthState", info, device)
        good = info.health == HEALTH_GOOD and info.deviceState == HEALTH_GOOD
        running = info.driverState == DRIVER_RUNNING
        detail = f"health {info.health}, device state {info.deviceState}, driver state {info.driverState}"
        return Health(good and running, detail)

    def numa_node(self, device: int) -> int | None:
        info = self._new("cndevNUMANodeId_t")
        self._call("cndevGetNUMANodeIdByDevId", info, device)
        return int(info.nodeId) if info.nodeId >= 0 else None

    def mlulink_ports(self, device: int) -> int:
        return max(0, int(self.lib.cndevGetMLULinkPortNumber(device)))

    def mlulink_active(self, device: int, port: int) -> bool:
        status = self._new("cndevMLULinkStatus_t")
        self._call("cndevGetMLULinkStatus", status, device, port)
        return bool(status.isActive)

    def core_count(self, device: int) -> int:
        info = self._new("cndevCardCoreCount_t")
        self._call("cndevGetCardCoreCount", info, device)
        return int(info.count)

    # -- monitoring ------------------------------------------------------------
    def utilization(self, device: int) -> int:
        info = self._new("cndevUtilizationInfo_t")
        self._call("cndevGetDeviceUtilizationInfo", info, device)
        return int(info.averageCoreUtilization)

    def temperature(self, device: int) -> int:
        info = self._new("cndevTemperatureInfo_t")
        self._call("cndevGetTemperatureInfo", info, device)
        return int(info.chip)

    def power_watts(self, device: int) -> float:
        info = self._new("cndevPowerInfo_t")
        self._call("cndevGetPowerInfo", info, device)
        return float(info.usage)

    def memory_temperature(self, device: int) -> int:
        info = self._new("cndevTemperatureInfo_t")
        self._call("cndevGetTemperatureInfo", info, device)
        return int(info.memory)

    def clocks_mhz(self, device: int) -> tuple[int, int]:
        """(the MLU's operating frequency, its memory's)."""
        info = self._new("cndevFrequencyInfo_t")
        self._call("cndevGetFrequencyInfo", info, device)
        return int(info.boardFreq), int(info.ddrFreq)

    def ecc(self, device: int) -> tuple[int, int]:
        """(corrected, uncorrected) ECC errors since the driver loaded."""
        info = self._new("cndevECCInfo_t")
        self._call("cndevGetECCInfo", info, device)
        return int(info.correctedError), int(info.uncorrectedError)

    def pcie_bytes_per_s(self, device: int) -> tuple[float, float]:
        """(read, written) over PCIe: CNDev counts bytes in the last 20 ms."""
        info = self._new("cndevPCIethroughput_t")
        self._call("cndevGetPCIethroughput", info, device)
        return int(info.pcieRead) * 50.0, int(info.pcieWrite) * 50.0

    # -- sMLU --------------------------------------------------------------------
    def smlu_enabled(self, device: int) -> bool:
        mode = self._new("cndevSMLUMode_t")
        code = self.lib.cndevGetSMLUMode(mode, device)
        if code == NOT_SUPPORTED:
            return False
        self._check("cndevGetSMLUMode", code)
        return bool(mode.smluMode)

    def smlu_profiles(self, device: int) -> list[SmluProfile]:
        ids = self._new("cndevSMluProfileIdInfo_t")
        self._call("cndevGetSMluProfileIdInfo", ids, device)
        out = []
        for i in range(min(int(ids.count), 128)):
            info = self._new("cndevSMluProfileInfo_t")
            self._call("cndevGetSMluProfileInfo", info, int(ids.profileId[i]), device)
            out.append(
                SmluProfile(
                    int(info.profileId),
                    _text(info.name),
                    int(info.mluQuota[0]),
                    int(info.memorySize[0]) // MIB,
                    int(info.totalCapacity),
                    int(info.remainCapacity),
                )
            )
        return out

    def create_smlu_profile(self, device: int, quota: int, memory_mib: int) -> int:
        spec = self._new("cndevSMluSet_t")
        spec.mluQuota = quota
        spec.memorySize = memory_mib * MIB
        out = ffi.new("int *")
        self._call("cndevCreateSMluProfileInfo", spec, out, device)
        return int(out[0])

    def destroy_smlu_profile(self, device: int, profile_id: int) -> None:
        self._call("cndevDestroySMluProfileInfo", profile_id, device)

    def create_smlu_instance(self, device: int, profile_id: int, name: str) -> int:
        handle = ffi.new("cndevMluInstance_t *")
        self._call("cndevCreateSMluInstanceByProfileId", handle, profile_id, device, ffi.new("char[]", name.encode()))
        return int(handle[0])

    def destroy_smlu_instance(self, handle: int) -> None:
        self._call("cndevDestroySMluInstanceByHandle", handle)

    def smlu_instances(self, device: int) -> list[SmluInstance]:
        capacity = 16
        while True:
            count = ffi.new("int *", capacity)
            infos = ffi.new("cndevSMluInfo_t[]", capacity)
            for i in range(capacity):
                infos[i].version = API_VERSION
            code = self.lib.cndevGetAllSMluInstanceInfo(count, infos, device)
            if code == INSUFFICIENT_SPACE and count[0] > capacity:
                capacity = int(count[0])
                continue
            self._check("cndevGetAllSMluInstanceInfo", code)
            return [
                SmluInstance(
                    int(infos[i].instanceId),
                    int(infos[i].profileId),
                    _text(infos[i].uuid),
                    _text(infos[i].instanceName),
                    int(infos[i].mluQuota[0]),
                    int(infos[i].memorySize[0]) // MIB,
                    _text(infos[i].devNodeName),
                )
                for i in range(count[0])
            ]


def _installed() -> list[str]:
    """Where the Neuware toolkit installs the library; an override comes first."""
    homes = [os.environ.get("NEUWARE_HOME", ""), DEFAULT_NEUWARE]
    dirs = [str(Path(h) / sub) for h in homes if h for sub in ("lib64", "lib")]
    return [str(Path(d) / LIBRARY_NAME) for d in dict.fromkeys(dirs)]


_LOADER = LibraryLoader(LIBRARY_NAME, LIBRARY_ENV, _installed, Cndev)
candidates = _LOADER.candidates
load = _LOADER.load
