/* dlopen(..., RTLD_DEEPBIND).  A library opened so looks symbols up in its own
 * dependencies before the global scope, where this preloaded shim stands: a
 * plugin linked with -lcuda would call the driver directly, and one that opens
 * libcuda itself would reach libc's dlsym, not ours.  Such a load is kept as it
 * is asked for (deep binding still serves its other symbols), and then each
 * library it brought in is rebound: the slots of its global offset table that
 * name a driver function this shim wraps, or dlsym/dlopen, are pointed at the
 * shim's functions, as a normal load would have bound them.
 *
 * Every other dlopen jumps straight to the real one (a sibling call), so the
 * real dlopen still sees its caller, whose RPATH/RUNPATH and $ORIGIN decide
 * where a bare name is looked for.  The deep-binding path calls dlopen itself,
 * so it first looks a bare name up in the caller's own search path
 * (RTLD_DI_SERINFO of the caller), and passes what it finds. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_shim.h"

#if defined(__x86_64__)
#define SLOT_RELOC(t) ((t) == R_X86_64_JUMP_SLOT || (t) == R_X86_64_GLOB_DAT)
#elif defined(__aarch64__)
#define SLOT_RELOC(t) ((t) == R_AARCH64_JUMP_SLOT || (t) == R_AARCH64_GLOB_DAT)
#else
#define SLOT_RELOC(t) 0 /* other architectures: deep-bound loads are not rebound */
#endif

typedef void *(*dlopen_fn)(const char *, int);

static dlopen_fn real_dlopen(void) {
    static dlopen_fn real;
    if (!real) {
        real = (dlopen_fn)dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.34");
        if (!real) real = (dlopen_fn)dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.2.5");
    }
    return real;
}

/* What a rebound slot should point at, or NULL to leave it. */
static void *replacement(const char *name) {
    if (name[0] == 'c' && name[1] == 'u') return hami_cuda_wrapper_for(name);
    if (!strcmp(name, "dlsym")) return (void *)dlsym;
    if (!strcmp(name, "dlopen")) return (void *)dlopen;
    return NULL;
}

typedef struct {
    ElfW(Addr) base;
    const ElfW(Phdr) *phdr;
    ElfW(Half) phnum;
} object;

/* glibc stores most dynamic-section addresses relocated; a few ports leave them as offsets. */
static uintptr_t dyn_addr(const object *o, ElfW(Addr) v) { return v < o->base ? o->base + v : v; }

static int in_relro(const object *o, uintptr_t addr) {
    for (ElfW(Half) i = 0; i < o->phnum; i++) {
        const ElfW(Phdr) *ph = &o->phdr[i];
        if (ph->p_type == PT_GNU_RELRO && addr >= o->base + ph->p_vaddr && addr < o->base + ph->p_vaddr + ph->p_memsz)
            return 1;
    }
    return 0;
}

static void write_slot(const object *o, void **slot, void *value) {
    if (*slot == value) return;
    if (!in_relro(o, (uintptr_t)slot)) {
        *slot = value;
        return;
    }
    long page = sysconf(_SC_PAGESIZE);
    void *start = (void *)((uintptr_t)slot & ~(uintptr_t)(page - 1));
    if (mprotect(start, (size_t)page, PROT_READ | PROT_WRITE) != 0) return;
    *slot = value;
    mprotect(start, (size_t)page, PROT_READ); /* RELRO is read-only once relocated */
}

static void rebind_table(const object *o, const ElfW(Rela) *rel, size_t bytes, const ElfW(Sym) *symtab,
                         const char *strtab) {
    for (size_t i = 0; rel && i < bytes / sizeof *rel; i++) {
        if (!SLOT_RELOC(ELF64_R_TYPE(rel[i].r_info)) || ELF64_R_SYM(rel[i].r_info) == 0) continue;
        void *to = replacement(strtab + symtab[ELF64_R_SYM(rel[i].r_info)].st_name);
        if (to) write_slot(o, (void **)(o->base + rel[i].r_offset), to);
    }
}

