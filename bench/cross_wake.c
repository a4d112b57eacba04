/*
 * What a wake-up across vCPUs costs on this machine while the waker's vCPU stays busy.
 *
 * A thread held to CPU 1 sleeps in read(2) on a pipe (its vCPU halts). A thread held to
 * CPU 0 writes its CLOCK_MONOTONIC into the pipe every 22 ms and then either sleeps 20 ms
 * (its vCPU halts too) or spins 20 ms (its vCPU stays busy, as a CPU-bound child keeps it).
 * Printed: how long the sleeper took to run after the write, min/median/p90/max over 40.
 *
 * Build and run: gcc -O2 -o /tmp/cross_wake bench/cross_wake.c -lpthread && /tmp/cross_wake
 * Results: BENCHMARKS.md section 6, "A CPU-busy child delays the server's answer".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static int p[2];
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static void pin(int c) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(c, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s); }
static double lat[64]; static int n;
static void *waiter(void *a) { pin(1); double t; while (read(p[0], &t, sizeof t) == sizeof t) { if (t < 0) break; lat[n++] = now() - t; } return 0; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return x < y ? -1 : x > y; }
int main(void) {
    pipe(p); pin(0);
    for (int busy = 0; busy < 2; busy++) for (int r = 0; r < 2; r++) {
        n = 0; pthread_t t; pthread_create(&t, 0, waiter, 0);
        for (int i = 0; i < 40; i++) {
            usleep(2000);
            double s = now(); write(p[1], &s, sizeof s);
            if (busy) while (now() - s < 20000) {} else usleep(20000);
        }
        double end = -1; write(p[1], &end, sizeof end); pthread_join(t, 0);
        qsort(lat, n, sizeof(double), cmp);
        printf("waker %s after the write: wake-up on the other CPU min %.0f median %.0f p90 %.0f max %.0f us\n", busy ? "spins 20 ms" : "sleeps", lat[0], lat[n/2], lat[n*9/10], lat[n-1]);
    }
}
