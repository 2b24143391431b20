/* The control file of injected faults (see fake_faults.h for its format). */
#define _GNU_SOURCE
#include "fake_faults.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FAULTS 64
#define NAME_LEN 96

struct fault {
    int kind;
    char device[NAME_LEN];
    char call[NAME_LEN]; /* empty: every call */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fault g_faults[MAX_FAULTS];
static int g_count;
static char g_path[4096];
static struct stat g_seen; /* the file as last read: a replaced or rewritten file has another */
static int g_have_seen;

static int kind_of(const char *word) {
    if (!strcmp(word, "unhealthy")) return HAMI_FAULT_UNHEALTHY;
    if (!strcmp(word, "error")) return HAMI_FAULT_ERROR;
    if (!strcmp(word, "lost")) return HAMI_FAULT_LOST;
    return HAMI_FAULT_NONE;
}

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Read the control file again when it is another path or has changed; the caller holds g_lock. */
static void refresh(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        g_count = 0;
        g_have_seen = 0;
        return;
    }
    if (g_have_seen && !strcmp(path, g_path) && same_file(&st, &g_seen)) return;
    FILE *f = fopen(path, "r");
    g_count = 0;
    g_have_seen = 0;
    if (f == NULL) return;
    char line[512];
    while (g_count < MAX_FAULTS && fgets(line, sizeof line, f) != NULL) {
        char *hash = strchr(line, '#');
        if (hash != NULL) *hash = '\0';
        char word[16], device[NAME_LEN], call[NAME_LEN] = "";
        if (sscanf(line, "%15s %95s %95s", word, device, call) < 2) continue;
        int kind = kind_of(word);
        if (kind == HAMI_FAULT_NONE) continue; /* an unknown fault makes none, as an empty line */
        struct fault *fault = &g_faults[g_count++];
        fault->kind = kind;
        snprintf(fault->device, sizeof fault->device, "%s", device);
        snprintf(fault->call, sizeof fault->call, "%s", kind == HAMI_FAULT_ERROR ? call : "");
    }
    fclose(f);
    snprintf(g_path, sizeof g_path, "%s", path);
    g_seen = st;
    g_have_seen = 1;
}

int hami_fake_fault(const char *device, const char *call) {
    const char *path = getenv("HAMI_FAKE_FAULTS");
    if (path == NULL || *path == '\0' || device == NULL) return HAMI_FAULT_NONE;
    int worst = HAMI_FAULT_NONE;
    pthread_mutex_lock(&g_lock);
    refresh(path);
    for (int i = 0; i < g_count; i++) {
        const struct fault *fault = &g_faults[i];
        if (strcmp(fault->device, "*") != 0 && strcmp(fault->device, device) != 0) continue;
        if (fault->call[0] != '\0' && (call == NULL || strcmp(fault->call, call) != 0)) continue;
        if (fault->kind > worst) worst = fault->kind;
    }
    pthread_mutex_unlock(&g_lock);
    return worst;
}
