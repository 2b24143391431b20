/*
 * The few Cambricon CNDev (cndev.h) types and entry points that hami-devices
 * uses, declared from the public API so that building needs no Neuware SDK.
 * Layouts follow the vendor header for LP64 Linux; vendors/cambricon/tests
 * pins sizes and offsets.  Every struct starts with the caller-set API
 * version field.
 *
 * Used by the fake libcndev.so (native/fakes/cndev) and mirrored by the cffi
 * declarations in vendors/cambricon/hami_cambricon/binding.py.
 */
#ifndef HAMI_CNDEV_API_H
#define HAMI_CNDEV_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CNDEV_VERSION_5 5
#define CNDEV_VERSION_6 6
#define CNDEV_UUID_SIZE 37
#define CNDEV_MLUINSTANCE_PROFILE_NAME_BUFFER_SIZE 100
#define CNDEV_MLUINSTANCE_DEVICE_NODE_NAME_BUFFER_SIZE 100

typedef enum {
    CNDEV_SUCCESS = 0,
    CNDEV_ERROR_NO_DRIVER = 1,
    CNDEV_ERROR_LOW_DRIVER_VERSION = 2,
    CNDEV_ERROR_UNSUPPORTED_API_VERSION = 3,
    CNDEV_ERROR_UNINITIALIZED = 4,
    CNDEV_ERROR_INVALID_ARGUMENT = 5,
    CNDEV_ERROR_INVALID_DEVICE_ID = 6,
    CNDEV_ERROR_UNKNOWN = 7,
    CNDEV_ERROR_MALLOC = 8,
    CNDEV_ERROR_INSUFFICIENT_SPACE = 9,
    CNDEV_ERROR_NOT_SUPPORTED = 10,
    CNDEV_ERROR_INVALID_LINK = 11,
    CNDEV_ERROR_NO_DEVICES = 12,
    CNDEV_ERROR_NO_PERMISSION = 13,
    CNDEV_ERROR_NOT_FOUND = 14,
    CNDEV_ERROR_IN_USE = 15,
    CNDEV_ERROR_DUPLICATE = 16,
    CNDEV_ERROR_TIMEOUT = 17,
    CNDEV_ERROR_IN_PROBLEM = 18, /* "MLU device is in problem" (cndev.h of CNToolkit 3.x) */
} cndevRet_t;

typedef int32_t cndevDevice_t;
typedef int32_t cndevMluInstance_t;

typedef enum {
    CNDEV_HEALTH_STATE_DEVICE_IN_PROBLEM = 0,
    CNDEV_HEALTH_STATE_DEVICE_GOOD = 1,
} cndevHealthStateEnum_t;

typedef enum { CNDEV_FEATURE_DISABLED = 0, CNDEV_FEATURE_ENABLED = 1 } cndevEnableStatusEnum_t;

typedef struct {
    int version;
    unsigned number;
} cndevCardInfo_t;

typedef struct {
    int version;
    uint8_t uuid[CNDEV_UUID_SIZE];
    uint64_t ncsUUID64;
} cndevUUID_t;

typedef struct {
    int version;
    int64_t physicalMemoryTotal; /* MB */
    int64_t physicalMemoryUsed;  /* MB */
    int64_t virtualMemoryTotal;
    int64_t virtualMemoryUsed;
    int64_t channelNumber;
    int64_t channelMemoryUsed[20];
    uint64_t globalMemory;
} cndevMemoryInfo_t;

typedef struct {
    int version;
    int usage; /* W */
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

typedef struct {
    int version;
    int averageCoreUtilization;
    int coreUtilization[80];
} cndevUtilizationInfo_t;

typedef struct {
    int version;
    int count;
} cndevCardCoreCount_t;

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

typedef struct {
    int version;
    int health;
    int deviceState; /* cndevHealthStateEnum_t */
    int driverState; /* cndevDriverHealthStateEnum_t */
} cndevCardHealthState_t;

typedef struct {
    int version;
    int32_t nodeId;
} cndevNUMANodeId_t;

typedef struct {
    int version;
    int isActive;    /* cndevEnableStatusEnum_t */
    int serdesState; /* cndevMLULinkStateEnum_t */
    int cableState;  /* cndevMLULinkCableStateEnum_t */
} cndevMLULinkStatus_t;

typedef struct {
    int version;
    int smluMode; /* cndevEnableStatusEnum_t */
} cndevSMLUMode_t;

typedef struct {
    int version;
    uint32_t mluQuota;   /* percent */
    uint64_t memorySize; /* bytes */
} cndevSMluSet_t;

#define CNDEV_SMLU_MAX 0
#define CNDEV_SMLU_USAGE 1
#define CNDEV_SMLU_ITEM_COUNT 2

typedef struct {
    int version;
    int profileId;
    int instanceId;
    uint8_t uuid[CNDEV_UUID_SIZE];
    int domain;
    int bus;
    int device;
    int function;
    char profileName[CNDEV_MLUINSTANCE_PROFILE_NAME_BUFFER_SIZE];
    char instanceName[CNDEV_MLUINSTANCE_PROFILE_NAME_BUFFER_SIZE];
    char devNodeName[CNDEV_MLUINSTANCE_DEVICE_NODE_NAME_BUFFER_SIZE];
    uint32_t mluQuota[CNDEV_SMLU_ITEM_COUNT];
    uint64_t memorySize[CNDEV_SMLU_ITEM_COUNT];
    unsigned int reserved[128];
} cndevSMluInfo_t;

typedef struct {
    int version;
    int count;
    int profileId[128];
} cndevSMluProfileIdInfo_t;

typedef struct {
    int version;
    int profileId;
    char name[CNDEV_MLUINSTANCE_PROFILE_NAME_BUFFER_SIZE];
    uint32_t totalCapacity;
    uint32_t remainCapacity;
    uint32_t mluQuota[CNDEV_SMLU_ITEM_COUNT];
    uint64_t memorySize[CNDEV_SMLU_ITEM_COUNT];
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

#ifdef __cplusplus
}
#endif

#endif /* HAMI_CNDEV_API_H */
