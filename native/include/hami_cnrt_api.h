/*
 * The Cambricon CNRT declarations the Cambricon shim and the fake libcnrt need
 * (cnrt.h is not required to build).  From Cambricon's public API: cnrtRet_t
 * with cnrtSuccess 0 and cnrtErrorNoMem 100100; cnrtInvokeKernel takes the
 * kernel, a cnrtDim3_t, the function type, the argument array, a reserved
 * size and the queue.
 */
#ifndef HAMI_CNRT_API_H
#define HAMI_CNRT_API_H

#include <stddef.h>

typedef enum {
    cnrtSuccess = 0,
    cnrtErrorNoDevice = 100004,
    cnrtErrorNoMem = 100100,
    cnrtErrorArgsInvalid = 100006,
} cnrtRet_t;

typedef struct cnrtDim3 {
    unsigned int x;
    unsigned int y;
    unsigned int z;
} cnrtDim3_t;

typedef enum {
    cnrtFuncTypeBlock = 1,
    cnrtFuncTypeUnion1 = 4,
} cnrtFunctionType_t;

typedef struct cnrtQueue *cnrtQueue_t;

cnrtRet_t cnrtSetDevice(int device);
cnrtRet_t cnrtGetDevice(int *device);
cnrtRet_t cnrtGetDeviceCount(unsigned int *count);
cnrtRet_t cnrtMalloc(void **pPtr, size_t bytes);
cnrtRet_t cnrtFree(void *ptr);
cnrtRet_t cnrtMemGetInfo(size_t *free, size_t *total);
cnrtRet_t cnrtInvokeKernel(const void *kernel, cnrtDim3_t dim, cnrtFunctionType_t ktype, void **args,
                           size_t reserved, cnrtQueue_t queue);
cnrtRet_t cnrtQueueCreate(cnrtQueue_t *pQueue);
cnrtRet_t cnrtQueueSync(cnrtQueue_t queue);

#endif
