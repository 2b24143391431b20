/* Internal to the Cambricon shim. */
#ifndef HAMI_CAMBRICON_SHIM_H
#define HAMI_CAMBRICON_SHIM_H

#include "ptrmap.h"
#include "shim_core.h"

#define HAMI_EXPORT __attribute__((visibility("default")))
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* CNRT is built on CNDrv: while a CNRT wrapper runs, CNDrv calls it makes
 * were already accounted and must not be counted twice. */
extern __thread int hami_in_cnrt;
extern hami_ptrmap hami_cn_ptrs;

void hami_cambricon_ensure(void);

#endif
