/*
 * The files of a fake vendor library that keeps state across processes beside its fixture: the fake
 * DCMI's vNPU instances, the fake CNDev's sMLU profiles and instances.  The fixture is read once per
 * pair of names (again when a variable names another file); the state file is read and rewritten
 * under an exclusive flock on every change, so that every process sees one device.
 */
#ifndef HAMI_FAKE_STATE_FILE_H
#define HAMI_FAKE_STATE_FILE_H

#include <stdio.h>

typedef struct hami_fake_files {
    char fixture[4096];
    char state[4096];
} hami_fake_files;

/* The files the variables name now: the fixture ($fixture_var) and the state ($state_var, or
 * "<fixture>.state").  0, or -1 when the fixture variable is unset or empty. */
__attribute__((visibility("hidden"))) int hami_fake_files_named(const char *fixture_var, const char *state_var,
                                                                hami_fake_files *files);

/* The state file, created empty when absent, locked (exclusive flock) and at its start; *empty: it
 * holds nothing yet (the caller seeds it).  NULL when it cannot be opened or locked. */
__attribute__((visibility("hidden"))) FILE *hami_fake_state_open(const char *path, int *empty);

/* Flushes, unlocks and closes what hami_fake_state_open opened. */
__attribute__((visibility("hidden"))) void hami_fake_state_close(FILE *f);

#endif
