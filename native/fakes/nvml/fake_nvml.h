/* What the fake NVML's parts share (fake_nvml.c: devices and fixture; fake_nvml_fields.c: monitoring fields). */
#ifndef HAMI_FAKE_NVML_H
#define HAMI_FAKE_NVML_H

#include "hami_nvml_api.h"

#define API __attribute__((visibility("default")))

/* A physical GPU handle that is alive: its index and power draw, or the error entry point `call`
 * returns (an injected fault, fake_faults.h, may name the call). */
nvmlReturn_t hami_fake_nvml_gpu_at(nvmlDevice_t device, unsigned int *index, unsigned int *power_mw,
                                   const char *call);
#define hami_fake_nvml_gpu(device, index, power_mw) hami_fake_nvml_gpu_at((device), (index), (power_mw), __func__)
/* The handle of GPU ``index`` (for events, which name their device). */
nvmlDevice_t hami_fake_nvml_handle(unsigned int index);
/* A fixture key of a [gpu] section that fake_nvml.c does not know: 1 when it is a field's. */
int hami_fake_nvml_field(unsigned int gpu, const char *key, const char *value);
void hami_fake_nvml_fields_reset(void);

#endif
