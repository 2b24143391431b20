"""``libdcmi.so`` through cffi's ABI mode: finding the library, the declarations, error codes.

Only the entry points hami-devices needs are declared, with the signatures and
struct layouts of Huawei's ``dcmi_interface_api.h`` (``native/include/hami_dcmi_api.h``
holds the same declarations for the C side; tests pin both layouts).  Enum
parameters are declared as ``int``, which is what they are in the ABI.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cffi import FFI

from hami_devices.errors import VendorLibraryError
from hami_devices.vendor_library import LibraryLoader

VENDOR = "ascend"
LIBRARY_ENV = "HAMI_DCMI_LIBRARY"
LIBRARY_NAME = "libdcmi.so"
SEARCH_DIRS = (
    "/usr/local/Ascend/driver/lib64/driver",
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/lib64/common",
    "/usr/local/dcmi",
    "/usr/lib64",
    "/usr/lib",
)

CDEF = """
struct dcmi_chip_info {
    unsigned char chip_type[32];
    unsigned char chip_name[32];
    unsigned char chip_ver[32];
    unsigned int aicore_cnt;
};
struct dcmi_pcie_info_all {
    unsigned int venderid;
    unsigned int subvenderid;
    unsigned int deviceid;
    unsigned int subdeviceid;
    int domain;
    unsigned int bdf_busid;
    unsigned int bdf_deviceid;
    unsigned int bdf_funcid;
    unsigned char reserve[32];
};
struct dcmi_die_id {
    unsigned int soc_die[5];
};
struct dcmi_ecc_info {
    int enable_flag;
    unsigned int single_bit_error_cnt;
    unsigned int double_bit_error_cnt;
    unsigned int total_single_bit_error_cnt;
    unsigned int total_double_bit_error_cnt;
    unsigned int single_bit_isolated_pages_cnt;
    unsigned int double_bit_isolated_pages_cnt;
    unsigned int reserved[8];
};
struct dcmi_hbm_info {
    unsigned long long memory_size;
    unsigned int freq;
    unsigned long long memory_usage;
    int temp;
    unsigned int bandwith_util_rate;
};
struct dcmi_get_memory_info_stru {
    unsigned long long memory_size;
    unsigned long long memory_available;
    unsigned int freq;
    unsigned long hugepagesize;
    unsigned long hugepages_total;
    unsigned long hugepages_free;
    unsigned int utiliza;
    unsigned char reserve[60];
};
struct dcmi_base_resource {
    unsigned long long token;
    unsigned long long token_max;
    unsigned long long task_timeout;
    unsigned int vfg_id;
    unsigned char vip_mode;
    unsigned char reserved[31];
};
struct dcmi_computing_resource {
    float aic;
    float aiv;
    unsigned short dsa;
    unsigned short rtsq;
    unsigned short acsq;
    unsigned short cdqm;
    unsigned short c_core;
    unsigned short ffts;
    unsigned short sdma;
    unsigned short pcie_dma;
    unsigned long long memory_size;
    unsigned int event_id;
    unsigned int notify_id;
    unsigned int stream_id;
    unsigned int model_id;
    unsigned short topic_schedule_aicpu;
    unsigned short host_ctrl_cpu;
    unsigned short host_aicpu;
    unsigned short device_aicpu;
    unsigned short topic_ctrl_cpu_slot;
    unsigned int vdev_aicore_utilization;
    unsigned long long vdev_memory_total;
    unsigned long long vdev_memory_free;
    unsigned char reserved[12];
};
struct dcmi_media_resource {
    float jpegd;
    float jpege;
    float vpc;
    float vdec;
    float pngd;
    float venc;
    unsigned char reserved[32];
};
struct dcmi_create_vdev_out {
    unsigned int vdev_id;
    unsigned int pcie_bus;
    unsigned int pcie_device;
    unsigned int pcie_func;
    unsigned int vfg_id;
    unsigned char reserved[32];
};
struct dcmi_create_vdev_res_stru {
    unsigned int vdev_id;
    unsigned int vfg_id;
    char template_name[32];
    unsigned char reserved[64];
};
struct dcmi_vdev_query_info {
    char name[16];
    unsigned int status;
    unsigned int is_container_used;
    unsigned int vfid;
    unsigned int vfg_id;
    unsigned long long container_id;
    struct dcmi_base_resource base;
    struct dcmi_computing_resource computing;
    struct dcmi_media_resource media;
};
struct dcmi_vdev_query_stru {
    unsigned int vdev_id;
    struct dcmi_vdev_query_info query_info;
};
struct dcmi_soc_total_resource {
    unsigned int vdev_num;
    unsigned int vdev_id[32];
    unsigned int vfg_num;
    unsigned int vfg_bitmap;
    struct dcmi_base_resource base;
    struct dcmi_computing_resource computing;
    struct dcmi_media_resource media;
};

