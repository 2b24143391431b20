/* The fixture reader of the fake vendor libraries (see fake_fixture.h for the format). */
#define _GNU_SOURCE
#include "fake_fixture.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1])) *--end = '\0';
    return s;
}

void hami_fixture_copy(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Where and what, as a compiler says it: the fixture is a file someone edits by hand. */
__attribute__((format(printf, 4, 5))) static void report(const hami_fixture_reader *r, const char *path,
                                                         unsigned int number, const char *format, ...) {
    if (r->quiet) return;
    va_list args;
    va_start(args, format);
    fprintf(stderr, "%s:%u: ", path, number);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
}

/* The rest of a line longer than the buffer: read and dropped. */
static void skip_rest(FILE *f) {
    int c;
    while ((c = fgetc(f)) != EOF && c != '\n') {
    }
}

/* A "[name]" line: 1 when it names the reader's section, else reported (0). */
static int is_own_section(const char *path, unsigned int number, const char *s, const hami_fixture_reader *r) {
    size_t n = strlen(s) - 2;
    if (strlen(r->section) == n && strncmp(s + 1, r->section, n) == 0) return 1;
    report(r, path, number, "a section other than [%s], skipped: %.80s", r->section, s);
    return 0;
}

int hami_fixture_read(const char *path, const hami_fixture_reader *r) {
    FILE *f = fopen(path, "re");
    if (f == NULL) return -1;
    char line[HAMI_FIXTURE_LINE_MAX + 2];
    void *record = NULL;
    int in_section = 0;
    for (unsigned int number = 1; fgets(line, sizeof line, f) != NULL; number++) {
        if (strchr(line, '\n') == NULL && !feof(f)) {
            skip_rest(f);
            report(r, path, number, "longer than %d characters, skipped: %.80s", HAMI_FIXTURE_LINE_MAX, line);
            continue;
        }
        char *hash = strchr(line, '#');
        if (hash != NULL) *hash = '\0';
        char *s = trim(line);
        if (*s == '\0') continue;
        size_t n = strlen(s);
        if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
            if (!is_own_section(path, number, s, r)) continue;
            record = r->begin(r->ctx);
            if (record == NULL) break;
            in_section = 1;
            continue;
        }
        char *eq = strchr(s, '=');
        if (eq == NULL || eq == s) {
            report(r, path, number, "neither [%s] nor key = value, skipped: %.80s", r->section, s);
            continue;
        }
        if (!in_section && !r->globals) {
            report(r, path, number, "a key before the first [%s], skipped: %.80s", r->section, s);
            continue;
        }
        *eq = '\0';
        r->set(r->ctx, record, trim(s), trim(eq + 1));
    }
    fclose(f);
    return 0;
}
