/* The fake's CUDA arrays and mipmapped arrays.  Their layout is opaque, as on
 * a real GPU (block-linear): rows padded to 64 bytes, 2D heights to 8 rows,
 * the whole rounded to 64 KiB -- more than width x height x element size.
 * Arrays created with CUDA_ARRAY3D_DEFERRED_MAPPING or _SPARSE take no memory
 * (it is mapped later); a deferred one reports its size through
 * cu(Mipmapped)ArrayGetMemoryRequirements.  HAMI_FAKE_CUDA_NO_DEFERRED_MAPPING=1
 * plays a GPU without deferred mapping (those creations are NOT_SUPPORTED). */
#define _GNU_SOURCE
#include <stdlib.h>

#include "fake_cuda.h"

#define PAGE (64ull << 10)

struct CUarray_st {
    int device;
    uint64_t bytes;     /* memory it holds (0 for deferred/sparse) */
    uint64_t layout;    /* size of its layout */
    unsigned int flags;
};

struct CUmipmappedArray_st {
    struct CUarray_st a;
};

static uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

/* Bytes per element x 2 (half bytes: block-compressed formats store 4 or 8 bits a texel). */
static uint64_t element_halves(unsigned int format, unsigned int channels) {
    switch (format) {
    case 0x01: case 0x08: return 2ull * channels;        /* 8-bit integers */
    case 0x02: case 0x09: case 0x10: return 4ull * channels; /* 16-bit integers, half */
    case 0x03: case 0x0a: case 0x20: return 8ull * channels; /* 32-bit integers, float */
    case 0x91: case 0x92: case 0x97: case 0x98: return 1;  /* BC1, BC4: 8 bytes per 4x4 block */
    case 0x93: case 0x94: case 0x95: case 0x96: case 0x99: case 0x9a: case 0x9b: case 0x9c: case 0x9d: case 0x9e:
        return 2;                                          /* BC2/3/5/6H/7: 16 bytes per 4x4 block */
    default: return 0;                                     /* not modelled */
    }
}

static uint64_t layout_of(size_t w, size_t h, size_t d, unsigned int format, unsigned int channels) {
    uint64_t halves = element_halves(format, channels);
    uint64_t row = round_up((w * halves + 1) / 2, 64);
    uint64_t rows = h ? round_up(h, 8) : 1;
    return round_up(row * rows * (d ? d : 1), PAGE);
}

static int no_deferred(void) {
    const char *v = getenv("HAMI_FAKE_CUDA_NO_DEFERRED_MAPPING");
    return v && *v == '1';
}

static CUresult check(const CUDA_ARRAY3D_DESCRIPTOR *desc, int *dev) {
    if (!desc || desc->Width == 0 || !element_halves(desc->Format, desc->NumChannels)) return CUDA_ERROR_INVALID_VALUE;
    if (desc->NumChannels != 1 && desc->NumChannels != 2 && desc->NumChannels != 4) return CUDA_ERROR_INVALID_VALUE;
    if ((desc->Flags & CUDA_ARRAY3D_DEFERRED_MAPPING) && no_deferred()) return CUDA_ERROR_NOT_SUPPORTED;
    return fake_current_dev(dev);
}

static CUresult create(struct CUarray_st *a, int dev, uint64_t layout, unsigned int flags) {
    a->device = dev;
    a->layout = layout;
    a->flags = flags;
    a->bytes = flags & (CUDA_ARRAY3D_DEFERRED_MAPPING | CUDA_ARRAY3D_SPARSE) ? 0 : layout;
    return a->bytes ? fake_take(dev, a->bytes) : CUDA_SUCCESS;
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc) {
    int dev;
    CUresult rc = pHandle ? check(desc, &dev) : CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS) return rc;
    size_t depth = desc->Depth;
    if (desc->Flags & CUDA_ARRAY3D_CUBEMAP) depth = desc->Flags & CUDA_ARRAY3D_LAYERED ? depth : 6;
    struct CUarray_st *a = calloc(1, sizeof *a);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    rc = create(a, dev, layout_of(desc->Width, desc->Height, depth, desc->Format, desc->NumChannels), desc->Flags);
    if (rc != CUDA_SUCCESS) free(a);
    else *pHandle = a;
    return rc;
}

EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc) {
    if (!desc) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {desc->Width, desc->Height, 0, desc->Format, desc->NumChannels, 0};
    return cuArray3DCreate_v2(pHandle, &d3);
}

EXPORT CUresult cuArrayDestroy(CUarray hArray) {
    if (!hArray) return CUDA_ERROR_INVALID_HANDLE;
    if (hArray->bytes) fake_give(hArray->device, hArray->bytes);
    free(hArray);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int numMipmapLevels) {
    int dev;
    CUresult rc = pHandle && numMipmapLevels ? check(desc, &dev) : CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS) return rc;
    uint64_t total = 0;
    size_t w = desc->Width, h = desc->Height, d = desc->Depth;
    for (unsigned int l = 0; l < numMipmapLevels; l++) {
        total += layout_of(w, h, d, desc->Format, desc->NumChannels);
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        d = d > 1 ? d / 2 : d;
    }
    struct CUmipmappedArray_st *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    rc = create(&m->a, dev, total, desc->Flags);
    if (rc != CUDA_SUCCESS) free(m);
    else *pHandle = m;
    return rc;
}

EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
    if (!hMipmappedArray) return CUDA_ERROR_INVALID_HANDLE;
    if (hMipmappedArray->a.bytes) fake_give(hMipmappedArray->a.device, hMipmappedArray->a.bytes);
    free(hMipmappedArray);
    return CUDA_SUCCESS;
}

static CUresult requirements(const struct CUarray_st *a, CUDA_ARRAY_MEMORY_REQUIREMENTS *out) {
    /* As CUDA: only for arrays created with CUDA_ARRAY3D_DEFERRED_MAPPING. */
    if (!a || !out || !(a->flags & CUDA_ARRAY3D_DEFERRED_MAPPING)) return CUDA_ERROR_INVALID_VALUE;
    out->size = a->layout;
    out->alignment = PAGE;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *memoryRequirements, CUarray array,
                                             CUdevice device) {
    return requirements(array, memoryRequirements);
}

EXPORT CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *memoryRequirements,
                                                      CUmipmappedArray mipmap, CUdevice device) {
    return requirements(mipmap ? &mipmap->a : NULL, memoryRequirements);
}
