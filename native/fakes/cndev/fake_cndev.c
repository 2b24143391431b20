/*
 * A fake libcndev.so for tests: the real CNDev entry points (names and
 * signatures from cndev.h, declared in hami_cndev_api.h) over a device table
 * read from a fixture file.
 *
 *   HAMI_FAKE_CNDEV_FIXTURE  the fixture (required)
 *   HAMI_FAKE_CNDEV_STATE    where sMLU profiles and instances live (default: <fixture>.state)
 *
 * Fixture: '#' comments, one "[mlu]" section per device, then key=value
 * lines: name (MLU370-X8 ...), uuid (36 characters), pci (dddd:bb:dd.f),
 * memory_mb, memory_used_mb, health (1 good, 0 in problem), driver_state,
 * numa, cores, util, temp, power (W), mlulink_ports, mlulink_active (bit
 * mask of active ports), smlu (1: sMLU mode on), smlu_profile
 * ("quota,memory_mib", repeatable) and smlu_instance (index of one of this
 * device's smlu_profile lines, repeatable): what exists before the first run;
 * the fields a monitoring agent reads (absent: CNDEV_ERROR_NOT_SUPPORTED):
 * clocks = <MLU MHz> <memory MHz>, ecc = <corrected> <uncorrected>,
 * pcie = <bytes read> <bytes written> (in the last 20 ms), memory_temp
 * (default: the chip's temperature minus 3).
 *
 * Faults made while the library is loaded (a device named by its uuid): native/fakes/common/fake_faults.h.
 *
 * State file lines, rewritten under an exclusive flock on every change:
 *   profile <device> <profile_id> <quota> <memory_bytes>
 *   instance <device> <instance_id> <profile_id> <name>
 * sMLU memory must be a multiple of 256 MiB, and instances never hold more
 * than the device's memory.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_faults.h"
#include "fake_fixture.h"
#include "fake_state_file.h"
#include "hami_cndev_api.h"

#define MAX_DEVICES 64
#define MAX_SEED 16
#define MAX_PROFILES 512
#define MAX_INSTANCES 512
#define NAME_LEN 64
#define MIB (1024ull * 1024ull)
#define SMLU_UNIT (256ull * MIB)

struct mlu {
    char name[NAME_LEN];
    char uuid[CNDEV_UUID_SIZE];
    unsigned int domain, bus, dev, func;
    long long memory_mb, memory_used_mb;
    int health, driver_state, numa, cores, util, temp, power;
    int mlulink_ports;
    unsigned int mlulink_active;
    int has_clocks, has_ecc, has_pcie, has_memory_temp;
    int board_mhz, ddr_mhz, memory_temp;
    unsigned long long ecc_corrected, ecc_uncorrected;
    long long pcie_read, pcie_write;
    int smlu;
    unsigned int seed_quota[MAX_SEED];
    unsigned long long seed_memory_mib[MAX_SEED];
    int seed_profiles;
    int seed_instances[MAX_SEED];
    int seed_instance_count;
};

struct profile {
    int device, id;
    unsigned int quota;
    unsigned long long memory;
};

struct instance {
    int device, id, profile;
    char name[NAME_LEN];
};

struct state {
    struct profile profiles[MAX_PROFILES];
    int profile_count;
    struct instance instances[MAX_INSTANCES];
    int instance_count;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mlu g_mlus[MAX_DEVICES];
static int g_count = -1;
static int g_initialised;
static hami_fake_files g_files; /* the fixture and state read last */

/* An [mlu] section: the next device, good and with its driver running until its keys say otherwise. */
static void *begin_mlu(void *ctx) {
    int *count = ctx;
    if (*count == MAX_DEVICES) return NULL;
    struct mlu *m = &g_mlus[(*count)++];
    memset(m, 0, sizeof *m);
    m->health = CNDEV_HEALTH_STATE_DEVICE_GOOD;
    m->driver_state = 4;
    return m;
}