int dcmi_init(void);
int dcmi_get_driver_version(char *driver_ver, unsigned int len);
int dcmi_get_card_list(int *card_num, int *card_list, int list_len);
int dcmi_get_device_num_in_card(int card_id, int *device_num);
int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id);
int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int *phyid);
int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info);
int dcmi_get_device_die_v2(int card_id, int device_id, int input_type, struct dcmi_die_id *die_id);
int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all *pcie_info);
int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info);
int dcmi_get_device_memory_info_v3(int card_id, int device_id, struct dcmi_get_memory_info_stru *memory_info);
int dcmi_get_device_health(int card_id, int device_id, unsigned int *health);
int dcmi_get_device_errorcode_v2(int card_id, int device_id, int *error_count, unsigned int *error_code_list,
                                 unsigned int list_len);
int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type, unsigned int *utilization_rate);
int dcmi_get_device_temperature(int card_id, int device_id, int *temperature);
int dcmi_get_device_power_info(int card_id, int device_id, int *power);
int dcmi_get_device_frequency(int card_id, int device_id, int input_type, unsigned int *frequency);
int dcmi_get_device_ecc_info(int card_id, int device_id, int input_type, struct dcmi_ecc_info *device_ecc_info);
int dcmi_get_device_info(int card_id, int device_id, int main_cmd, unsigned int sub_cmd, void *buf,
                         unsigned int *size);
int dcmi_create_vdevice(int card_id, int device_id, struct dcmi_create_vdev_res_stru *vdev,
                        struct dcmi_create_vdev_out *out);
