/*
 * The fake NVML's monitoring fields: what a monitoring agent (DCGM, the hami-devices exporter) reads
 * besides memory, utilization, temperature and power.  A field a [gpu] section of the fixture does not
 * give answers NVML_ERROR_NOT_SUPPORTED, as a driver does for what the board lacks.
 *
 *   clocks = <SM MHz> <memory MHz>                 nvmlDeviceGetClockInfo (graphics = SM)
 *   pcie = <TX KB/s> <RX KB/s>                     nvmlDeviceGetPcieThroughput
 *   ecc = <corrected> <uncorrected>                nvmlDeviceGetTotalEccErrors (volatile and aggregate)
 *   retired = <single-bit pages> <double-bit pages> <pending 0|1>
 *                                                  nvmlDeviceGetRetiredPages, ...PendingStatus
 *   remapped = <correctable> <uncorrectable> <pending 0|1> <failed 0|1>
 *                                                  nvmlDeviceGetRemappedRows
 *   energy_mj = <mJ when the library loads>        nvmlDeviceGetTotalEnergyConsumption: grows by the
 *                                                  power draw from then on, as a counter does
 *   memory_temp = <celsius>                        nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)
 *   codec = <encoder %> <decoder %>                nvmlDeviceGet{En,De}coderUtilization
 *   xid = <XID>                                    (repeatable) an XID event, delivered once to each
 *                                                  event set registered for XID errors on the GPU
 *   tensor = <percent>                             GPM: the GPU supports it, and the tensor pipes were
 *                                                  busy that share of any interval between two samples
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_nvml.h"

#define MAX_GPUS 16
#define MAX_XIDS 8
#define MAX_WATCH 16
#define SAMPLE_MAGIC 0x47504d53u

typedef struct {
    int has_clocks, has_pcie, has_ecc, has_retired, has_remapped, has_energy, has_memory_temp, has_codec;
    int has_tensor;
    unsigned int sm_mhz, mem_mhz, tx_kbps, rx_kbps, enc_pct, dec_pct, memory_temp;
    unsigned long long ecc_corrected, ecc_uncorrected, energy_mj;
    unsigned int retired_sbe, retired_dbe, retired_pending;
    unsigned int remap_corr, remap_unc, remap_pending, remap_failed;
    double tensor_pct;
    unsigned int nxid, xid[MAX_XIDS];
} fields;

static fields g_fields[MAX_GPUS];
static pthread_mutex_t g_fields_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long g_loaded_ns;

static unsigned long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

void hami_fake_nvml_fields_reset(void) {
    memset(g_fields, 0, sizeof g_fields);
    g_loaded_ns = now_ns();
}

int hami_fake_nvml_field(unsigned int gpu, const char *key, const char *value) {
    if (gpu >= MAX_GPUS) return 0;
    fields *f = &g_fields[gpu];
    if (!strcmp(key, "clocks")) f->has_clocks = sscanf(value, "%u %u", &f->sm_mhz, &f->mem_mhz) == 2;
    else if (!strcmp(key, "pcie")) f->has_pcie = sscanf(value, "%u %u", &f->tx_kbps, &f->rx_kbps) == 2;
    else if (!strcmp(key, "ecc")) f->has_ecc = sscanf(value, "%llu %llu", &f->ecc_corrected, &f->ecc_uncorrected) == 2;
    else if (!strcmp(key, "retired"))
        f->has_retired = sscanf(value, "%u %u %u", &f->retired_sbe, &f->retired_dbe, &f->retired_pending) == 3;
    else if (!strcmp(key, "remapped"))
        f->has_remapped =
            sscanf(value, "%u %u %u %u", &f->remap_corr, &f->remap_unc, &f->remap_pending, &f->remap_failed) == 4;
    else if (!strcmp(key, "energy_mj")) f->has_energy = sscanf(value, "%llu", &f->energy_mj) == 1;
    else if (!strcmp(key, "memory_temp")) f->has_memory_temp = sscanf(value, "%u", &f->memory_temp) == 1;
    else if (!strcmp(key, "codec")) f->has_codec = sscanf(value, "%u %u", &f->enc_pct, &f->dec_pct) == 2;
    else if (!strcmp(key, "tensor")) f->has_tensor = sscanf(value, "%lf", &f->tensor_pct) == 1;
    else if (!strcmp(key, "xid")) {
        if (f->nxid < MAX_XIDS && sscanf(value, "%u", &f->xid[f->nxid]) == 1) f->nxid++;
    } else
        return 0;
    return 1;
}

/* The fields of a live GPU: SUCCESS, or the error entry point `call` returns. */
static nvmlReturn_t fields_at(nvmlDevice_t device, fields **out, unsigned int *power_mw, const char *call) {
    unsigned int index, power;
    nvmlReturn_t r = hami_fake_nvml_gpu_at(device, &index, &power, call);
    if (r) return r;
    if (index >= MAX_GPUS) return NVML_ERROR_INVALID_ARGUMENT;
    *out = &g_fields[index];
    if (power_mw) *power_mw = power;
    return NVML_SUCCESS;
}
#define fields_of(device, out, power_mw) fields_at((device), (out), (power_mw), __func__)

