"""Placeholder cffi build (replaced shortly by the full limiter core binding)."""

from cffi import FFI

ffibuilder = FFI()
ffibuilder.cdef("int hami_native_version(void);")
ffibuilder.set_source("hami_devices._native", "static int hami_native_version(void) { return 1; }")

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
