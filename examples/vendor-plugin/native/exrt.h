/* The Example Runtime (libexrt.so): the device-memory API of the (simulated) Example Accelerator.
 *
 * A real vendor has such a runtime already; this one exists so the example plugin can show a
 * limiter shim end to end.  It keeps books only (no memory is touched): each device has
 * $EXRT_MEMORY_MIB of memory (default 1 TiB), so an out-of-memory error in the conformance
 * suite's check can only come from the limiter. */
#ifndef EXRT_H
#define EXRT_H

#include <stddef.h>

typedef int exrtError;

#define EXRT_SUCCESS 0
#define EXRT_ERROR_INVALID 1
#define EXRT_ERROR_OUT_OF_MEMORY 2
#define EXRT_ERROR_NOT_INITIALIZED 3

exrtError exrtSetDevice(int device);
exrtError exrtGetDevice(int *device);
exrtError exrtMalloc(void **ptr, size_t bytes);
exrtError exrtFree(void *ptr);
exrtError exrtMemGetInfo(size_t *free_bytes, size_t *total_bytes);

#endif
