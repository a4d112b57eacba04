/*
 * What learning how each child ended costs the one thread that keeps 16 children in flight:
 * the work a spawn server does per status request, without the server. Two ways, taking turns
 * in rounds of ROUND spawns (each round starts with no child running):
 *
 *   pidfd   clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD), SIGCHLD ignored (the kernel reaps),
 *           each pidfd in an epoll set, and when it is readable ioctl(PIDFD_GET_INFO) for the
 *           exit status, EPOLL_CTL_DEL and close: what a kernel-reaping spawnkit server does.
 *   sigchld clone(CLONE_VM | CLONE_VFORK), no pidfd; SIGCHLD blocked and read from a
 *           signalfd in the epoll set, then waitid(P_ALL, WNOHANG) until no child is left to
 *           reap: the thread reaps every child itself.
 *
 * Per way: spawns per second, and the thread's own CPU per spawn (RUSAGE_THREAD: the clones,
 * the waits and the reaps; the children's own exec and exit are theirs), medians over the
 * rounds. The child is the tiny static child, its stdout /dev/null.
 *
 *   gcc -static -nostdlib -nostartfiles -O2 -fno-stack-protector -o /tmp/tinychild bench/tinychild.c
 *   gcc -O2 -o /tmp/reap_costs bench/reap_costs.c
 *   /tmp/reap_costs /tmp/tinychild 20 2000
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x1000
#endif
/* struct pidfd_info of Linux 6.15 (64 bytes), PIDFD_GET_INFO = _IOWR(0xFF, 11, it). */
struct pidfd_info {
    unsigned long long mask, cgroupid;
    unsigned int ids[11];
    int exit_code;
    unsigned int coredump_mask, spare;
};
#define PIDFD_GET_INFO ((3UL << 30) | (64UL << 16) | (0xFFUL << 8) | 11)
#define PIDFD_INFO_EXIT (1ULL << 3)
#define IN_FLIGHT 16

extern char **environ;
static char *prog;
static int nullfd;
static char stack[64 * 1024] __attribute__((aligned(16)));

static int child(void *arg) {
    (void)arg;
    char *argv[] = {prog, NULL};
    dup2(nullfd, 1);
    execve(prog, argv, environ);
    _exit(127);
}

static double thread_cpu_us(void) {
    struct rusage r;
    getrusage(RUSAGE_THREAD, &r);
    return r.ru_utime.tv_sec * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_sec * 1e6 +
           r.ru_stime.tv_usec;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

/* One round of n spawns the pidfd way. */
static void round_pidfd(int ep, int n) {
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigaction(SIGCHLD, &ign, NULL);
    int sent = 0, done = 0, running = 0;
    struct epoll_event evs[IN_FLIGHT];
    while (done < n) {
        while (sent < n && running < IN_FLIGHT) {
            int pidfd = -1;
            if (clone(child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD,
                      NULL, &pidfd) < 0)
                die("clone");
            struct epoll_event e = {.events = EPOLLIN, .data.fd = pidfd};
            if (epoll_ctl(ep, EPOLL_CTL_ADD, pidfd, &e) != 0)
                die("epoll_ctl");
            sent++, running++;
        }
        int k = epoll_wait(ep, evs, IN_FLIGHT, -1);
        for (int i = 0; i < k; i++) {
            int pidfd = evs[i].data.fd;
            /* Readable at the exit; the status is recorded a moment later, at the reap. */
            for (;;) {
                struct pidfd_info info = {.mask = PIDFD_INFO_EXIT};
                if (ioctl(pidfd, PIDFD_GET_INFO, &info) == 0 && (info.mask & PIDFD_INFO_EXIT))
                    break;
                sched_yield();
            }
            epoll_ctl(ep, EPOLL_CTL_DEL, pidfd, NULL);
            close(pidfd);
            running--, done++;
        }
    }
}

/* One round of n spawns the SIGCHLD way (`sfd` is in the epoll set). */
static void round_sigchld(int ep, int sfd, int n) {
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGCHLD, &dfl, NULL);
    int sent = 0, done = 0, running = 0;
    struct epoll_event evs[1];
    while (done < n) {
        while (sent < n && running < IN_FLIGHT) {
            if (clone(child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL) < 0)
                die("clone");
            sent++, running++;
        }
        if (epoll_wait(ep, evs, 1, -1) < 1)
            continue;
        struct signalfd_siginfo si[IN_FLIGHT];
        while (read(sfd, si, sizeof si) > 0) {
        }
        for (;;) {
            siginfo_t info = {0};
            if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG) != 0 || info.si_pid == 0)
                break;
            running--, done++;
        }
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s TINYCHILD ROUNDS ROUND\n", argv[0]);
        return 2;
    }
    prog = argv[1];
    int rounds = atoi(argv[2]), round = atoi(argv[3]);
    if (rounds < 1 || round < IN_FLIGHT)
        return 2;
    nullfd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    int ep_pidfd = epoll_create1(EPOLL_CLOEXEC), ep_sig = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e = {.events = EPOLLIN, .data.fd = sfd};
    if (sfd < 0 || ep_pidfd < 0 || ep_sig < 0 || epoll_ctl(ep_sig, EPOLL_CTL_ADD, sfd, &e) != 0)
        die("setup");
    double *rate[2], *cpu[2];
    for (int w = 0; w < 2; w++) {
        rate[w] = calloc(rounds, sizeof(double));
        cpu[w] = calloc(rounds, sizeof(double));
    }
    round_pidfd(ep_pidfd, round); /* warm-up, not counted */
    round_sigchld(ep_sig, sfd, round);
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int w = (r + k) % 2;
            double t0 = now_s(), c0 = thread_cpu_us();
            if (w == 0)
                round_pidfd(ep_pidfd, round);
            else
                round_sigchld(ep_sig, sfd, round);
            cpu[w][r] = (thread_cpu_us() - c0) / round;
            rate[w][r] = round / (now_s() - t0);
        }
    }
    const char *names[2] = {"pidfd + epoll + PIDFD_GET_INFO", "SIGCHLD signalfd + waitid"};
    double c[2];
    for (int w = 0; w < 2; w++) {
        c[w] = median(cpu[w], rounds);
        printf("%-32s %6.0f spawns/s  thread CPU %5.1f us/spawn\n", names[w],
               median(rate[w], rounds), c[w]);
    }
    printf("sigchld/pidfd thread CPU: %.2f\n", c[1] / c[0]);
    return 0;
}
