/*
 * Faults injected into a fake vendor library while it is loaded: one mechanism shared by the fake
 * NVML, DCMI and CNDev (fake_faults.c), so a test - or the conformance suite's fault injector - can
 * make a device fail in the middle of a run and see what the adapter does about it.
 *
 * $HAMI_FAKE_FAULTS names a control file.  Every library call about a device looks at it (re-read
 * whenever its inode, size or modification time changed; absent or unset: no faults), so a process
 * that already loaded the library sees a fault from its next call on.  One fault per line, '#'
 * starts a comment:
 *
 *   unhealthy <device>        the device's health reading goes bad (a double-bit ECC error, an XID storm)
 *   lost <device>             the device fell off the bus: calls about it return the vendor's
 *                             "device lost" code
 *   error <device> [<call>]   calls about it (or only the entry point named <call>, e.g.
 *                             nvmlDeviceGetMemoryInfo) return the vendor's generic error
 *
 * <device> is the fake's own name for a device - the fake NVML: its UUID; the fake DCMI:
 * "<card>:<device>"; the fake CNDev: its UUID - or "*" for every device.  Each fake maps the fault
 * to its vendor's real return code and says which real error it mirrors.
 */
#ifndef HAMI_FAKE_FAULTS_H
#define HAMI_FAKE_FAULTS_H

#define HAMI_FAULT_NONE 0
#define HAMI_FAULT_UNHEALTHY 1
#define HAMI_FAULT_ERROR 2
#define HAMI_FAULT_LOST 3

/* The gravest fault a call of entry point `call` about `device` meets now (HAMI_FAULT_*). */
__attribute__((visibility("hidden"))) int hami_fake_fault(const char *device, const char *call);

#endif