static void set_field(void *ctx, void *record, const char *key, char *value) {
    struct mlu *m = record;
    long long n = strtoll(value, NULL, 0);
    if (!strcmp(key, "name")) hami_fixture_copy(m->name, NAME_LEN, value);
    else if (!strcmp(key, "uuid")) hami_fixture_copy(m->uuid, CNDEV_UUID_SIZE, value);
    else if (!strcmp(key, "pci")) sscanf(value, "%x:%x:%x.%x", &m->domain, &m->bus, &m->dev, &m->func);
    else if (!strcmp(key, "memory_mb")) m->memory_mb = n;
    else if (!strcmp(key, "memory_used_mb")) m->memory_used_mb = n;
    else if (!strcmp(key, "health")) m->health = (int)n;
    else if (!strcmp(key, "driver_state")) m->driver_state = (int)n;
    else if (!strcmp(key, "numa")) m->numa = (int)n;
    else if (!strcmp(key, "cores")) m->cores = (int)n;
    else if (!strcmp(key, "util")) m->util = (int)n;
    else if (!strcmp(key, "temp")) m->temp = (int)n;
    else if (!strcmp(key, "power")) m->power = (int)n;
    else if (!strcmp(key, "mlulink_ports")) m->mlulink_ports = (int)n;
    else if (!strcmp(key, "mlulink_active")) m->mlulink_active = (unsigned int)n;
    else if (!strcmp(key, "smlu")) m->smlu = (int)n;
    else if (!strcmp(key, "clocks")) m->has_clocks = sscanf(value, "%d %d", &m->board_mhz, &m->ddr_mhz) == 2;
    else if (!strcmp(key, "ecc")) m->has_ecc = sscanf(value, "%llu %llu", &m->ecc_corrected, &m->ecc_uncorrected) == 2;
    else if (!strcmp(key, "pcie")) m->has_pcie = sscanf(value, "%lld %lld", &m->pcie_read, &m->pcie_write) == 2;
    else if (!strcmp(key, "memory_temp")) {
        m->memory_temp = (int)n;
        m->has_memory_temp = 1;
    }
    else if (!strcmp(key, "smlu_profile") && m->seed_profiles < MAX_SEED) {
        unsigned int quota = 0;
        unsigned long long memory = 0;
        if (sscanf(value, "%u,%llu", &quota, &memory) == 2) {
            m->seed_quota[m->seed_profiles] = quota;
            m->seed_memory_mib[m->seed_profiles++] = memory;
        }
    } else if (!strcmp(key, "smlu_instance") && m->seed_instance_count < MAX_SEED) {
        m->seed_instances[m->seed_instance_count++] = (int)n;
    }
}

/* Load the fixture (again whenever the variables name other files); the caller holds g_lock. */
static cndevRet_t load_fixture(void) {
    hami_fake_files now;
    if (hami_fake_files_named("HAMI_FAKE_CNDEV_FIXTURE", "HAMI_FAKE_CNDEV_STATE", &now) != 0)
        return CNDEV_ERROR_NO_DRIVER;
    if (g_count >= 0 && !strcmp(now.fixture, g_files.fixture) && !strcmp(now.state, g_files.state))
        return CNDEV_SUCCESS;
    int count = 0;
    const hami_fixture_reader reader = {.section = "mlu", .begin = begin_mlu, .set = set_field, .ctx = &count};
    if (hami_fixture_read(now.fixture, &reader) != 0) return CNDEV_ERROR_NO_DRIVER;
    g_files = now;
    g_count = count;
    return CNDEV_SUCCESS;
}

static void write_state(FILE *f, const struct state *st) {
    if (ftruncate(fileno(f), 0) != 0) return;
    rewind(f);
    fputs("# fake CNDev sMLU state\n", f);
    for (int i = 0; i < st->profile_count; i++)
        fprintf(f, "profile %d %d %u %llu\n", st->profiles[i].device, st->profiles[i].id, st->profiles[i].quota,
                st->profiles[i].memory);
    for (int i = 0; i < st->instance_count; i++)
        fprintf(f, "instance %d %d %d %s\n", st->instances[i].device, st->instances[i].id, st->instances[i].profile,
                st->instances[i].name);
    fflush(f);
}

