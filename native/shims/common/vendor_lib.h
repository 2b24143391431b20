/* Opening a vendor library the application already uses, for the shims. */
#ifndef HAMI_VENDOR_LIB_H
#define HAMI_VENDOR_LIB_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>

/* The library may be loaded privately (dlopen without RTLD_GLOBAL), out of
 * RTLD_NEXT's reach, so open it by soname; loading it is the fallback. */
static inline void *hami_open_vendor_lib(const char *tag, const char *soname) {
    void *h = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) h = dlopen(soname, RTLD_LAZY);
    if (!h) fprintf(stderr, "[hami-limiter/%s] cannot load %s: %s\n", tag, soname, dlerror());
    return h;
}

#endif
