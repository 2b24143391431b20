/* CUDA arrays and mipmapped arrays (textures and surfaces): device memory
 * with an opaque layout, larger than width x height x element size.
 *
 * What to reserve is asked of the driver when it can say: a throw-away array
 * with the same descriptor and CUDA_ARRAY3D_DEFERRED_MAPPING takes no memory
 * and reports its size (cu(Mipmapped)ArrayGetMemoryRequirements).  Where the
 * device cannot (no deferred mapping), an upper bound of a block-linear
 * layout is reserved: rows padded to 64 bytes, heights and depths to the
 * next power of two (at least 8 rows, blocks of at most 256 rows and 32
 * slices), rounded to 64 KiB.  Sparse and deferred-mapping arrays take no
 * memory at creation (it comes from cuMemCreate, counted there). */
#define _GNU_SOURCE
#include <string.h>

#include "cuda_shim.h"

#define PAGE (64ull << 10)

static hami_ptrmap g_arrays, g_mipmaps;

static uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

static uint64_t pow2_at_least(uint64_t v) {
    uint64_t p = 1;
    while (p < v) p <<= 1;
    return p;
}

/* Twice the bytes of one element (block-compressed formats store half a byte a texel). */
static uint64_t element_halves(unsigned int format, unsigned int channels) {
    switch (format) {
    case 0x01: case 0x08: return 2ull * channels;
    case 0x02: case 0x09: case 0x10: return 4ull * channels;
    case 0x03: case 0x0a: case 0x20: return 8ull * channels;
    case 0xc0: case 0xc6: return 2;                     /* 8-bit normalised x1 */
    case 0xc1: case 0xc7: case 0xc3: case 0xc9: return 4;
    case 0xc2: case 0xc8: case 0xc4: case 0xca: case 0x50: return 8;
    case 0xc5: case 0xcb: return 16;
    case 0x91: case 0x92: case 0x97: case 0x98: return 1; /* BC1, BC4 */
    case 0x93: case 0x94: case 0x95: case 0x96: case 0x99: case 0x9a: case 0x9b: case 0x9c: case 0x9d: case 0x9e:
        return 2;                                          /* BC2/3/5/6H/7 */
    default: return 32ull * (channels ? channels : 4);    /* video and future formats: 16 bytes a channel */
    }
}

static uint64_t padded(uint64_t v, uint64_t lo, uint64_t hi) {
    uint64_t block = pow2_at_least(v);
    if (block < lo) block = lo;
    if (block > hi) block = hi;
    return round_up(v, block);
}

static uint64_t estimate_level(uint64_t w, uint64_t h, uint64_t d, unsigned int format, unsigned int channels) {
    uint64_t row = round_up((w * element_halves(format, channels) + 1) / 2, 64);
    uint64_t rows = h ? padded(h, 8, 256) : 1;
    uint64_t slices = d ? padded(d, 1, 32) : 1;
    return round_up(row * rows * slices, PAGE);
}

static uint64_t estimate(const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels) {
    uint64_t w = desc->Width, h = desc->Height, d = desc->Depth, total = 0;
    if ((desc->Flags & CUDA_ARRAY3D_CUBEMAP) && !(desc->Flags & CUDA_ARRAY3D_LAYERED)) d = 6;
    for (unsigned int l = 0; l < (levels ? levels : 1); l++) {
        total += estimate_level(w, h, d, desc->Format, desc->NumChannels);
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        d = d > 1 && !(desc->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) ? d / 2 : d;
    }
    return total;
}

/* The driver's own size for this descriptor, or 0 when it cannot tell. */
static uint64_t probe(const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels, int mipmapped, int dev) {
    CUDA_ARRAY3D_DESCRIPTOR deferred = *desc;
    deferred.Flags |= CUDA_ARRAY3D_DEFERRED_MAPPING;
    CUDA_ARRAY_MEMORY_REQUIREMENTS req;
    memset(&req, 0, sizeof req);
    uint64_t size = 0;
    if (mipmapped) {
        CUmipmappedArray m;
        if (hami_real.cuMipmappedArrayCreate && hami_real.cuMipmappedArrayGetMemoryRequirements &&
            hami_real.cuMipmappedArrayCreate(&m, &deferred, levels) == CUDA_SUCCESS) {
            if (hami_real.cuMipmappedArrayGetMemoryRequirements(&req, m, dev) == CUDA_SUCCESS) size = req.size;
            hami_real.cuMipmappedArrayDestroy(m);
        }
    } else {
        CUarray a;
        if (hami_real.cuArray3DCreate_v2 && hami_real.cuArrayGetMemoryRequirements &&
            hami_real.cuArray3DCreate_v2(&a, &deferred) == CUDA_SUCCESS) {
            if (hami_real.cuArrayGetMemoryRequirements(&req, a, dev) == CUDA_SUCCESS) size = req.size;
            hami_real.cuArrayDestroy(a);
        }
    }
    return size;
}

static uint64_t bytes_for(const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels, int mipmapped, int dev) {
    uint64_t size = probe(desc, levels, mipmapped, dev);
    return size ? size : estimate(desc, levels);
}

typedef CUresult (*create_call)(void *out, const void *desc, unsigned int levels);

