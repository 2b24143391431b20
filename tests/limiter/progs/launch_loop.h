/* How long a test driver's launch loop runs: SECS seconds, or with SECS 0 until SIGTERM.  A test that
 * measures a window of the loop ends it after the window, however late a loaded machine started the
 * driver or woke the test: the window always lies inside the loop. */
#ifndef LAUNCH_LOOP_H
#define LAUNCH_LOOP_H

#include <signal.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t launch_loop_stopped;

static void launch_loop_stop(int sig) {
    (void)sig;
    launch_loop_stopped = 1;
}

static double launch_loop_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The loop's end on the monotonic clock (never, for SECS 0: then SIGTERM ends it). */
static double launch_loop_until(double secs) {
    if (secs > 0) return launch_loop_clock() + secs;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = launch_loop_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    return 1e300;
}

static int launch_loop_on(double until) { return !launch_loop_stopped && launch_loop_clock() < until; }

#endif
