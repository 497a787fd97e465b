#include <signal.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Spins for `ms` milliseconds. */
__attribute__((noinline)) int spin(int ms) {
    volatile int x = 0;
    double end = now() + ms / 1000.0;
    while (now() < end) x++;
    return x;
}

/* `depth` native frames, then a spin at the bottom (no tail call: the sum needs the
   callee's result). */
__attribute__((noinline)) int recurse(int depth, int ms) {
    if (depth == 0) return spin(ms);
    return recurse(depth - 1, ms) + 1;
}

static volatile int handler_ms = 2;

static void on_signal(int sig) {
    (void)sig;
    spin(handler_ms);
}

/* A C signal handler for SIGUSR1 that spins: a thread sampled while it runs has a
   signal frame in its native stack. */
int install_handler(int ms) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    handler_ms = ms;
    sa.sa_handler = on_signal;
    return sigaction(SIGUSR1, &sa, 0);
}