static void seed_state(struct state *st) {
    memset(st, 0, sizeof *st);
    for (int d = 0; d < g_count; d++) {
        struct mlu *m = &g_mlus[d];
        for (int p = 0; p < m->seed_profiles; p++) {
            struct profile *pr = &st->profiles[st->profile_count++];
            pr->device = d;
            pr->id = p + 1;
            pr->quota = m->seed_quota[p];
            pr->memory = m->seed_memory_mib[p] * MIB;
        }
        for (int i = 0; i < m->seed_instance_count; i++) {
            struct instance *in = &st->instances[st->instance_count++];
            in->device = d;
            in->id = i + 1;
            in->profile = m->seed_instances[i] + 1;
            snprintf(in->name, NAME_LEN, "preexisting-%d-%d", d, i + 1);
        }
    }
}

/* Lock and read the state, seeding it from the fixture on first use. */
static FILE *open_state(struct state *st) {
    int empty;
    FILE *f = hami_fake_state_open(g_files.state, &empty);
    if (f == NULL) return NULL;
    if (empty) {
        seed_state(st);
        write_state(f, st);
        return f;
    }
    memset(st, 0, sizeof *st);
    char line[256];
    while (fgets(line, sizeof line, f) != NULL) {
        struct profile p;
        struct instance in;
        char name[NAME_LEN];
        if (sscanf(line, "profile %d %d %u %llu", &p.device, &p.id, &p.quota, &p.memory) == 4 &&
            st->profile_count < MAX_PROFILES) {
            st->profiles[st->profile_count++] = p;
        } else if (sscanf(line, "instance %d %d %d %63s", &in.device, &in.id, &in.profile, name) == 4 &&
                   st->instance_count < MAX_INSTANCES) {
            hami_fixture_copy(in.name, NAME_LEN, name);
            st->instances[st->instance_count++] = in;
        }
    }
    return f;
}


static struct profile *find_profile(struct state *st, int device, int id) {
    for (int i = 0; i < st->profile_count; i++)
        if (st->profiles[i].device == device && st->profiles[i].id == id) return &st->profiles[i];
    return NULL;
}

static unsigned long long used_memory(struct state *st, int device) {
    unsigned long long used = 0;
    for (int i = 0; i < st->instance_count; i++) {
        if (st->instances[i].device != device) continue;
        struct profile *p = find_profile(st, device, st->instances[i].profile);
        used += p != NULL ? p->memory : 0;
    }
    return used;
}

/* An instance's uuid: its device's uuid with the instance id in the last six digits. */
static void instance_uuid(const struct mlu *m, int id, char *out) {
    hami_fixture_copy(out, CNDEV_UUID_SIZE, m->uuid);
    size_t n = strlen(out);
    if (n >= 6) snprintf(out + n - 6, 7, "%06x", 0xa00000u | ((unsigned)id & 0xfffu));
}

/* What entry point `call` returns about device m under an injected fault (fake_faults.h), or SUCCESS. */
static cndevRet_t injected(const struct mlu *m, const char *call) {
    switch (hami_fake_fault(m->uuid, call)) {
    case HAMI_FAULT_LOST: return CNDEV_ERROR_IN_PROBLEM; /* "MLU device is in problem": it stopped answering */
    case HAMI_FAULT_ERROR: return CNDEV_ERROR_UNKNOWN;   /* "system function occur error": CNDev's catch-all */
    default: return CNDEV_SUCCESS;
    }
}

/* The device's health now: an injected "unhealthy" reads as in problem (CNDEV_HEALTH_STATE_DEVICE_IN_PROBLEM). */
static int health_now(const struct mlu *m, const char *call) {
    return hami_fake_fault(m->uuid, call) == HAMI_FAULT_UNHEALTHY ? CNDEV_HEALTH_STATE_DEVICE_IN_PROBLEM : m->health;
}

#define CHECK_VERSION(p)                                                 \
    if ((p)->version < 1 || (p)->version > CNDEV_VERSION_6) {            \
        pthread_mutex_unlock(&g_lock);                                   \
        return CNDEV_ERROR_UNSUPPORTED_API_VERSION;                      \
    }

