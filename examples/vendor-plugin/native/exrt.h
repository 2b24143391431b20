/* The Example Runtime (libexrt.so): the device-memory API of the (simulated) Example Accelerator.
 *
 * A real vendor has such a runtime already; this one exists so the example plugin can show a
 * limiter shim end to end.  It keeps books only (no memory is touched): each device has
 * $EXRT_MEMORY_MIB of memory (default 1 TiB), so an out-of-memory error in the conformance
 * suite's check can only come from the limiter.
 *
 * Faults on demand: $EXRT_FAULTS names a control file the runtime looks at on every call about a
 * device (read again only when its inode, size or modification time changed), so a test can make
 * a device fail while a process has the runtime loaded.  One fault per line, '#' starts a comment:
 *
 *   unhealthy <device>        exrtDeviceGetHealth says the device is unhealthy
 *   lost <device>             the device fell off the bus: calls about it return EXRT_ERROR_DEVICE_LOST
 *   error <device> [<call>]   calls about it (or only the one named, e.g. exrtDeviceGetHealth)
 *                             return EXRT_ERROR_UNKNOWN
 *
 * <device> is the device's ordinal, or "*" for every device. */
#ifndef EXRT_H
#define EXRT_H

#include <stddef.h>

typedef int exrtError;

#define EXRT_SUCCESS 0
#define EXRT_ERROR_INVALID 1
#define EXRT_ERROR_OUT_OF_MEMORY 2
#define EXRT_ERROR_NOT_INITIALIZED 3
#define EXRT_ERROR_DEVICE_LOST 4 /* the device no longer answers (fell off the bus) */
#define EXRT_ERROR_UNKNOWN 5     /* the call failed (a hung or restarting driver) */

exrtError exrtSetDevice(int device);
exrtError exrtGetDevice(int *device);
exrtError exrtMalloc(void **ptr, size_t bytes);
exrtError exrtFree(void *ptr);
exrtError exrtMemGetInfo(size_t *free_bytes, size_t *total_bytes);
/* *healthy: 1 when the device is fit to run work, 0 when its health went bad. */
exrtError exrtDeviceGetHealth(int device, int *healthy);

#endif