static CUresult create(hami_ptrmap *map, void **out, const void *raw, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                       unsigned int levels, int mipmapped, create_call call) {
    if (!hami_shim_accounting() || !out || !desc || (desc->Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)))
        return call(out, raw, levels);
    int dev = hami_cuda_current_device();
    uint64_t bytes = bytes_for(desc, levels, mipmapped, dev);
    CUresult rc = hami_cuda_reserve(dev, bytes, NULL);
    if (rc != CUDA_SUCCESS) return rc;
    rc = call(out, raw, levels);
    if (rc == CUDA_SUCCESS) hami_ptrmap_put(map, (uint64_t)(uintptr_t)*out, bytes, dev);
    else hami_shim_release(dev, bytes);
    return rc;
}

static CUresult call_2d(void *out, const void *desc, unsigned int levels) {
    return hami_real.cuArrayCreate_v2(out, desc);
}
static CUresult call_3d(void *out, const void *desc, unsigned int levels) {
    return hami_real.cuArray3DCreate_v2(out, desc);
}
static CUresult call_mipmapped(void *out, const void *desc, unsigned int levels) {
    return hami_real.cuMipmappedArrayCreate(out, desc, levels);
}

HAMI_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuArrayCreate_v2);
    CUDA_ARRAY3D_DESCRIPTOR d3;
    memset(&d3, 0, sizeof d3);
    if (pAllocateArray) {
        d3.Width = pAllocateArray->Width;
        d3.Height = pAllocateArray->Height;
        d3.Format = pAllocateArray->Format;
        d3.NumChannels = pAllocateArray->NumChannels;
    }
    return create(&g_arrays, (void **)pHandle, pAllocateArray, pAllocateArray ? &d3 : NULL, 1, 0, call_2d);
}

HAMI_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuArray3DCreate_v2);
    return create(&g_arrays, (void **)pHandle, pAllocateArray, pAllocateArray, 1, 0, call_3d);
}

/* The v1 (32-bit) descriptors: sized as the _v2 ones, created by the v1 entry points. */
static CUresult call_2d_v1(void *out, const void *desc, unsigned int levels) {
    return hami_real.cuArrayCreate(out, desc);
}
static CUresult call_3d_v1(void *out, const void *desc, unsigned int levels) {
    return hami_real.cuArray3DCreate(out, desc);
}

HAMI_EXPORT CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *pAllocateArray) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuArrayCreate);
    CUDA_ARRAY3D_DESCRIPTOR d3;
    memset(&d3, 0, sizeof d3);
    if (pAllocateArray) {
        d3.Width = pAllocateArray->Width;
        d3.Height = pAllocateArray->Height;
        d3.Format = pAllocateArray->Format;
        d3.NumChannels = pAllocateArray->NumChannels;
    }
    return create(&g_arrays, (void **)pHandle, pAllocateArray, pAllocateArray ? &d3 : NULL, 1, 0, call_2d_v1);
}

HAMI_EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *pAllocateArray) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuArray3DCreate);
    CUDA_ARRAY3D_DESCRIPTOR d3;
    memset(&d3, 0, sizeof d3);
    if (pAllocateArray) {
        d3.Width = pAllocateArray->Width;
        d3.Height = pAllocateArray->Height;
        d3.Depth = pAllocateArray->Depth;
        d3.Format = pAllocateArray->Format;
        d3.NumChannels = pAllocateArray->NumChannels;
        d3.Flags = pAllocateArray->Flags;
    }
    return create(&g_arrays, (void **)pHandle, pAllocateArray, pAllocateArray ? &d3 : NULL, 1, 0, call_3d_v1);
}

HAMI_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                            unsigned int numMipmapLevels) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMipmappedArrayCreate);
    return create(&g_mipmaps, (void **)pHandle, pMipmappedArrayDesc, pMipmappedArrayDesc, numMipmapLevels, 1,
                  call_mipmapped);
}

/* The entry leaves the map before the driver call: a handle value the driver frees may be
 * handed out again at once, and must not find our entry. */
static CUresult destroy(hami_ptrmap *map, uint64_t key, CUresult (*call)(uint64_t)) {
    uint64_t size;
    int32_t dev;
    int known = hami_shim_accounting() && hami_ptrmap_take(map, key, &size, &dev) == 0;
    CUresult rc = call(key);
    if (known) {
        if (rc == CUDA_SUCCESS) hami_shim_release(dev, size);
        else hami_ptrmap_put(map, key, size, dev);
    }
    return rc;
}

static CUresult call_destroy(uint64_t a) { return hami_real.cuArrayDestroy((CUarray)(uintptr_t)a); }
static CUresult call_destroy_mipmapped(uint64_t m) {
    return hami_real.cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)m);
}

HAMI_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuArrayDestroy);
    return destroy(&g_arrays, (uint64_t)(uintptr_t)hArray, call_destroy);
}

HAMI_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
    hami_cuda_ensure();
    HAMI_REAL_OR_FAIL(cuMipmappedArrayDestroy);
    return destroy(&g_mipmaps, (uint64_t)(uintptr_t)hMipmappedArray, call_destroy_mipmapped);
}

void hami_cuda_array_after_fork(void) {
    memset(&g_arrays, 0, sizeof g_arrays);
    memset(&g_mipmaps, 0, sizeof g_mipmaps);
}