#define ENTER(device, m)                                                 \
    pthread_mutex_lock(&g_lock);                                         \
    if (!g_initialised) {                                                \
        pthread_mutex_unlock(&g_lock);                                   \
        return CNDEV_ERROR_UNINITIALIZED;                                \
    }                                                                    \
    if (load_fixture() != CNDEV_SUCCESS) {                               \
        pthread_mutex_unlock(&g_lock);                                   \
        return CNDEV_ERROR_NO_DRIVER;                                    \
    }                                                                    \
    if ((device) < 0 || (device) >= g_count) {                           \
        pthread_mutex_unlock(&g_lock);                                   \
        return CNDEV_ERROR_INVALID_DEVICE_ID;                            \
    }                                                                    \
    struct mlu *m = &g_mlus[device];                                     \
    cndevRet_t fault_ = injected(m, __func__);                           \
    if (fault_ != CNDEV_SUCCESS) {                                       \
        pthread_mutex_unlock(&g_lock);                                   \
        return fault_;                                                   \
    }

#define LEAVE(rc)                      \
    do {                               \
        pthread_mutex_unlock(&g_lock); \
        return (rc);                   \
    } while (0)

cndevRet_t cndevInit(int reserved) {
    pthread_mutex_lock(&g_lock);
    cndevRet_t rc = load_fixture();
    if (rc == CNDEV_SUCCESS) g_initialised = 1;
    LEAVE(rc);
}

cndevRet_t cndevRelease(void) {
    pthread_mutex_lock(&g_lock);
    g_initialised = 0;
    LEAVE(CNDEV_SUCCESS);
}

const char *cndevGetErrorString(cndevRet_t errorId) {
    static const char *const names[] = {
        "success", "no driver", "driver version too low", "API version not supported", "not initialised",
        "invalid argument", "invalid device id", "unknown error", "malloc failed", "insufficient space",
        "not supported", "invalid link", "no devices", "no permission", "not found", "in use", "duplicate",
        "timeout", "device in problem",
    };
    if ((int)errorId < 0 || (size_t)errorId >= sizeof names / sizeof names[0]) return "Cndev_ERROR not found!";
    return names[errorId];
}