#define FIELDS_OR_RETURN(device, has, power)                  \
    fields *f;                                                \
    nvmlReturn_t r_ = fields_of((device), &f, (power));       \
    if (r_) return r_;                                        \
    if (!f->has) return NVML_ERROR_NOT_SUPPORTED

API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock) {
    FIELDS_OR_RETURN(device, has_clocks, NULL);
    if (!clock) return NVML_ERROR_INVALID_ARGUMENT;
    if (type == NVML_CLOCK_SM || type == NVML_CLOCK_GRAPHICS) *clock = f->sm_mhz;
    else if (type == NVML_CLOCK_MEM) *clock = f->mem_mhz;
    else return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, int counter, unsigned int *value) {
    FIELDS_OR_RETURN(device, has_pcie, NULL);
    if (!value || (counter != NVML_PCIE_UTIL_TX_BYTES && counter != NVML_PCIE_UTIL_RX_BYTES))
        return NVML_ERROR_INVALID_ARGUMENT;
    *value = counter == NVML_PCIE_UTIL_TX_BYTES ? f->tx_kbps : f->rx_kbps;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type, int counter_type,
                                             unsigned long long *count) {
    FIELDS_OR_RETURN(device, has_ecc, NULL);
    if (!count || (counter_type != NVML_VOLATILE_ECC && counter_type != NVML_AGGREGATE_ECC))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (error_type == NVML_MEMORY_ERROR_TYPE_CORRECTED) *count = f->ecc_corrected;
    else if (error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED) *count = f->ecc_uncorrected;
    else return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *count,
                                           unsigned long long *addresses) {
    FIELDS_OR_RETURN(device, has_retired, NULL);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n;
    if (cause == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS) n = f->retired_sbe;
    else if (cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR) n = f->retired_dbe;
    else return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int room = *count;
    *count = n;
    if (room < n || (n && !addresses)) return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned int i = 0; i < n; i++) addresses[i] = 0x100000ull * (i + 1) + (unsigned long long)cause;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *pending) {
    FIELDS_OR_RETURN(device, has_retired, NULL);
    if (!pending) return NVML_ERROR_INVALID_ARGUMENT;
    *pending = f->retired_pending ? 1 : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    unsigned int power_mw = 0;
    FIELDS_OR_RETURN(device, has_energy, &power_mw);
    if (!energy) return NVML_ERROR_INVALID_ARGUMENT;
    /* mW x ms / 1000 = mJ: the board has drawn its power since the library was loaded */
    *energy = f->energy_mj + (unsigned long long)power_mw * ((now_ns() - g_loaded_ns) / 1000000ull) / 1000ull;
    return NVML_SUCCESS;
}

static nvmlReturn_t codec(nvmlDevice_t device, int decoder, unsigned int *utilization, unsigned int *period_us) {
    FIELDS_OR_RETURN(device, has_codec, NULL);
    if (!utilization || !period_us) return NVML_ERROR_INVALID_ARGUMENT;
    *utilization = decoder ? f->dec_pct : f->enc_pct;
    *period_us = 167000;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                 unsigned int *period_us) {
    return codec(device, 0, utilization, period_us);
}

API nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                 unsigned int *period_us) {
    return codec(device, 1, utilization, period_us);
}

