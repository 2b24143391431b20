/*
 * The fixture files of the fake vendor libraries (the device tables of the fake NVML, DCMI and
 * CNDev, and the GPU identities the fake libcuda takes from the NVML one): one reader for the
 * format they share.
 *
 *   # '#' starts a comment, anywhere on a line
 *   key = value        before the first section: a global key (the fake NVML's driver_version ...)
 *   [gpu]              a section: the next device (each fake names its own: [gpu], [chip], [mlu])
 *   key = value        a key of that device; white space around the key and the value is dropped
 *
 * Blank lines are skipped.  A line that is none of these - no '=', an empty key, a section of
 * another name, a key before the first section where the fake has no global keys, a line longer
 * than HAMI_FIXTURE_LINE_MAX - is reported on stderr as "<file>:<line>: <what is wrong>: <line>"
 * and otherwise skipped, as the fakes always skipped it: a typo shows where it is instead of
 * silently leaving a device at its defaults.
 */
#ifndef HAMI_FAKE_FIXTURE_H
#define HAMI_FAKE_FIXTURE_H

#include <stddef.h>

#define HAMI_FIXTURE_LINE_MAX 510

typedef struct hami_fixture_reader {
    const char *section; /* the name between the brackets: "gpu" */
    int globals;         /* 1: keys before the first section are global keys (set with record NULL) */
    int quiet;           /* 1: faulty lines are skipped without a report (a second reader of one file) */
    /* A section begins: the record its keys go to, or NULL when there is no room (reading stops). */
    void *(*begin)(void *ctx);
    /* One key of the record begun last; value may be cut up in place (strtok). */
    void (*set)(void *ctx, void *record, const char *key, char *value);
    void *ctx;
} hami_fixture_reader;

/* Reads the fixture at path into the reader's records: 0, or -1 when it cannot be opened. */
__attribute__((visibility("hidden"))) int hami_fixture_read(const char *path, const hami_fixture_reader *reader);

/* Copies a value into a field of cap bytes, cut short to fit and always terminated (as a driver's
 * fixed-size fields are). */
__attribute__((visibility("hidden"))) void hami_fixture_copy(char *dst, size_t cap, const char *src);

#endif
