/* The fixture and state files of a fake vendor library (see fake_state_file.h). */
#define _GNU_SOURCE
#include "fake_state_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

int hami_fake_files_named(const char *fixture_var, const char *state_var, hami_fake_files *files) {
    const char *fixture = getenv(fixture_var);
    if (fixture == NULL || *fixture == '\0') return -1;
    snprintf(files->fixture, sizeof files->fixture, "%s", fixture);
    const char *state = getenv(state_var);
    if (state != NULL && *state != '\0') snprintf(files->state, sizeof files->state, "%s", state);
    else snprintf(files->state, sizeof files->state, "%.4089s.state", fixture);
    return 0;
}

FILE *hami_fake_state_open(const char *path, int *empty) {
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) return NULL;
    if (flock(fd, LOCK_EX) != 0) {
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "r+");
    if (f == NULL) {
        close(fd);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    *empty = ftell(f) == 0;
    rewind(f);
    return f;
}

void hami_fake_state_close(FILE *f) {
    fflush(f);
    flock(fileno(f), LOCK_UN);
    fclose(f);
}
