"""cffi (out-of-line API mode) build of ``hami_devices._fgd``, the fragmentation-aware policy's inner loop.

``setup.py`` names ``native/scheduling/fgd_build.py:ffibuilder`` in ``cffi_modules``, so ``pip install``
compiles it.  To rebuild in place during development, run ``python native/scheduling/fgd_build.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def _rel(path: Path) -> str:
    try:
        return os.path.relpath(path, Path.cwd()) if path.is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


CDEF = """
#define HAMI_FGD_MILLI ...
#define HAMI_FGD_MAX_SHAPES ...
typedef struct hami_fgd_state {
    int64_t slots;
    int64_t shapes;
    const int64_t *need;
    const int64_t *need_class;
    const int64_t *free;
    const int64_t *count_ge;
    const int64_t *small;
    const int64_t *total;
    const int64_t *cpu_free;
    const int64_t *mem_free;
    const double *base;
    const int64_t *shape_cpu;
    const int64_t *shape_mem;
    const int64_t *shape_num;
    const double *weight;
    int32_t check_memory;
    int32_t cpu_only_all_idle;
    const double *waste;
    const int64_t *feed_cpu;
    const int64_t *feed_mem;
    const double *end_waste;
} hami_fgd_state;
void hami_fgd_share(const hami_fgd_state *st, int64_t k, const int64_t *node, const int64_t *slot,
                    const int64_t *take, int64_t cpu, int64_t mem, double *out);
void hami_fgd_whole(const hami_fgd_state *st, int64_t k, const int64_t *node, int64_t count, int64_t cpu,
                    int64_t mem, double *out);
void hami_fgd_end_waste(const hami_fgd_state *st, int64_t k, const int64_t *node, const int64_t *slot,
                        const int64_t *left, int64_t cpu, int64_t mem, double *out);
void hami_fgd_node_waste(const hami_fgd_state *st, int64_t k, const int64_t *node, double *out);
"""

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "hami_devices._fgd",
    '#include "hami_fgd.h"',
    sources=[_rel(HERE / "fgd.c")],
    include_dirs=[_rel(ROOT / "native" / "include")],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra"],
    libraries=["m"],
)

if __name__ == "__main__":
    os.chdir(ROOT)
    built = Path(ffibuilder.compile(tmpdir=str(ROOT), target="_fgd.abi3.so", verbose=False)).resolve()
    print(built)
