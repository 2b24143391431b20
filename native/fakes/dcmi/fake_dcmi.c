/*
 * A fake libdcmi.so for tests: the real DCMI entry points (names and
 * signatures from dcmi_interface_api.h, declared in hami_dcmi_api.h) over a
 * device table read from a fixture file.
 *
 *   HAMI_FAKE_DCMI_FIXTURE  the fixture (required)
 *   HAMI_FAKE_DCMI_STATE    where vNPU instances live (default: <fixture>.state)
 *
 * Fixture: '#' comments, one "[chip]" section per NPU chip, then key=value
 * lines: card, device, logic_id, phy_id, chip_type, chip_name, chip_ver,
 * aicore, die (five words, comma separated), pci (dddd:bb:dd.f), hbm_mb,
 * hbm_used_mb (hbm_mb=0: the chip has no HBM), ddr_mb, ddr_used_mb, health
 * (0 ok, 1 minor, 2 major, 3 critical), errorcode (repeatable), aicore_util,
 * aicpu_util, hbm_util, temp, power (0.1 W units), vnpu (a template name,
 * repeatable: vNPUs present before the first run); the fields a monitoring
 * agent reads (absent: DCMI_ERR_CODE_NOT_SUPPORT): aicore_mhz (the AI Core's
 * current frequency), hbm_mhz, hbm_temp, and ecc = <single-bit> <double-bit>
 * <single-bit isolated pages> <double-bit isolated pages> (HBM, or DDR on a
 * chip without HBM).
 *
 * Faults made while the library is loaded (a chip named "<card>:<device>"): native/fakes/common/fake_faults.h.
 *
 * The vNPU state file holds one "vnpu <card> <device> <vdev_id> <template>"
 * line per instance.  Every create/destroy reads and rewrites it under an
 * exclusive flock, so instances persist across processes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_faults.h"
#include "fake_fixture.h"
#include "fake_state_file.h"
#include "hami_dcmi_api.h"

#define MAX_CHIPS 64
#define MAX_ERRORS 8
#define MAX_VNPUS 256
#define NAME_LEN 32

struct chip {
    int card, device, logic_id, phy_id;
    char chip_type[NAME_LEN], chip_name[NAME_LEN], chip_ver[NAME_LEN];
    unsigned int aicore;
    unsigned int die[DIE_ID_COUNT];
    int domain;
    unsigned int bus, dev, func;
    unsigned long long hbm_mb, hbm_used_mb, ddr_mb, ddr_used_mb;
    unsigned int health;
    unsigned int errors[MAX_ERRORS];
    int error_count;
    unsigned int aicore_util, aicpu_util, hbm_util;
    int temp, power;
    unsigned int aicore_mhz, hbm_mhz;
    int hbm_temp, has_hbm_temp, has_ecc;
    unsigned int ecc_single, ecc_double, ecc_single_pages, ecc_double_pages;
    char seed_vnpus[DCMI_SOC_SPLIT_MAX][NAME_LEN];
    int seed_count;
};

struct vnpu {
    int card, device;
    unsigned int vdev_id;
    char template_name[NAME_LEN];
};

struct template_spec {
    const char *chip;      /* chip name without the "Ascend" prefix */
    const char *name;
    unsigned int aicore;
    unsigned long long memory_mb;
};