cndevRet_t cndevGetDeviceCount(cndevCardInfo_t *cardNum) {
    if (cardNum == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&g_lock);
    if (!g_initialised) LEAVE(CNDEV_ERROR_UNINITIALIZED);
    CHECK_VERSION(cardNum);
    cndevRet_t rc = load_fixture();
    if (rc != CNDEV_SUCCESS) LEAVE(rc);
    cardNum->number = (unsigned)g_count;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetDeviceHandleByIndex(int index, cndevDevice_t *handle) {
    if (handle == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(index, m);
    (void)m;
    *handle = index;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetUUID(cndevUUID_t *uuidInfo, cndevDevice_t device) {
    if (uuidInfo == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(uuidInfo);
    memset(uuidInfo->uuid, 0, sizeof uuidInfo->uuid);
    memcpy(uuidInfo->uuid, m->uuid, strlen(m->uuid));
    uuidInfo->ncsUUID64 = 0x5a00000000000000ull | (unsigned)device;
    LEAVE(CNDEV_SUCCESS);
}

const char *cndevGetCardNameStringByDevId(cndevDevice_t device) {
    pthread_mutex_lock(&g_lock);
    if (g_initialised) (void)load_fixture();
    const char *name = (g_initialised && device >= 0 && device < g_count) ? g_mlus[device].name : "Unknown";
    pthread_mutex_unlock(&g_lock);
    return name;
}

cndevRet_t cndevGetPCIeInfo(cndevPCIeInfo_t *deviceInfo, cndevDevice_t device) {
    if (deviceInfo == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(deviceInfo);
    int version = deviceInfo->version;
    memset(deviceInfo, 0, sizeof *deviceInfo);
    deviceInfo->version = version;
    deviceInfo->vendor = 0xcabc;
    deviceInfo->deviceId = strncmp(m->name, "MLU590", 6) == 0 ? 0x0590 : 0x0370;
    deviceInfo->subsystemVendor = 0xcabc;
    deviceInfo->subsystemId = 0x0001;
    deviceInfo->domain = m->domain;
    deviceInfo->bus = m->bus;
    deviceInfo->device = m->dev;
    deviceInfo->function = m->func;
    deviceInfo->physicalSlot = "fake-slot";
    deviceInfo->slotID = device;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetMemoryUsage(cndevMemoryInfo_t *memInfo, cndevDevice_t device) {
    if (memInfo == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(memInfo);
    int version = memInfo->version;
    memset(memInfo, 0, sizeof *memInfo);
    memInfo->version = version;
    memInfo->physicalMemoryTotal = m->memory_mb;
    memInfo->physicalMemoryUsed = m->memory_used_mb;
    memInfo->virtualMemoryTotal = m->memory_mb;
    memInfo->virtualMemoryUsed = m->memory_used_mb;
    memInfo->channelNumber = 1;
    memInfo->channelMemoryUsed[0] = m->memory_used_mb;
    memInfo->globalMemory = (uint64_t)m->memory_mb;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetCardHealthState(cndevCardHealthState_t *cardHealthState, cndevDevice_t device) {
    if (cardHealthState == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(cardHealthState);
    int health = health_now(m, __func__);
    cardHealthState->health = health;
    cardHealthState->deviceState = health ? CNDEV_HEALTH_STATE_DEVICE_GOOD : CNDEV_HEALTH_STATE_DEVICE_IN_PROBLEM;
    cardHealthState->driverState = m->driver_state;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetNUMANodeIdByDevId(cndevNUMANodeId_t *numaNodeId, cndevDevice_t device) {
    if (numaNodeId == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(numaNodeId);
    numaNodeId->nodeId = m->numa;
    LEAVE(CNDEV_SUCCESS);
}

int cndevGetMLULinkPortNumber(cndevDevice_t device) {
    pthread_mutex_lock(&g_lock);
    if (g_initialised) (void)load_fixture();
    int n = (g_initialised && device >= 0 && device < g_count) ? g_mlus[device].mlulink_ports : 0;
    pthread_mutex_unlock(&g_lock);
    return n;
}

cndevRet_t cndevGetMLULinkStatus(cndevMLULinkStatus_t *status, cndevDevice_t device, int link) {
    if (status == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(status);
    if (link < 0 || link >= m->mlulink_ports) LEAVE(CNDEV_ERROR_INVALID_LINK);
    int active = (m->mlulink_active >> link) & 1u;
    status->isActive = active ? CNDEV_FEATURE_ENABLED : CNDEV_FEATURE_DISABLED;
    status->serdesState = active ? 1 : 0;
    status->cableState = active ? 1 : 0;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetDeviceUtilizationInfo(cndevUtilizationInfo_t *utilInfo, cndevDevice_t device) {
    if (utilInfo == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(utilInfo);
    utilInfo->averageCoreUtilization = m->util;
    for (int i = 0; i < 80; i++) utilInfo->coreUtilization[i] = i < m->cores ? m->util : 0;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetTemperatureInfo(cndevTemperatureInfo_t *tempInfo, cndevDevice_t device) {
    if (tempInfo == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(tempInfo);
    int version = tempInfo->version;
    memset(tempInfo, 0, sizeof *tempInfo);
    tempInfo->version = version;
    tempInfo->board = m->temp - 5;
    tempInfo->chip = m->temp;
    tempInfo->memory = m->has_memory_temp ? m->memory_temp : m->temp - 3;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetPowerInfo(cndevPowerInfo_t *powerInfo, cndevDevice_t device) {
    if (powerInfo == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(powerInfo);
    int version = powerInfo->version;
    memset(powerInfo, 0, sizeof *powerInfo);
    powerInfo->version = version;
    powerInfo->usage = m->power;
    powerInfo->cap = 250;
    powerInfo->thermalDesignPower = 250;
    powerInfo->instantaneousPowerUsage = (uint16_t)m->power;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetFrequencyInfo(cndevFrequencyInfo_t *freqInfo, cndevDevice_t device) {
    if (freqInfo == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(freqInfo);
    if (!m->has_clocks) LEAVE(CNDEV_ERROR_NOT_SUPPORTED);
    int version = freqInfo->version;
    memset(freqInfo, 0, sizeof *freqInfo);
    freqInfo->version = version;
    freqInfo->boardFreq = freqInfo->boardDefaultFreq = m->board_mhz;
    freqInfo->ddrFreq = m->ddr_mhz;
    freqInfo->boardFreqArange[0] = freqInfo->boardFreqArange[1] = m->board_mhz;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetECCInfo(cndevECCInfo_t *eccInfo, cndevDevice_t device) {
    if (eccInfo == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(eccInfo);
    if (!m->has_ecc) LEAVE(CNDEV_ERROR_NOT_SUPPORTED);
    int version = eccInfo->version;
    memset(eccInfo, 0, sizeof *eccInfo);
    eccInfo->version = version;
    eccInfo->oneBitError = eccInfo->correctedError = m->ecc_corrected;
    eccInfo->multipleError = eccInfo->uncorrectedError = m->ecc_uncorrected;
    eccInfo->totalError = m->ecc_corrected + m->ecc_uncorrected;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetPCIethroughput(cndevPCIethroughput_t *pciethroughput, cndevDevice_t device) {
    if (pciethroughput == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(pciethroughput);
    if (!m->has_pcie) LEAVE(CNDEV_ERROR_NOT_SUPPORTED);
    pciethroughput->pcieRead = m->pcie_read;
    pciethroughput->pcieWrite = m->pcie_write;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetCardCoreCount(cndevCardCoreCount_t *cardCoreCount, cndevDevice_t device) {
    if (cardCoreCount == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(cardCoreCount);
    cardCoreCount->count = m->cores;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetSMLUMode(cndevSMLUMode_t *mode, cndevDevice_t device) {
    if (mode == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(mode);
    mode->smluMode = m->smlu ? CNDEV_FEATURE_ENABLED : CNDEV_FEATURE_DISABLED;
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevCreateSMluProfileInfo(cndevSMluSet_t *profileInfo, int *profileId, cndevDevice_t device) {
    if (profileInfo == NULL || profileId == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(profileInfo);
    if (!m->smlu) LEAVE(CNDEV_ERROR_NOT_SUPPORTED);
    if (profileInfo->mluQuota < 1 || profileInfo->mluQuota > 100 || profileInfo->memorySize == 0 ||
        profileInfo->memorySize % SMLU_UNIT != 0 || profileInfo->memorySize > (uint64_t)m->memory_mb * MIB)
        LEAVE(CNDEV_ERROR_INVALID_ARGUMENT);
    struct state *st = malloc(sizeof *st);
    if (st == NULL) LEAVE(CNDEV_ERROR_MALLOC);
    FILE *f = open_state(st);
    cndevRet_t rc = CNDEV_SUCCESS;
    if (f == NULL) rc = CNDEV_ERROR_UNKNOWN;
    else if (st->profile_count == MAX_PROFILES) rc = CNDEV_ERROR_INSUFFICIENT_SPACE;
    else {
        for (int i = 0; i < st->profile_count; i++) {
            struct profile *p = &st->profiles[i];
            if (p->device == device && p->quota == profileInfo->mluQuota && p->memory == profileInfo->memorySize)
                rc = CNDEV_ERROR_DUPLICATE;
        }
        if (rc == CNDEV_SUCCESS) {
            int id = 1;
            while (find_profile(st, device, id) != NULL) id++;
            struct profile *p = &st->profiles[st->profile_count++];
            p->device = device;
            p->id = id;
            p->quota = profileInfo->mluQuota;
            p->memory = profileInfo->memorySize;
            write_state(f, st);
            *profileId = id;
        }
    }
    if (f != NULL) hami_fake_state_close(f);
    free(st);
    LEAVE(rc);
}

cndevRet_t cndevDestroySMluProfileInfo(int profileId, cndevDevice_t device) {
    ENTER(device, m);
    (void)m;
    struct state *st = malloc(sizeof *st);
    if (st == NULL) LEAVE(CNDEV_ERROR_MALLOC);
    FILE *f = open_state(st);
    cndevRet_t rc = f == NULL ? CNDEV_ERROR_UNKNOWN : CNDEV_ERROR_NOT_FOUND;
    if (f != NULL && find_profile(st, device, profileId) != NULL) {
        rc = CNDEV_SUCCESS;
        for (int i = 0; i < st->instance_count; i++)
            if (st->instances[i].device == device && st->instances[i].profile == profileId) rc = CNDEV_ERROR_IN_USE;
        if (rc == CNDEV_SUCCESS) {
            int kept = 0;
            for (int i = 0; i < st->profile_count; i++)
                if (!(st->profiles[i].device == device && st->profiles[i].id == profileId))
                    st->profiles[kept++] = st->profiles[i];
            st->profile_count = kept;
            write_state(f, st);
        }
    }
    if (f != NULL) hami_fake_state_close(f);
    free(st);
    LEAVE(rc);
}

cndevRet_t cndevGetSMluProfileIdInfo(cndevSMluProfileIdInfo_t *profileId, cndevDevice_t device) {
    if (profileId == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(profileId);
    if (!m->smlu) LEAVE(CNDEV_ERROR_NOT_SUPPORTED);
    struct state *st = malloc(sizeof *st);
    if (st == NULL) LEAVE(CNDEV_ERROR_MALLOC);
    FILE *f = open_state(st);
    if (f == NULL) {
        free(st);
        LEAVE(CNDEV_ERROR_UNKNOWN);
    }
    hami_fake_state_close(f);
    profileId->count = 0;
    for (int i = 0; i < st->profile_count && profileId->count < 128; i++)
        if (st->profiles[i].device == device) profileId->profileId[profileId->count++] = st->profiles[i].id;
    free(st);
    LEAVE(CNDEV_SUCCESS);
}

cndevRet_t cndevGetSMluProfileInfo(cndevSMluProfileInfo_t *profileInfo, int profile, cndevDevice_t device) {
    if (profileInfo == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    CHECK_VERSION(profileInfo);
    struct state *st = malloc(sizeof *st);
    if (st == NULL) LEAVE(CNDEV_ERROR_MALLOC);
    FILE *f = open_state(st);
    if (f == NULL) {
        free(st);
        LEAVE(CNDEV_ERROR_UNKNOWN);
    }
    hami_fake_state_close(f);
    struct profile *p = find_profile(st, device, profile);
    cndevRet_t rc = CNDEV_ERROR_NOT_FOUND;
    if (p != NULL) {
        unsigned long long total = (unsigned long long)m->memory_mb * MIB;
        unsigned long long used = used_memory(st, device);
        profileInfo->profileId = p->id;
        snprintf(profileInfo->name, sizeof profileInfo->name, "%u.%lluu", p->quota, p->memory / SMLU_UNIT);
        profileInfo->totalCapacity = (uint32_t)(total / p->memory);
        profileInfo->remainCapacity = (uint32_t)((total > used ? total - used : 0) / p->memory);
        profileInfo->mluQuota[CNDEV_SMLU_MAX] = p->quota;
        profileInfo->mluQuota[CNDEV_SMLU_USAGE] = 0;
        profileInfo->memorySize[CNDEV_SMLU_MAX] = p->memory;
        profileInfo->memorySize[CNDEV_SMLU_USAGE] = 0;
        rc = CNDEV_SUCCESS;
    }
    free(st);
    LEAVE(rc);
}

cndevRet_t cndevCreateSMluInstanceByProfileId(cndevMluInstance_t *miHandle, unsigned int profileId,
                                              cndevDevice_t device, char *instanceName) {
    if (miHandle == NULL) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    if (!m->smlu) LEAVE(CNDEV_ERROR_NOT_SUPPORTED);
    if (health_now(m, __func__) != CNDEV_HEALTH_STATE_DEVICE_GOOD) LEAVE(CNDEV_ERROR_UNKNOWN);
    struct state *st = malloc(sizeof *st);
    if (st == NULL) LEAVE(CNDEV_ERROR_MALLOC);
    FILE *f = open_state(st);
    cndevRet_t rc = CNDEV_SUCCESS;
    struct profile *p = f != NULL ? find_profile(st, device, (int)profileId) : NULL;
    if (f == NULL) rc = CNDEV_ERROR_UNKNOWN;
    else if (p == NULL) rc = CNDEV_ERROR_NOT_FOUND;
    else if (st->instance_count == MAX_INSTANCES ||
             used_memory(st, device) + p->memory > (unsigned long long)m->memory_mb * MIB)
        rc = CNDEV_ERROR_INSUFFICIENT_SPACE;
    char name[NAME_LEN];
    int id = 1;
    if (rc == CNDEV_SUCCESS) {
        for (int i = 0; i < st->instance_count; i++)
            if (st->instances[i].device == device && st->instances[i].id >= id) id = st->instances[i].id + 1;
        if (instanceName != NULL && *instanceName != '\0') hami_fixture_copy(name, NAME_LEN, instanceName);
        else snprintf(name, NAME_LEN, "smlu-%d-%d", device, id);
        for (char *c = name; *c; c++)
            if (*c == ' ' || *c == '\n') *c = '_';
        for (int i = 0; i < st->instance_count; i++)
            if (st->instances[i].device == device && !strcmp(st->instances[i].name, name)) rc = CNDEV_ERROR_DUPLICATE;
    }
    if (rc == CNDEV_SUCCESS) {
        struct instance *in = &st->instances[st->instance_count++];
        in->device = device;
        in->id = id;
        in->profile = (int)profileId;
        hami_fixture_copy(in->name, NAME_LEN, name);
        write_state(f, st);
        *miHandle = ((device + 1) << 12) | id;
    }
    if (f != NULL) hami_fake_state_close(f);
    free(st);
    LEAVE(rc);
}

cndevRet_t cndevDestroySMluInstanceByHandle(cndevMluInstance_t miHandle) {
    int device = (miHandle >> 12) - 1;
    int id = miHandle & 0xfff;
    ENTER(device, m);
    (void)m;
    struct state *st = malloc(sizeof *st);
    if (st == NULL) LEAVE(CNDEV_ERROR_MALLOC);
    FILE *f = open_state(st);
    cndevRet_t rc = f == NULL ? CNDEV_ERROR_UNKNOWN : CNDEV_ERROR_NOT_FOUND;
    if (f != NULL) {
        int kept = 0;
        for (int i = 0; i < st->instance_count; i++) {
            if (st->instances[i].device == device && st->instances[i].id == id) rc = CNDEV_SUCCESS;
            else st->instances[kept++] = st->instances[i];
        }
        st->instance_count = kept;
        if (rc == CNDEV_SUCCESS) write_state(f, st);
        hami_fake_state_close(f);
    }
    free(st);
    LEAVE(rc);
}

cndevRet_t cndevGetAllSMluInstanceInfo(int *count, cndevSMluInfo_t *smluInfo, cndevDevice_t device) {
    if (count == NULL || (smluInfo == NULL && *count > 0)) return CNDEV_ERROR_INVALID_ARGUMENT;
    ENTER(device, m);
    if (*count > 0) CHECK_VERSION(&smluInfo[0]);
    if (!m->smlu) LEAVE(CNDEV_ERROR_NOT_SUPPORTED);
    struct state *st = malloc(sizeof *st);
    if (st == NULL) LEAVE(CNDEV_ERROR_MALLOC);
    FILE *f = open_state(st);
    if (f == NULL) {
        free(st);
        LEAVE(CNDEV_ERROR_UNKNOWN);
    }
    hami_fake_state_close(f);
    int n = 0;
    for (int i = 0; i < st->instance_count; i++) n += st->instances[i].device == device;
    if (n > *count) {
        *count = n;
        free(st);
        LEAVE(CNDEV_ERROR_INSUFFICIENT_SPACE);
    }
    int version = *count > 0 ? smluInfo[0].version : CNDEV_VERSION_5;
    int k = 0;
    for (int i = 0; i < st->instance_count; i++) {
        struct instance *in = &st->instances[i];
        if (in->device != device) continue;
        struct profile *p = find_profile(st, device, in->profile);
        cndevSMluInfo_t *out = &smluInfo[k++];
        memset(out, 0, sizeof *out);
        out->version = version;
        out->profileId = in->profile;
        out->instanceId = in->id;
        char uuid[CNDEV_UUID_SIZE];
        instance_uuid(m, in->id, uuid);
        memcpy(out->uuid, uuid, strlen(uuid));
        out->domain = (int)m->domain;
        out->bus = (int)m->bus;
        out->device = (int)m->dev;
        out->function = (int)m->func;
        if (p != NULL) {
            snprintf(out->profileName, sizeof out->profileName, "%u.%lluu", p->quota, p->memory / SMLU_UNIT);
            out->mluQuota[CNDEV_SMLU_MAX] = p->quota;
            out->memorySize[CNDEV_SMLU_MAX] = p->memory;
        }
        hami_fixture_copy(out->instanceName, sizeof out->instanceName, in->name);
        snprintf(out->devNodeName, sizeof out->devNodeName, "/dev/cambricon-caps/cap_dev%d_mi%d", device, in->id);
    }
    *count = n;
    free(st);
    LEAVE(CNDEV_SUCCESS);
}