static void rebind(const object *o) {
    const ElfW(Dyn) *dyn = NULL;
    for (ElfW(Half) i = 0; i < o->phnum && !dyn; i++)
        if (o->phdr[i].p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(o->base + o->phdr[i].p_vaddr);
    if (!dyn) return;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *rela = NULL, *jmprel = NULL;
    size_t relasz = 0, pltrelsz = 0;
    int plt_is_rela = 1;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)dyn_addr(o, dyn->d_un.d_ptr); break;
        case DT_STRTAB: strtab = (const char *)dyn_addr(o, dyn->d_un.d_ptr); break;
        case DT_RELA: rela = (const ElfW(Rela) *)dyn_addr(o, dyn->d_un.d_ptr); break;
        case DT_RELASZ: relasz = dyn->d_un.d_val; break;
        case DT_JMPREL: jmprel = (const ElfW(Rela) *)dyn_addr(o, dyn->d_un.d_ptr); break;
        case DT_PLTRELSZ: pltrelsz = dyn->d_un.d_val; break;
        case DT_PLTREL: plt_is_rela = dyn->d_un.d_val == DT_RELA; break;
        default: break;
        }
    }
    if (!symtab || !strtab) return;
    rebind_table(o, rela, relasz, symtab, strtab);
    if (plt_is_rela) rebind_table(o, jmprel, pltrelsz, symtab, strtab);
}

/* The objects loaded before the call, by load address, so only those it brought in are rebound. */
typedef struct {
    ElfW(Addr) *bases;
    size_t n, cap;
} loaded;

static int collect(struct dl_phdr_info *info, size_t size, void *arg) {
    loaded *l = arg;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        ElfW(Addr) *grown = realloc(l->bases, cap * sizeof *grown);
        if (!grown) return 1;
        l->bases = grown;
        l->cap = cap;
    }
    l->bases[l->n++] = info->dlpi_addr;
    return 0;
}

static int rebind_new(struct dl_phdr_info *info, size_t size, void *arg) {
    const loaded *before = arg;
    for (size_t i = 0; i < before->n; i++)
        if (before->bases[i] == info->dlpi_addr) return 0;
    /* The driver itself, opened deep: its own calls stay its own (rebinding them would charge twice). */
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    if (base && !strncmp(base + 1, "libcuda.so", 10)) return 0;
    object o = {info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum};
    rebind(&o);
    return 0;
}

/* A bare name as the real dlopen would find it for `caller`: the caller's RPATH,
 * LD_LIBRARY_PATH and RUNPATH in their order.  Names found in ld.so's cache or
 * the default folders are the same for every caller: left to dlopen. */
static const char *for_caller(const char *file, const void *caller, char *buf, size_t len) {
    if (!file || strchr(file, '/')) return file;
    void *already = real_dlopen()(file, RTLD_LAZY | RTLD_NOLOAD);
    if (already) { /* found by its name whoever asks */
        dlclose(already);
        return file;
    }
    Dl_info info;
    struct link_map *map = NULL;
    if (!dladdr1(caller, &info, (void **)&map, RTLD_DL_LINKMAP) || !map) return file;
    Dl_serinfo size;
    if (dlinfo(map, RTLD_DI_SERINFOSIZE, &size) != 0) return file;
    Dl_serinfo *paths = malloc(size.dls_size);
    if (!paths) return file;
    paths->dls_size = size.dls_size;
    paths->dls_cnt = size.dls_cnt;
    const char *found = file;
    if (dlinfo(map, RTLD_DI_SERINFO, paths) == 0) {
        for (unsigned int i = 0; i < paths->dls_cnt; i++) {
            if (paths->dls_serpath[i].dls_flags & (LA_SER_CONFIG | LA_SER_DEFAULT)) break;
            snprintf(buf, len, "%s/%s", paths->dls_serpath[i].dls_name, file);
            if (access(buf, F_OK) == 0) {
                found = buf;
                break;
            }
        }
    }
    free(paths);
    return found;
}

static __attribute__((noinline)) void *open_deep(const char *file, int flags, const void *caller) {
    char path[4096];
    const char *name = for_caller(file, caller, path, sizeof path);
    loaded before = {NULL, 0, 0};
    dl_iterate_phdr(collect, &before);
    void *handle = real_dlopen()(name, flags);
    if (handle && hami_shim_accounting()) dl_iterate_phdr(rebind_new, &before);
    free(before.bases);
    return handle;
}

HAMI_EXPORT void *dlopen(const char *file, int flags) {
    if (flags & RTLD_DEEPBIND) {
        hami_cuda_ensure(); /* the shim's mode decides whether rebinding is needed */
        return open_deep(file, flags, __builtin_return_address(0));
    }
    dlopen_fn real = real_dlopen();
    return real ? real(file, flags) : NULL; /* a sibling call: the real dlopen sees the caller's return address */
}