/* vNPU templates per chip (memory in MB, AICores) */
static const struct template_spec TEMPLATES[] = {
    {"910A", "vir02", 2, 2184},       {"910A", "vir04", 4, 4369},
    {"910A", "vir08", 8, 8738},       {"910A", "vir16", 16, 17476},
    {"310P3", "vir01", 1, 3072},      {"310P3", "vir02", 2, 6144},
    {"310P3", "vir04", 4, 12288},     {"910B2", "vir03_1c_8g", 3, 8192},
    {"910B2", "vir06_1c_16g", 6, 16384}, {"910B2", "vir12_3c_32g", 12, 32768},
    {"910B3", "vir05_1c_16g", 5, 16384}, {"910B3", "vir10_3c_32g", 10, 32768},
    {"910B4", "vir05_1c_8g", 5, 8192},   {"910B4", "vir10_3c_16g", 10, 16384},
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct chip g_chips[MAX_CHIPS];
static int g_chip_count = -1;
static hami_fake_files g_files; /* the fixture and state read last */

/* A [chip] section: the next chip, numbered in fixture order until its keys say otherwise. */
static void *begin_chip(void *ctx) {
    int *count = ctx;
    if (*count == MAX_CHIPS) return NULL;
    struct chip *c = &g_chips[(*count)++];
    memset(c, 0, sizeof *c);
    hami_fixture_copy(c->chip_type, NAME_LEN, "Ascend");
    c->logic_id = *count - 1;
    c->phy_id = *count - 1;
    return c;
}

static void set_field(void *ctx, void *record, const char *key, char *value) {
    struct chip *c = record;
    unsigned long long n = strtoull(value, NULL, 0);
    if (!strcmp(key, "card")) c->card = (int)n;
    else if (!strcmp(key, "device")) c->device = (int)n;
    else if (!strcmp(key, "logic_id")) c->logic_id = (int)n;
    else if (!strcmp(key, "phy_id")) c->phy_id = (int)n;
    else if (!strcmp(key, "chip_type")) hami_fixture_copy(c->chip_type, NAME_LEN, value);
    else if (!strcmp(key, "chip_name")) hami_fixture_copy(c->chip_name, NAME_LEN, value);
    else if (!strcmp(key, "chip_ver")) hami_fixture_copy(c->chip_ver, NAME_LEN, value);
    else if (!strcmp(key, "aicore")) c->aicore = (unsigned int)n;
    else if (!strcmp(key, "die")) {
        const char *p = value;
        for (int i = 0; i < DIE_ID_COUNT && *p; i++) {
            char *next;
            c->die[i] = (unsigned int)strtoul(p, &next, 0);
            p = (*next == ',') ? next + 1 : next;
        }
    } else if (!strcmp(key, "pci")) {
        sscanf(value, "%x:%x:%x.%x", (unsigned int *)&c->domain, &c->bus, &c->dev, &c->func);
    } else if (!strcmp(key, "hbm_mb")) c->hbm_mb = n;
    else if (!strcmp(key, "hbm_used_mb")) c->hbm_used_mb = n;
    else if (!strcmp(key, "ddr_mb")) c->ddr_mb = n;
    else if (!strcmp(key, "ddr_used_mb")) c->ddr_used_mb = n;
    else if (!strcmp(key, "health")) c->health = (unsigned int)n;
    else if (!strcmp(key, "errorcode")) {
        if (c->error_count < MAX_ERRORS) c->errors[c->error_count++] = (unsigned int)n;
    } else if (!strcmp(key, "aicore_util")) c->aicore_util = (unsigned int)n;
    else if (!strcmp(key, "aicpu_util")) c->aicpu_util = (unsigned int)n;
    else if (!strcmp(key, "hbm_util")) c->hbm_util = (unsigned int)n;
    else if (!strcmp(key, "temp")) c->temp = (int)n;
    else if (!strcmp(key, "power")) c->power = (int)n;
    else if (!strcmp(key, "aicore_mhz")) c->aicore_mhz = (unsigned int)n;
    else if (!strcmp(key, "hbm_mhz")) c->hbm_mhz = (unsigned int)n;
    else if (!strcmp(key, "hbm_temp")) {
        c->hbm_temp = (int)strtol(value, NULL, 0);
        c->has_hbm_temp = 1;
    } else if (!strcmp(key, "ecc"))
        c->has_ecc = sscanf(value, "%u %u %u %u", &c->ecc_single, &c->ecc_double, &c->ecc_single_pages,
                            &c->ecc_double_pages) == 4;
    else if (!strcmp(key, "vnpu")) {
        if (c->seed_count < DCMI_SOC_SPLIT_MAX) hami_fixture_copy(c->seed_vnpus[c->seed_count++], NAME_LEN, value);
    }
}

/* Load the fixture (again whenever the variables name other files); the caller holds g_lock. */
static int load_fixture(void) {
    hami_fake_files now;
    if (hami_fake_files_named("HAMI_FAKE_DCMI_FIXTURE", "HAMI_FAKE_DCMI_STATE", &now) != 0)
        return DCMI_ERR_CODE_DEVICE_NOT_EXIST;
    if (g_chip_count >= 0 && !strcmp(now.fixture, g_files.fixture) && !strcmp(now.state, g_files.state)) return DCMI_OK;
    int count = 0;
    const hami_fixture_reader reader = {.section = "chip", .begin = begin_chip, .set = set_field, .ctx = &count};
    if (hami_fixture_read(now.fixture, &reader) != 0) return DCMI_ERR_CODE_DEVICE_NOT_EXIST;
    g_files = now;
    g_chip_count = count;
    return DCMI_OK;
}

static struct chip *find_chip(int card_id, int device_id) {
    for (int i = 0; i < g_chip_count; i++)
        if (g_chips[i].card == card_id && g_chips[i].device == device_id) return &g_chips[i];
    return NULL;
}

/* Lock the state for reading and writing; seed it from the fixture on first use. */
static FILE *open_state(void) {
    int empty;
    FILE *f = hami_fake_state_open(g_files.state, &empty);
    if (f != NULL && empty) {
        fputs("# fake DCMI vNPU state\n", f);
        for (int i = 0; i < g_chip_count; i++) {
            struct chip *c = &g_chips[i];
            for (int v = 0; v < c->seed_count; v++)
                fprintf(f, "vnpu %d %d %u %s\n", c->card, c->device, 100u + (unsigned)c->phy_id * 16u + (unsigned)v,
                        c->seed_vnpus[v]);
        }
        fflush(f);
        rewind(f);
    }
    return f;
}

static int read_vnpus(FILE *f, struct vnpu *out, int cap) {
    char line[256];
    int n = 0;
    rewind(f);
    while (fgets(line, sizeof line, f) != NULL && n < cap) {
        struct vnpu v;
        char name[NAME_LEN + 1];
        if (sscanf(line, "vnpu %d %d %u %32s", &v.card, &v.device, &v.vdev_id, name) == 4) {
            hami_fixture_copy(v.template_name, NAME_LEN, name);
            out[n++] = v;
        }
    }
    return n;
}

static int write_vnpus(FILE *f, const struct vnpu *list, int n) {
    if (ftruncate(fileno(f), 0) != 0) return DCMI_ERR_CODE_INNER_ERR;
    rewind(f);
    fputs("# fake DCMI vNPU state\n", f);
    for (int i = 0; i < n; i++)
        fprintf(f, "vnpu %d %d %u %s\n", list[i].card, list[i].device, list[i].vdev_id, list[i].template_name);
    return fflush(f) == 0 ? DCMI_OK : DCMI_ERR_CODE_INNER_ERR;
}

static const char *bare_chip_name(const struct chip *c) {
    return strncmp(c->chip_name, "Ascend", 6) == 0 ? c->chip_name + 6 : c->chip_name;
}

static const struct template_spec *find_template(const struct chip *c, const char *name) {
    for (size_t i = 0; i < sizeof TEMPLATES / sizeof TEMPLATES[0]; i++)
        if (!strcmp(TEMPLATES[i].chip, bare_chip_name(c)) && !strcmp(TEMPLATES[i].name, name)) return &TEMPLATES[i];
    return NULL;
}

static int chip_fault(const struct chip *c, const char *call) {
    char name[32];
    snprintf(name, sizeof name, "%d:%d", c->card, c->device);
    return hami_fake_fault(name, call);
}

/* What entry point `call` returns about chip c under an injected fault (fake_faults.h), or DCMI_OK. */
static int injected(const struct chip *c, const char *call) {
    switch (chip_fault(c, call)) {
    case HAMI_FAULT_LOST: return DCMI_ERR_CODE_DEVICE_NOT_EXIST; /* "the device does not exist" (return codes table) */
    case HAMI_FAULT_ERROR: return DCMI_ERR_CODE_INNER_ERR;       /* "internal error": DCMI's catch-all */
    default: return DCMI_OK;
    }
}

/* The chip's health now: an injected "unhealthy" reads as 3, critical (what a chip whose HBM took an
 * uncorrectable ECC error reports). */
static unsigned int health_now(const struct chip *c, const char *call) {
    return chip_fault(c, call) == HAMI_FAULT_UNHEALTHY ? 3u : c->health;
}

/* Every entry point starts here: load the fixture, find the chip, and meet any fault injected on it. */
#define ENTER_CHIP(card_id, device_id, chip_var)                       \
    pthread_mutex_lock(&g_lock);                                       \
    int _rc = load_fixture();                                          \
    struct chip *chip_var = _rc == DCMI_OK ? find_chip(card_id, device_id) : NULL; \
    if (_rc == DCMI_OK && chip_var == NULL) _rc = DCMI_ERR_CODE_INVALID_DEVICE_ID; \
    if (_rc == DCMI_OK) _rc = injected(chip_var, __func__);           \
    if (_rc != DCMI_OK) {                                              \
        pthread_mutex_unlock(&g_lock);                                 \
        return _rc;                                                    \
    }

#define LEAVE(rc)                      \
    do {                               \
        pthread_mutex_unlock(&g_lock); \
        return (rc);                   \
    } while (0)

int dcmi_init(void) {
    pthread_mutex_lock(&g_lock);
    int rc = load_fixture();
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int dcmi_get_driver_version(char *driver_ver, unsigned int len) {
    if (driver_ver == NULL || len == 0) return DCMI_ERR_CODE_INVALID_PARAMETER;
    snprintf(driver_ver, len, "%s", "24.1.rc2-fake");
    return DCMI_OK;
}

int dcmi_get_card_list(int *card_num, int *card_list, int list_len) {
    if (card_num == NULL || card_list == NULL || list_len <= 0) return DCMI_ERR_CODE_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    int rc = load_fixture();
    if (rc != DCMI_OK) LEAVE(rc);
    int n = 0;
    for (int i = 0; i < g_chip_count; i++) {
        int seen = 0;
        for (int j = 0; j < n; j++) seen |= card_list[j] == g_chips[i].card;
        if (seen) continue;
        if (n == list_len) LEAVE(DCMI_ERR_CODE_INVALID_PARAMETER);
        card_list[n++] = g_chips[i].card;
    }
    *card_num = n;
    LEAVE(DCMI_OK);
}

int dcmi_get_device_num_in_card(int card_id, int *device_num) {
    if (device_num == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    int rc = load_fixture();
    if (rc != DCMI_OK) LEAVE(rc);
    int n = 0;
    for (int i = 0; i < g_chip_count; i++) n += g_chips[i].card == card_id;
    if (n == 0) LEAVE(DCMI_ERR_CODE_INVALID_DEVICE_ID);
    *device_num = n;
    LEAVE(DCMI_OK);
}

int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id) {
    if (device_logic_id == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    *device_logic_id = c->logic_id;
    LEAVE(DCMI_OK);
}

int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int *phyid) {
    if (phyid == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    int rc = load_fixture();
    if (rc != DCMI_OK) LEAVE(rc);
    for (int i = 0; i < g_chip_count; i++) {
        if ((unsigned int)g_chips[i].logic_id == logicid) {
            *phyid = (unsigned int)g_chips[i].phy_id;
            LEAVE(DCMI_OK);
        }
    }
    LEAVE(DCMI_ERR_CODE_INVALID_DEVICE_ID);
}

int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info) {
    if (chip_info == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    memset(chip_info, 0, sizeof *chip_info);
    hami_fixture_copy((char *)chip_info->chip_type, MAX_CHIP_NAME_LEN, c->chip_type);
    hami_fixture_copy((char *)chip_info->chip_name, MAX_CHIP_NAME_LEN, c->chip_name);
    hami_fixture_copy((char *)chip_info->chip_ver, MAX_CHIP_NAME_LEN, c->chip_ver);
    chip_info->aicore_cnt = c->aicore;
    LEAVE(DCMI_OK);
}

int dcmi_get_device_die_v2(int card_id, int device_id, int input_type, struct dcmi_die_id *die_id) {
    if (die_id == NULL || (input_type != DCMI_DIE_NDIE && input_type != DCMI_DIE_VDIE))
        return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    if (input_type == DCMI_DIE_VDIE) LEAVE(DCMI_ERR_CODE_NOT_SUPPORT);
    memcpy(die_id->soc_die, c->die, sizeof c->die);
    LEAVE(DCMI_OK);
}

int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all *pcie_info) {
    if (pcie_info == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    memset(pcie_info, 0, sizeof *pcie_info);
    pcie_info->venderid = 0x19e5;
    pcie_info->subvenderid = 0x0200;
    pcie_info->deviceid = strncmp(bare_chip_name(c), "310P", 4) == 0 ? 0xd500 : 0xd802;
    pcie_info->subdeviceid = 0x0100;
    pcie_info->domain = c->domain;
    pcie_info->bdf_busid = c->bus;
    pcie_info->bdf_deviceid = c->dev;
    pcie_info->bdf_funcid = c->func;
    LEAVE(DCMI_OK);
}

int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info) {
    if (hbm_info == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    if (c->hbm_mb == 0) LEAVE(DCMI_ERR_CODE_NOT_SUPPORT);
    memset(hbm_info, 0, sizeof *hbm_info);
    hbm_info->memory_size = c->hbm_mb;
    hbm_info->freq = c->hbm_mhz ? c->hbm_mhz : 1600;
    hbm_info->memory_usage = c->hbm_used_mb;
    hbm_info->temp = c->has_hbm_temp ? c->hbm_temp : c->temp;
    hbm_info->bandwith_util_rate = c->hbm_util;
    LEAVE(DCMI_OK);
}

int dcmi_get_device_memory_info_v3(int card_id, int device_id, struct dcmi_get_memory_info_stru *memory_info) {
    if (memory_info == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    if (c->ddr_mb == 0) LEAVE(DCMI_ERR_CODE_NOT_SUPPORT);
    memset(memory_info, 0, sizeof *memory_info);
    memory_info->memory_size = c->ddr_mb;
    memory_info->memory_available = c->ddr_mb - c->ddr_used_mb;
    memory_info->freq = 3200;
    memory_info->utiliza = (unsigned int)(c->ddr_used_mb * 100 / c->ddr_mb);
    LEAVE(DCMI_OK);
}

int dcmi_get_device_health(int card_id, int device_id, unsigned int *health) {
    if (health == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    *health = health_now(c, __func__);
    LEAVE(DCMI_OK);
}

int dcmi_get_device_errorcode_v2(int card_id, int device_id, int *error_count, unsigned int *error_code_list,
                                 unsigned int list_len) {
    if (error_count == NULL || error_code_list == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    unsigned int n = (unsigned int)c->error_count < list_len ? (unsigned int)c->error_count : list_len;
    memcpy(error_code_list, c->errors, n * sizeof(unsigned int));
    *error_count = (int)n;
    LEAVE(DCMI_OK);
}

int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type, unsigned int *utilization_rate) {
    if (utilization_rate == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    switch (input_type) {
    case DCMI_UTILIZATION_RATE_AICORE: *utilization_rate = c->aicore_util; break;
    case DCMI_UTILIZATION_RATE_AICPU: *utilization_rate = c->aicpu_util; break;
    case DCMI_UTILIZATION_RATE_HBM:
        if (c->hbm_mb == 0) LEAVE(DCMI_ERR_CODE_NOT_SUPPORT);
        *utilization_rate = c->hbm_util;
        break;
    case DCMI_UTILIZATION_RATE_DDR:
        if (c->ddr_mb == 0) LEAVE(DCMI_ERR_CODE_NOT_SUPPORT);
        *utilization_rate = (unsigned int)(c->ddr_used_mb * 100 / c->ddr_mb);
        break;
    default: LEAVE(DCMI_ERR_CODE_NOT_SUPPORT);
    }
    LEAVE(DCMI_OK);
}

int dcmi_get_device_temperature(int card_id, int device_id, int *temperature) {
    if (temperature == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    *temperature = c->temp;
    LEAVE(DCMI_OK);
}

int dcmi_get_device_power_info(int card_id, int device_id, int *power) {
    if (power == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    if (c->power < 0) LEAVE(DCMI_ERR_CODE_NOT_SUPPORT);
    *power = c->power;
    LEAVE(DCMI_OK);
}

int dcmi_get_device_frequency(int card_id, int device_id, int input_type, unsigned int *frequency) {
    if (frequency == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    unsigned int mhz = input_type == DCMI_FREQ_AICORE_CURRENT ? c->aicore_mhz
                       : input_type == DCMI_FREQ_HBM && c->hbm_mb ? c->hbm_mhz
                                                                  : 0;
    if (mhz == 0) LEAVE(DCMI_ERR_CODE_NOT_SUPPORT);
    *frequency = mhz;
    LEAVE(DCMI_OK);
}

int dcmi_get_device_ecc_info(int card_id, int device_id, int input_type, struct dcmi_ecc_info *info) {
    if (info == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    int kind = c->hbm_mb ? DCMI_DEVICE_TYPE_HBM : DCMI_DEVICE_TYPE_DDR; /* the chip's device memory */
    if (!c->has_ecc || input_type != kind) LEAVE(DCMI_ERR_CODE_NOT_SUPPORT);
    /* only the fields this header declares: a caller built against an older one has no room for more */
    info->enable_flag = 1;
    info->single_bit_error_cnt = info->total_single_bit_error_cnt = c->ecc_single;
    info->double_bit_error_cnt = info->total_double_bit_error_cnt = c->ecc_double;
    info->single_bit_isolated_pages_cnt = c->ecc_single_pages;
    info->double_bit_isolated_pages_cnt = c->ecc_double_pages;
    LEAVE(DCMI_OK);
}

static unsigned long long chip_memory_mb(const struct chip *c) {
    return c->hbm_mb != 0 ? c->hbm_mb : c->ddr_mb;
}

int dcmi_get_device_info(int card_id, int device_id, int main_cmd, unsigned int sub_cmd, void *buf,
                         unsigned int *size) {
    if (buf == NULL || size == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    if (main_cmd != DCMI_MAIN_CMD_VDEV_MNG) LEAVE(DCMI_ERR_CODE_NOT_SUPPORT);
    struct vnpu list[MAX_VNPUS];
    FILE *f = open_state();
    if (f == NULL) LEAVE(DCMI_ERR_CODE_INNER_ERR);
    int n = read_vnpus(f, list, MAX_VNPUS);
    hami_fake_state_close(f);
    if (sub_cmd == DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE) {
        if (*size < sizeof(struct dcmi_soc_total_resource)) LEAVE(DCMI_ERR_CODE_INVALID_PARAMETER);
        struct dcmi_soc_total_resource *total = buf;
        memset(total, 0, sizeof *total);
        for (int i = 0; i < n && total->vdev_num < DCMI_SOC_SPLIT_MAX; i++)
            if (list[i].card == card_id && list[i].device == device_id)
                total->vdev_id[total->vdev_num++] = list[i].vdev_id;
        total->computing.aic = (float)c->aicore;
        total->computing.memory_size = chip_memory_mb(c);
        *size = sizeof *total;
        LEAVE(DCMI_OK);
    }
    if (sub_cmd == DCMI_VMNG_SUB_CMD_GET_VDEV_RESOURCE) {
        if (*size < sizeof(struct dcmi_vdev_query_stru)) LEAVE(DCMI_ERR_CODE_INVALID_PARAMETER);
        struct dcmi_vdev_query_stru *query = buf;
        for (int i = 0; i < n; i++) {
            if (list[i].card != card_id || list[i].device != device_id || list[i].vdev_id != query->vdev_id) continue;
            const struct template_spec *t = find_template(c, list[i].template_name);
            memset(&query->query_info, 0, sizeof query->query_info);
            hami_fixture_copy(query->query_info.name, DCMI_VDEV_RES_NAME_LEN, list[i].template_name);
            query->query_info.status = 1;
            query->query_info.vfid = list[i].vdev_id;
            query->query_info.computing.aic = t != NULL ? (float)t->aicore : 0.0f;
            query->query_info.computing.memory_size = t != NULL ? t->memory_mb : 0;
            query->query_info.computing.vdev_memory_total = query->query_info.computing.memory_size;
            query->query_info.computing.vdev_memory_free = query->query_info.computing.memory_size;
            *size = sizeof *query;
            LEAVE(DCMI_OK);
        }
        LEAVE(DCMI_ERR_CODE_INVALID_DEVICE_ID);
    }
    LEAVE(DCMI_ERR_CODE_NOT_SUPPORT);
}

int dcmi_create_vdevice(int card_id, int device_id, struct dcmi_create_vdev_res_stru *vdev,
                        struct dcmi_create_vdev_out *out) {
    if (vdev == NULL || out == NULL) return DCMI_ERR_CODE_INVALID_PARAMETER;
    ENTER_CHIP(card_id, device_id, c);
    char name[TEMPLATE_NAME_LEN + 1];
    memcpy(name, vdev->template_name, TEMPLATE_NAME_LEN);
    name[TEMPLATE_NAME_LEN] = '\0';
    const struct template_spec *t = find_template(c, name);
    if (t == NULL) LEAVE(DCMI_ERR_CODE_INVALID_PARAMETER);
    if (health_now(c, __func__) >= 2) LEAVE(DCMI_ERR_CODE_DEVICE_NOT_EXIST);
    struct vnpu list[MAX_VNPUS];
    FILE *f = open_state();
    if (f == NULL) LEAVE(DCMI_ERR_CODE_INNER_ERR);
    int n = read_vnpus(f, list, MAX_VNPUS);
    unsigned int used_aicore = 0, count = 0;
    unsigned long long used_mb = 0;
    unsigned int base = 100u + (unsigned int)c->phy_id * 16u;
    unsigned int chosen = vdev->vdev_id;
    for (int i = 0; i < n; i++) {
        if (list[i].card != card_id || list[i].device != device_id) continue;
        const struct template_spec *u = find_template(c, list[i].template_name);
        used_aicore += u != NULL ? u->aicore : 0;
        used_mb += u != NULL ? u->memory_mb : 0;
        count++;
    }
    int rc = DCMI_OK;
    if (used_aicore + t->aicore > c->aicore || used_mb + t->memory_mb > chip_memory_mb(c) || n == MAX_VNPUS ||
        count == DCMI_SOC_SPLIT_MAX) {
        rc = DCMI_ERR_CODE_RESOURCE_OCCUPIED;
    } else {
        if (chosen == 0xFFFFFFFFu) {
            for (chosen = base;; chosen++) {
                int taken = 0;
                for (int i = 0; i < n; i++) taken |= list[i].vdev_id == chosen;
                if (!taken) break;
            }
        } else {
            for (int i = 0; i < n; i++)
                if (list[i].vdev_id == chosen) rc = DCMI_ERR_CODE_RESOURCE_OCCUPIED;
        }
    }
    if (rc == DCMI_OK) {
        list[n].card = card_id;
        list[n].device = device_id;
        list[n].vdev_id = chosen;
        hami_fixture_copy(list[n].template_name, NAME_LEN, t->name);
        rc = write_vnpus(f, list, n + 1);
    }
    hami_fake_state_close(f);
    if (rc == DCMI_OK) {
        memset(out, 0, sizeof *out);
        out->vdev_id = chosen;
        out->pcie_bus = c->bus;
        out->pcie_device = c->dev;
        out->pcie_func = c->func;
        out->vfg_id = vdev->vfg_id;
    }
    LEAVE(rc);
}

int dcmi_set_destroy_vdevice(int card_id, int device_id, unsigned int vdevid) {
    ENTER_CHIP(card_id, device_id, c);
    (void)c;
    struct vnpu list[MAX_VNPUS];
    FILE *f = open_state();
    if (f == NULL) LEAVE(DCMI_ERR_CODE_INNER_ERR);
    int n = read_vnpus(f, list, MAX_VNPUS);
    int kept = 0, found = 0;
    for (int i = 0; i < n; i++) {
        if (list[i].card == card_id && list[i].device == device_id && list[i].vdev_id == vdevid) {
            found = 1;
            continue;
        }
        list[kept++] = list[i];
    }
    int rc = found ? write_vnpus(f, list, kept) : DCMI_ERR_CODE_INVALID_DEVICE_ID;
    hami_fake_state_close(f);
    LEAVE(rc);
}