int dcmi_set_destroy_vdevice(int card_id, int device_id, unsigned int vdevid);
"""

DCMI_OK = 0
ERROR_NAMES: dict[int, str] = {
    -8001: "DCMI_ERR_CODE_INVALID_PARAMETER",
    -8002: "DCMI_ERR_CODE_OPER_NOT_PERMITTED",
    -8003: "DCMI_ERR_CODE_MEM_OPERATE_FAIL",
    -8004: "DCMI_ERR_CODE_SECURE_FUN_FAIL",
    -8005: "DCMI_ERR_CODE_INNER_ERR",
    -8006: "DCMI_ERR_CODE_TIME_OUT",
    -8007: "DCMI_ERR_CODE_INVALID_DEVICE_ID",
    -8008: "DCMI_ERR_CODE_DEVICE_NOT_EXIST",
    -8009: "DCMI_ERR_CODE_IOCTL_FAIL",
    -8010: "DCMI_ERR_CODE_SEND_MSG_FAIL",
    -8011: "DCMI_ERR_CODE_RECV_MSG_FAIL",
    -8012: "DCMI_ERR_CODE_NOT_REDAY",
    -8013: "DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER",
    -8015: "DCMI_ERR_CODE_RESET_FAIL",
    -8016: "DCMI_ERR_CODE_ABORT_OPERATE",
    -8017: "DCMI_ERR_CODE_IS_UPGRADING",
    -8020: "DCMI_ERR_CODE_RESOURCE_OCCUPIED",
    -8023: "DCMI_ERR_CODE_CONFIG_INFO_NOT_EXIST",
    -8255: "DCMI_ERR_CODE_NOT_SUPPORT",
}
NOT_SUPPORTED = (-8255, -8013)
DEVICE_LOST = (-8008,)
"""DCMI_ERR_CODE_DEVICE_NOT_EXIST: the chip stopped answering (gone from the bus, or its driver lost it)."""


def device_lost(exc: VendorLibraryError) -> bool:
    """Whether a failed call says the chip itself is gone, not that this one call failed."""
    return exc.code in DEVICE_LOST

UTIL_AICORE = 2
UTIL_AICPU = 3
UTIL_HBM = 6
FREQ_AICORE_CURRENT = 7  # enum dcmi_freq_type
DEVICE_TYPE_DDR = 0  # enum dcmi_device_type: which memory's ECC
DEVICE_TYPE_HBM = 2
DIE_NDIE = 0
MAIN_CMD_VDEV_MNG = 52
VMNG_GET_VDEV_RESOURCE = 0
INVALID_DEVICE_ID = -8007  # DCMI_ERR_CODE_INVALID_DEVICE_ID: also a vdev id that does not (or no longer) exist
VMNG_GET_TOTAL_RESOURCE = 1
VDEV_ID_AUTO = 0xFFFFFFFF
MAX_CARDS = 64
MAX_ERROR_CODES = 128

ffi = FFI()
ffi.cdef(CDEF)


def _text(data: Any) -> str:
    return bytes(ffi.string(data)).decode("utf-8", "replace").strip()


@dataclass(frozen=True)
class ChipInfo:
    chip_type: str
    chip_name: str
    chip_version: str
    aicore_count: int


@dataclass(frozen=True)
class MemoryReading:
    total_mb: int
    used_mb: int
    kind: str  # "hbm" or "ddr"


@dataclass(frozen=True)
class HbmReading:
    clock_mhz: int
    temperature_c: int
    bandwidth_util_pct: int


@dataclass(frozen=True)
class EccReading:
    corrected: int  # single-bit
    uncorrected: int  # double-bit
    isolated_pages_single_bit: int
    isolated_pages_double_bit: int


@dataclass(frozen=True)
class VnpuInfo:
    vdev_id: int
    template: str
    aicore: float
    memory_mb: int


class Dcmi:
    """One loaded libdcmi, initialised once; every call checks its return code."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lib: Any = ffi.dlopen(path)
        self._check("dcmi_init", self.lib.dcmi_init())

    # -- plumbing ------------------------------------------------------------
    @staticmethod
    def _check(function: str, code: int) -> None:
        if code != DCMI_OK:
            raise VendorLibraryError(VENDOR, function, code, ERROR_NAMES.get(code, "unknown DCMI error"))

    def _call(self, function: str, *args: Any) -> None:
        self._check(function, getattr(self.lib, function)(*args))

    # -- enumeration -------------------------------------------------------
    def driver_version(self) -> str:
        buf = ffi.new("char[]", 64)
        self._call("dcmi_get_driver_version", buf, 64)
        return _text(buf)

    def card_list(self) -> list[int]:
        count = ffi.new("int *")
        cards = ffi.new("int[]", MAX_CARDS)
        self._call("dcmi_get_card_list", count, cards, MAX_CARDS)
        return [int(cards[i]) for i in range(count[0])]

    def device_count(self, card: int) -> int:
        count = ffi.new("int *")
        self._call("dcmi_get_device_num_in_card", card, count)
        return int(count[0])

    def logic_id(self, card: int, device: int) -> int:
        out = ffi.new("int *")
        self._call("dcmi_get_device_logic_id", out, card, device)
        return int(out[0])

    def phy_id(self, logic_id: int) -> int:
        out = ffi.new("unsigned int *")
        self._call("dcmi_get_device_phyid_from_logicid", logic_id, out)
        return int(out[0])

    def chip_info(self, card: int, device: int) -> ChipInfo:
        info = ffi.new("struct dcmi_chip_info *")
        self._call("dcmi_get_device_chip_info", card, device, info)
        return ChipInfo(_text(info.chip_type), _text(info.chip_name), _text(info.chip_ver), int(info.aicore_cnt))

    def die_id(self, card: int, device: int) -> str:
        die = ffi.new("struct dcmi_die_id *")
        self._call("dcmi_get_device_die_v2", card, device, DIE_NDIE, die)
        return "".join(f"{int(die.soc_die[i]):08X}" for i in range(5))

    def pci_bus_id(self, card: int, device: int) -> str:
        pcie = ffi.new("struct dcmi_pcie_info_all *")
        self._call("dcmi_get_device_pcie_info_v2", card, device, pcie)
        return f"{pcie.domain:04x}:{pcie.bdf_busid:02x}:{pcie.bdf_deviceid:02x}.{pcie.bdf_funcid:x}"

    def memory(self, card: int, device: int) -> MemoryReading:
        """HBM where the chip has it (910 series), else its DDR (310P)."""
        hbm = ffi.new("struct dcmi_hbm_info *")
        code = self.lib.dcmi_get_device_hbm_info(card, device, hbm)
        if code == DCMI_OK and hbm.memory_size > 0:
            return MemoryReading(int(hbm.memory_size), int(hbm.memory_usage), "hbm")
        if code not in (DCMI_OK, *NOT_SUPPORTED):
            self._check("dcmi_get_device_hbm_info", code)
        ddr = ffi.new("struct dcmi_get_memory_info_stru *")
        self._call("dcmi_get_device_memory_info_v3", card, device, ddr)
        total = int(ddr.memory_size)
        return MemoryReading(total, max(0, total - int(ddr.memory_available)), "ddr")

    def health(self, card: int, device: int) -> int:
        out = ffi.new("unsigned int *")
        self._call("dcmi_get_device_health", card, device, out)
        return int(out[0])

    def error_codes(self, card: int, device: int) -> list[int]:
        count = ffi.new("int *")
        codes = ffi.new("unsigned int[]", MAX_ERROR_CODES)
        self._call("dcmi_get_device_errorcode_v2", card, device, count, codes, MAX_ERROR_CODES)
        return [int(codes[i]) for i in range(count[0])]

    # -- monitoring ------------------------------------------------------------
    def utilization(self, card: int, device: int, kind: int) -> int:
        out = ffi.new("unsigned int *")
        self._call("dcmi_get_device_utilization_rate", card, device, kind, out)
        return int(out[0])

    def temperature(self, card: int, device: int) -> int:
        out = ffi.new("int *")
        self._call("dcmi_get_device_temperature", card, device, out)
        return int(out[0])

    def power_watts(self, card: int, device: int) -> float:
        """DCMI reports power in units of 0.1 W."""
        out = ffi.new("int *")
        self._call("dcmi_get_device_power_info", card, device, out)
        return int(out[0]) / 10.0

    def aicore_mhz(self, card: int, device: int) -> int:
        out = ffi.new("unsigned int *")
        self._call("dcmi_get_device_frequency", card, device, FREQ_AICORE_CURRENT, out)
        return int(out[0])

    def hbm(self, card: int, device: int) -> HbmReading:
        """The chip's HBM: clock, temperature, bandwidth use (``VendorLibraryError`` on a chip without)."""
        hbm = ffi.new("struct dcmi_hbm_info *")
        self._call("dcmi_get_device_hbm_info", card, device, hbm)
        return HbmReading(int(hbm.freq), int(hbm.temp), int(hbm.bandwith_util_rate))

    def ecc(self, card: int, device: int, memory_kind: str) -> EccReading:
        """ECC counts of the chip's device memory (``memory_kind``: "hbm" or "ddr") since the driver loaded."""
        info = ffi.new("struct dcmi_ecc_info *")
        kind = DEVICE_TYPE_HBM if memory_kind == "hbm" else DEVICE_TYPE_DDR
        self._call("dcmi_get_device_ecc_info", card, device, kind, info)
        return EccReading(
            int(info.total_single_bit_error_cnt), int(info.total_double_bit_error_cnt),
            int(info.single_bit_isolated_pages_cnt), int(info.double_bit_isolated_pages_cnt),
        )

    # -- vNPUs -----------------------------------------------------------------
    def vnpu_ids(self, card: int, device: int) -> list[int]:
        total = ffi.new("struct dcmi_soc_total_resource *")
        size = ffi.new("unsigned int *", ffi.sizeof("struct dcmi_soc_total_resource"))
        self._call(
            "dcmi_get_device_info", card, device, MAIN_CMD_VDEV_MNG, VMNG_GET_TOTAL_RESOURCE, total, size
        )
        return [int(total.vdev_id[i]) for i in range(min(int(total.vdev_num), 32))]

    def vnpu(self, card: int, device: int, vdev_id: int) -> VnpuInfo:
        query = ffi.new("struct dcmi_vdev_query_stru *")
        query.vdev_id = vdev_id
        size = ffi.new("unsigned int *", ffi.sizeof("struct dcmi_vdev_query_stru"))
        self._call("dcmi_get_device_info", card, device, MAIN_CMD_VDEV_MNG, VMNG_GET_VDEV_RESOURCE, query, size)
        info = query.query_info
        return VnpuInfo(vdev_id, _text(info.name), float(info.computing.aic), int(info.computing.memory_size))

    def vnpus(self, card: int, device: int) -> list[VnpuInfo]:
        try:
            ids = self.vnpu_ids(card, device)
        except VendorLibraryError as exc:
            if exc.code in NOT_SUPPORTED:
                return []
            raise
        found: list[VnpuInfo] = []
        for vdev_id in ids:
            try:
                found.append(self.vnpu(card, device, vdev_id))
            except VendorLibraryError as exc:
                # Listed, then destroyed by another caller before its query: gone, not a library failure
                # (the list and the queries are separate DCMI calls; the concurrency check found this).
                if exc.code != INVALID_DEVICE_ID:
                    raise
        return found

    def create_vnpu(self, card: int, device: int, template: str, vdev_id: int = VDEV_ID_AUTO) -> int:
        res = ffi.new("struct dcmi_create_vdev_res_stru *")
        res.vdev_id = vdev_id
        res.vfg_id = 0xFFFFFFFF
        name = template.encode()
        if len(name) >= 32:
            raise VendorLibraryError(VENDOR, "dcmi_create_vdevice", None, f"template name {template!r} is too long")
        ffi.memmove(res.template_name, name, len(name))
        out = ffi.new("struct dcmi_create_vdev_out *")
        self._call("dcmi_create_vdevice", card, device, res, out)
        return int(out.vdev_id)

    def destroy_vnpu(self, card: int, device: int, vdev_id: int) -> None:
        self._call("dcmi_set_destroy_vdevice", card, device, vdev_id)


def _installed() -> list[str]:
    """Where the Ascend driver installs the library; an override comes first."""
    return [str(Path(d) / LIBRARY_NAME) for d in SEARCH_DIRS]


_LOADER = LibraryLoader(LIBRARY_NAME, LIBRARY_ENV, _installed, Dcmi)
candidates = _LOADER.candidates
load = _LOADER.load
