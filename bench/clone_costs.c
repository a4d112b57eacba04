/*
 * What each of spawnkit's safety steps costs in the kernel, measured with the latency method
 * of `spawnkit bench` (spawn -> the tiny child's own CLOCK_MONOTONIC). Each variant adds one
 * step to the one before, from a bare vfork()+execve to everything the clone-vfork strategy
 * asks of the kernel (spawnkit's own user-space work, building the Plan, is not here).
 * Variants take turns in blocks of 10 spawns; minimum and median of RUNS spawns each.
 *
 *   gcc -static -nostdlib -nostartfiles -O2 -fno-stack-protector -o /tmp/tinychild bench/tinychild.c
 *   gcc -O2 -o /tmp/clone_costs bench/clone_costs.c
 *   /tmp/clone_costs /tmp/tinychild 3000
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x1000
#endif
#define CLOSE_RANGE_CLOEXEC (1U << 2)

extern char **environ;

enum { BARE_VFORK, CLONE_OWN_STACK, PIDFD, SIGNALS, CLOSE_FDS, MASKS, NVARIANTS };
static const char *names[NVARIANTS] = {
    "vfork() + execve",
    "clone(VM|VFORK) on its own stack",
    " + CLONE_PIDFD",
    " + SIGPIPE, SIGXFSZ to SIG_DFL",
    " + close_range(3, ~0, CLOEXEC)",
    " + signals blocked around, mask set",
};

static int variant, out_fd;
static char *child_argv[2];

static long mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static int child(void *arg)
{
    (void)arg;
    if (variant >= SIGNALS) {
        struct sigaction sa = {0};
        sa.sa_handler = SIG_DFL;
        syscall(SYS_rt_sigaction, SIGPIPE, &sa, NULL, 8);
        syscall(SYS_rt_sigaction, SIGXFSZ, &sa, NULL, 8);
    }
    syscall(SYS_dup3, out_fd, 1, 0);
    if (variant >= CLOSE_FDS)
        syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
    if (variant >= MASKS) {
        unsigned long none = 0;
        syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, 8);
    }
    syscall(SYS_execve, child_argv[0], child_argv, environ);
    syscall(SYS_exit_group, 127);
    return 0;
}

/* Start the child with the current variant (its own function, so vfork() returns into a frame
 * that holds nothing the loop needs). */
static __attribute__((noinline)) pid_t start(char *stack_top, int *pidfd)
{
    if (variant == BARE_VFORK) {
        pid_t pid = vfork();
        if (pid == 0)
            child(NULL);
        return pid;
    }
    int flags = CLONE_VM | CLONE_VFORK | SIGCHLD;
    if (variant >= PIDFD)
        flags |= CLONE_PIDFD;
    return clone(child, stack_top, flags, NULL, pidfd);
}

static int cmp(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s TINYCHILD [RUNS]\n", argv[0]);
        return 2;
    }
    child_argv[0] = argv[1];
    int runs = argc > 2 ? atoi(argv[2]) : 2000;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return 1;
    out_fd = p[1];
    size_t stack_size = 64 * 1024;
    char *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    long *lat[NVARIANTS];
    for (int v = 0; v < NVARIANTS; v++)
        lat[v] = calloc(runs, sizeof(long));
    for (int round = 0; round * 10 < runs; round++) {
        for (int k = 0; k < NVARIANTS; k++) {
            variant = (round + k) % NVARIANTS;
            for (int i = round * 10; i < runs && i < round * 10 + 10; i++) {
                unsigned long all = ~0UL, old = 0;
                int pidfd = -1;
                pid_t pid;
                long t0 = mono_ns();
                if (variant >= MASKS)
                    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, 8);
                pid = start(stack + stack_size, &pidfd);
                if (variant >= MASKS)
                    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, 8);
                long ts[2];
                if (pid < 0 || read(p[0], ts, 16) != 16)
                    return 1;
                lat[variant][i] = ts[0] * 1000000000L + ts[1] - t0;
                waitpid(pid, NULL, 0);
                if (pidfd >= 0)
                    close(pidfd);
            }
        }
    }
    printf("%-40s %9s %9s   (us, %d runs each)\n", "variant", "min", "median", runs);
    for (int v = 0; v < NVARIANTS; v++) {
        qsort(lat[v], runs, sizeof(long), cmp);
        printf("%-40s %9.1f %9.1f\n", names[v], lat[v][0] / 1e3, lat[v][runs / 2] / 1e3);
    }
    return 0;
}