API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values) {
    fields *f;
    nvmlReturn_t r = fields_of(device, &f, NULL);
    if (r) return r;
    if (count < 0 || (count && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = (long long)ts.tv_sec * 1000000ll + ts.tv_nsec / 1000;
        v->latencyUsec = 0;
        if (v->fieldId == NVML_FI_DEV_MEMORY_TEMP && f->has_memory_temp) {
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = f->memory_temp;
            v->nvmlReturn = NVML_SUCCESS;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

#ifndef HAMI_FAKE_NVML_OLD
API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *correctable, unsigned int *uncorrectable,
                                           unsigned int *pending, unsigned int *failed) {
    FIELDS_OR_RETURN(device, has_remapped, NULL);
    if (!correctable || !uncorrectable || !pending || !failed) return NVML_ERROR_INVALID_ARGUMENT;
    *correctable = f->remap_corr;
    *uncorrectable = f->remap_unc;
    *pending = f->remap_pending;
    *failed = f->remap_failed;
    return NVML_SUCCESS;
}
#endif

/* ------------------------------------------------------------------ XID events */

struct nvmlEventSet_st {
    unsigned int watched[MAX_WATCH]; /* GPU indexes registered for XID errors */
    unsigned int nwatched;
    unsigned int delivered[MAX_GPUS]; /* XIDs of each GPU this set has handed out */
};

API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof **set);
    return *set ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_RESOURCES;
}

API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    free(set);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types) {
    fields *f;
    nvmlReturn_t r = fields_of(device, &f, NULL);
    if (r) return r;
    if (!types) return NVML_ERROR_INVALID_ARGUMENT;
    *types = NVML_EVENT_TYPE_XID_CRITICAL_ERROR;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    unsigned int index, power;
    nvmlReturn_t r = hami_fake_nvml_gpu(device, &index, &power);
    if (r) return r;
    if (!set || index >= MAX_GPUS) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~NVML_EVENT_TYPE_XID_CRITICAL_ERROR) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&g_fields_lock);
    if (set->nwatched < MAX_WATCH) set->watched[set->nwatched++] = index;
    pthread_mutex_unlock(&g_fields_lock);
    return NVML_SUCCESS;
}

static int next_event(nvmlEventSet_t set, nvmlEventData_t *data) {
    for (unsigned int w = 0; w < set->nwatched; w++) {
        unsigned int gpu = set->watched[w];
        fields *f = &g_fields[gpu];
        if (set->delivered[gpu] < f->nxid) {
            memset(data, 0, sizeof *data);
            data->device = hami_fake_nvml_handle(gpu);
            data->eventType = NVML_EVENT_TYPE_XID_CRITICAL_ERROR;
            data->eventData = f->xid[set->delivered[gpu]++];
            data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu; /* the whole GPU */
            return 1;
        }
    }
    return 0;
}

API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&g_fields_lock);
    int found = next_event(set, data);
    pthread_mutex_unlock(&g_fields_lock);
    if (found) return NVML_SUCCESS;
    if (timeout_ms) {
        struct timespec ts = {(time_t)(timeout_ms / 1000), (long)(timeout_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL); /* nothing else ever arrives in the fake */
    }
    return NVML_ERROR_TIMEOUT;
}

API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    return nvmlEventSetWait_v2(set, data, timeout_ms);
}

/* ------------------------------------------------------------------ GPM */

#ifndef HAMI_FAKE_NVML_OLD
struct nvmlGpmSample_st {
    unsigned int magic;
    int taken;
    unsigned int gpu;
    unsigned long long at_ns;
};

API nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    fields *f;
    nvmlReturn_t r = fields_of(device, &f, NULL);
    if (r) return r;
    if (!support) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = f->has_tensor ? 1 : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof **sample);
    if (!*sample) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    (*sample)->magic = SAMPLE_MAGIC;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    if (!sample || sample->magic != SAMPLE_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    sample->magic = 0;
    free(sample);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    unsigned int index, power;
    nvmlReturn_t r = hami_fake_nvml_gpu(device, &index, &power);
    if (r) return r;
    if (!sample || sample->magic != SAMPLE_MAGIC || index >= MAX_GPUS) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g_fields[index].has_tensor) return NVML_ERROR_NOT_SUPPORTED;
    sample->taken = 1;
    sample->gpu = index;
    sample->at_ns = now_ns();
    return NVML_SUCCESS;
}

static char g_tensor_short[] = "any_tensor_util", g_tensor_long[] = "any tensor pipe activity", g_pct[] = "%";

API nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *get) {
    if (!get) return NVML_ERROR_INVALID_ARGUMENT;
    if (get->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlGpmSample_t a = get->sample1, b = get->sample2;
    if (!a || !b || a->magic != SAMPLE_MAGIC || b->magic != SAMPLE_MAGIC || !a->taken || !b->taken ||
        a->gpu != b->gpu || b->at_ns < a->at_ns)
        return NVML_ERROR_INVALID_ARGUMENT; /* two samples of one GPU, the first one first */
    for (unsigned int i = 0; i < get->numMetrics; i++) {
        nvmlGpmMetric_t *m = &get->metrics[i];
        memset(&m->metricInfo, 0, sizeof m->metricInfo);
        if (m->metricId == NVML_GPM_METRIC_ANY_TENSOR_UTIL) {
            m->value = g_fields[a->gpu].tensor_pct;
            m->nvmlReturn = NVML_SUCCESS;
            m->metricInfo.shortName = g_tensor_short;
            m->metricInfo.longName = g_tensor_long;
            m->metricInfo.unit = g_pct;
        } else {
            m->value = 0;
            m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}
#endif
