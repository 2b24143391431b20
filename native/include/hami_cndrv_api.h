/*
 * The Cambricon CNDrv (driver API) declarations the Cambricon shim and the
 * fake libcndrv need (cn_api.h is not required to build).  CNresult
 * CN_SUCCESS 0 and CN_MEMORY_ERROR_OUT_OF_MEMORY 100100; addresses are 64-bit
 * integers; cnInvokeKernel takes dims, a kernel class, a queue, the parameter
 * array and "extra", like cuLaunchKernel.
 */
#ifndef HAMI_CNDRV_API_H
#define HAMI_CNDRV_API_H

#include <stdint.h>

typedef enum {
    CN_SUCCESS = 0,
    CN_ERROR_NOT_INITIALIZED = 100002,
    CN_CONTEXT_ERROR_INVALID = 100201,
    CN_MEMORY_ERROR_OUT_OF_MEMORY = 100100,
} CNresult;

typedef uint64_t cn_uint64_t;
typedef cn_uint64_t CNaddr;
typedef int CNdev;
typedef struct CNcontext_st *CNcontext;
typedef struct CNkernel_st *CNkernel;
typedef struct CNqueue_st *CNqueue;
typedef enum { CN_KERNEL_CLASS_BLOCK = 1, CN_KERNEL_CLASS_UNION = 4 } KernelClass;

CNresult cnInit(int flags);
CNresult cnDeviceGetCount(int *count);
CNresult cnDeviceGet(CNdev *device, int ordinal);
CNresult cnCtxCreate(CNcontext *pctx, unsigned int flags, CNdev dev);
CNresult cnCtxSetCurrent(CNcontext ctx);
CNresult cnCtxGetDevice(CNdev *device);
CNresult cnMalloc(CNaddr *pmluAddr, cn_uint64_t bytes);
CNresult cnFree(CNaddr addr);
CNresult cnMemGetInfo(cn_uint64_t *pfreeBytes, cn_uint64_t *ptotalBytes);
CNresult cnInvokeKernel(CNkernel hkernel, unsigned int dimx, unsigned int dimy, unsigned int dimz, KernelClass c,
                        unsigned int reserve, CNqueue hqueue, void **kernelParams, void **extra);

#endif
