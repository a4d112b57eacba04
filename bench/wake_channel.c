/*
 * Would a Wake through a channel that is not "sync" help a lone request? (issue 13's latency)
 *
 * A Unix-socket send wakes its reader with a "sync" hint (the sender is about to sleep), which
 * lets the scheduler put the reader on the sender's CPU. The spawn server's Wake frame goes
 * that way while the client still has work to do (its cwd, environment, encoding) before the
 * request. An eventfd write wakes without the hint. This probe compares, from one caller
 * thread and one answering thread (an epoll loop polling up to 100 us after a wake, yielding
 * as the server's loop does, answering a 512-byte request with 64 bytes):
 *
 *   no wake                    the request alone
 *   socket Wake frame (sync)   16 bytes on the socket first, then WORK us of busy work
 *   eventfd (not sync)         an eventfd write first, then the same work
 *
 * Each iteration starts after 1 ms asleep (the answering CPU idle, as a lone request finds
 * it). Printed: latency (wake to answer) min/median/p90, the caller's CPU per request (its
 * CPU clock), and how often the answer came from the caller's own CPU.
 *
 * Build and run: gcc -O2 -o /tmp/wake_channel bench/wake_channel.c -lpthread
 *                /tmp/wake_channel [ITERATIONS [WORK_US]]
 * Results: BENCHMARKS.md section 6, "A Wake through an eventfd".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sched.h>
static int S[2], E; static volatile int srv_cpu;
static double now_us(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static void *server(void *a) {
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 1};
  epoll_ctl(ep, EPOLL_CTL_ADD, S[1], &ev);
  ev.data.u32 = 2; epoll_ctl(ep, EPOLL_CTL_ADD, E, &ev);
  char buf[4096];
  for (;;) {
    struct epoll_event got[2];
    int n = epoll_wait(ep, got, 2, -1);
    int polling = 0;
    for (int i = 0; i < n; i++) if (got[i].data.u32 == 2) { uint64_t v; read(E, &v, 8); polling = 1; }
    double until = now_us(CLOCK_MONOTONIC) + 100;
    for (;;) {
      ssize_t r = recv(S[1], buf, sizeof buf, MSG_DONTWAIT);
      if (r == 0) return 0;
      if (r > 0) {
        if (r == 16) { polling = 1; until = now_us(CLOCK_MONOTONIC) + 100; continue; } // a Wake frame
        srv_cpu = sched_getcpu(); send(S[1], buf, 64, 0); break;
      }
      if (!polling || now_us(CLOCK_MONOTONIC) > until) break;
      sched_yield();
    }
  }
}
int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 2000;
  double work = argc > 2 ? atof(argv[2]) : 8;
  socketpair(AF_UNIX, SOCK_STREAM, 0, S);
  E = eventfd(0, EFD_NONBLOCK);
  pthread_t t; pthread_create(&t, 0, server, 0);
  const char *names[] = {"no wake", "socket Wake frame (sync)", "eventfd (not sync)"};
  double *lat[3], cpu[3] = {0}; int same[3] = {0};
  for (int m = 0; m < 3; m++) lat[m] = calloc(iters, sizeof(double));
  char req[512] = {0}, rep[64];
  for (int i = 0; i < iters; i++) {
    for (int m = 0; m < 3; m++) {
      usleep(1000);
      double t0 = now_us(CLOCK_MONOTONIC), c0 = now_us(CLOCK_THREAD_CPUTIME_ID);
      if (m == 1) send(S[0], req, 16, 0);
      if (m == 2) { uint64_t one = 1; write(E, &one, 8); }
      while (now_us(CLOCK_MONOTONIC) - t0 < work) {}
      send(S[0], req, sizeof req, 0);
      recv(S[0], rep, 64, MSG_WAITALL);
      lat[m][i] = now_us(CLOCK_MONOTONIC) - t0; same[m] += srv_cpu == sched_getcpu();
      cpu[m] += now_us(CLOCK_THREAD_CPUTIME_ID) - c0;
    }
  }
  for (int m = 0; m < 3; m++) {
    int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return x < y ? -1 : x > y; }
    qsort(lat[m], iters, sizeof(double), cmp);
    printf("%-28s latency min %6.1f median %6.1f p90 %6.1f us; caller CPU %6.1f us (of which %.0f work); server on the caller's CPU %3.0f%%\n", names[m], lat[m][0], lat[m][iters / 2], lat[m][iters * 9 / 10], cpu[m] / iters, work, 100.0 * same[m] / iters);
  }
  return 0;
}
