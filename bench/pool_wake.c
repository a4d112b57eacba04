/*
 * Does a pool of pre-created children hide the clone? (issue 13's latency target)
 *
 * The latency method of `spawnkit bench` (spawn -> the tiny child's own CLOCK_MONOTONIC), in one
 * run, variants taking turns in blocks of 10:
 *
 *   vfork+exec            bare vfork() + execve from the measuring thread
 *   clone-vfork           clone(CLONE_VM|CLONE_VFORK|CLONE_PIDFD) on its own stack, all signals
 *                         blocked around it, the child: dup3, close_range(CLOEXEC), mask, execve
 *                         (the kernel work of spawnkit's local spawn)
 *   pool, same thread     a child made earlier (untimed) with
 *                         clone(CLONE_VM|CLONE_FILES|CLONE_PIDFD|CLONE_CHILD_SETTID|CLONE_CHILD_CLEARTID)
 *                         on its own stack, parked on a futex with all signals blocked and a
 *                         parent-death signal; woken by this thread, it clears the death signal,
 *                         unshare(CLONE_FILES), then does the clone-vfork child's work; this
 *                         thread waits for the kernel's CLEARTID wake (exec or exit)
 *   hop + clone-vfork     this thread wakes a helper thread (a futex), which does clone-vfork:
 *                         the server's path (loop thread -> spawner thread -> clone)
 *   hop + pool            the helper wakes a child it made earlier (untimed)
 *   hop only              the helper wakes and wakes us back (no child): the hop's own cost
 *
 * With PIN=1 the measuring thread runs on CPU 0 and the helper on CPU 1 (the pool children
 * inherit their maker's CPU); by default nothing is pinned.
 *
 *   gcc -static -nostdlib -nostartfiles -O2 -fno-stack-protector -o /tmp/tinychild bench/tinychild.c
 *   gcc -O2 -pthread -o /tmp/pool_wake bench/pool_wake.c
 *   /tmp/pool_wake /tmp/tinychild 2000
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x1000
#endif
#define CLOSE_RANGE_CLOEXEC (1U << 2)

extern char **environ;

enum { VFORK, CLONE_VFORK_V, POOL_SAME, HOP_CLONE, HOP_POOL, HOP_ONLY, NVARIANTS };
static const char *names[NVARIANTS] = {
    "vfork() + execve",
    "clone-vfork (spawnkit's kernel work)",
    "pool child, woken by this thread",
    "hop to a helper thread + clone-vfork",
    "hop to a helper thread + pool child",
    "hop to a helper thread only (no spawn)",
};

static int out_fd;
static char *child_argv[2];
static const size_t STACK = 64 * 1024;

static long mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static long futex(_Atomic int *addr, int op, int val)
{
    return syscall(SYS_futex, addr, op, val, NULL, NULL, 0);
}

/* The child's work after the clone (or the wake-up): what clone_costs.c's last variant does. */
static void child_work(void)
{
    syscall(SYS_dup3, out_fd, 1, 0);
    syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
    unsigned long none = 0;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, 8);
    syscall(SYS_execve, child_argv[0], child_argv, environ);
    syscall(SYS_exit_group, 127);
}

static int vfork_child(void *arg)
{
    (void)arg;
    child_work();
    return 0;
}

static char *vfork_stack;

static pid_t clone_vfork(int *pidfd, char *stack)
{
    unsigned long all = ~0UL, old = 0;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, 8);
    pid_t pid = clone(vfork_child, stack + STACK, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD,
                      NULL, pidfd);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, 8);
    return pid;
}

/* One parked child. */
struct slot {
    _Atomic int go;  /* 0 parked, 1 go */
    _Atomic int tid; /* CLONE_CHILD_SETTID / CLEARTID */
    _Atomic int parked;
    int pidfd;
    pid_t pid;
    char *stack;
};

static int pool_child(void *arg)
{
    struct slot *s = arg;
    syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    atomic_store(&s->parked, 1);
    while (atomic_load(&s->go) == 0)
        futex(&s->go, FUTEX_WAIT_PRIVATE, 0);
    syscall(SYS_prctl, PR_SET_PDEATHSIG, 0, 0, 0, 0);
    syscall(SYS_unshare, CLONE_FILES);
    child_work();
    return 0;
}

static void pool_make(struct slot *s)
{
    atomic_store(&s->go, 0);
    atomic_store(&s->parked, 0);
    unsigned long all = ~0UL, old = 0;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, 8);
    s->pidfd = -1;
    s->pid = clone(pool_child, s->stack + STACK,
                   CLONE_VM | CLONE_FILES | CLONE_PIDFD | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID |
                       SIGCHLD,
                   s, &s->pidfd, NULL, &s->tid);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, 8);
    if (s->pid < 0) {
        perror("clone");
        exit(1);
    }
    while (!atomic_load(&s->parked))
        sched_yield();
}

/* Wake the parked child; return when it has exec'd or exited (the kernel clears `tid`). */
static void pool_wake(struct slot *s)
{
    atomic_store(&s->go, 1);
    futex(&s->go, FUTEX_WAKE_PRIVATE, 1);
    int t;
    while ((t = atomic_load(&s->tid)) != 0)
        futex(&s->tid, FUTEX_WAIT, t); /* shared: the kernel's CLEARTID wake is not private */
}

/* The helper thread. */
static _Atomic int req, done;
static int helper_variant;
static struct slot helper_slot;
static pid_t helper_pid;
static int helper_pidfd;

static void wait_for(_Atomic int *w, int want)
{
    int v;
    while ((v = atomic_load(w)) != want)
        futex(w, FUTEX_WAIT_PRIVATE, v);
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

static int pinning;

static void *helper(void *arg)
{
    (void)arg;
    if (pinning)
        pin(1);
    char *stack = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                       -1, 0);
    int seen = 0;
    for (;;) {
        wait_for(&req, seen + 1);
        seen++;
        switch (helper_variant) {
        case -1: /* refill (untimed) */
            pool_make(&helper_slot);
            break;
        case HOP_CLONE:
            helper_pidfd = -1;
            helper_pid = clone_vfork(&helper_pidfd, stack);
            break;
        case HOP_POOL:
            pool_wake(&helper_slot);
            helper_pid = helper_slot.pid;
            helper_pidfd = helper_slot.pidfd;
            break;
        case HOP_ONLY:
            helper_pid = 0;
            break;
        }
        atomic_store(&done, seen);
        futex(&done, FUTEX_WAKE_PRIVATE, 1);
    }
    return NULL;
}

static int ask(int variant)
{
    helper_variant = variant;
    int n = atomic_load(&req) + 1;
    atomic_store(&req, n);
    futex(&req, FUTEX_WAKE_PRIVATE, 1);
    wait_for(&done, n);
    return 0;
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
    pinning = getenv("PIN") && atoi(getenv("PIN"));
    if (pinning)
        pin(0);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return 1;
    out_fd = p[1];
    vfork_stack = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                       -1, 0);
    struct slot own = {0};
    own.stack = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                     -1, 0);
    helper_slot.stack = mmap(NULL, STACK, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    pthread_t th;
    pthread_create(&th, NULL, helper, NULL);
    long *lat[NVARIANTS];
    for (int v = 0; v < NVARIANTS; v++)
        lat[v] = calloc(runs, sizeof(long));
    for (int round = 0; round * 10 < runs; round++) {
        for (int k = 0; k < NVARIANTS; k++) {
            int variant = (round + k) % NVARIANTS;
            for (int i = round * 10; i < runs && i < round * 10 + 10; i++) {
                int pidfd = -1;
                pid_t pid = 0;
                if (variant == POOL_SAME)
                    pool_make(&own);
                if (variant == HOP_POOL)
                    ask(-1);
                long ts[2];
                long t0 = mono_ns();
                switch (variant) {
                case VFORK:
                    pid = vfork();
                    if (pid == 0)
                        child_work();
                    break;
                case CLONE_VFORK_V:
                    pid = clone_vfork(&pidfd, vfork_stack);
                    break;
                case POOL_SAME:
                    pool_wake(&own);
                    pid = own.pid;
                    pidfd = own.pidfd;
                    break;
                case HOP_CLONE:
                case HOP_POOL:
                case HOP_ONLY:
                    ask(variant);
                    pid = helper_pid;
                    pidfd = helper_pidfd;
                    break;
                }
                if (variant == HOP_ONLY) {
                    long t1 = mono_ns();
                    ts[0] = t1 / 1000000000L;
                    ts[1] = t1 % 1000000000L;
                } else if (pid < 0 || read(p[0], ts, 16) != 16) {
                    fprintf(stderr, "variant %d failed\n", variant);
                    return 1;
                }
                lat[variant][i] = ts[0] * 1000000000L + ts[1] - t0;
                if (pid > 0)
                    waitpid(pid, NULL, 0);
                if (pidfd >= 0)
                    close(pidfd);
            }
        }
    }
    printf("%-42s %9s %9s   (us, %d runs each%s)\n", "variant", "min", "median", runs,
           pinning ? ", pinned: this thread CPU 0, helper CPU 1" : "");
    for (int v = 0; v < NVARIANTS; v++) {
        qsort(lat[v], runs, sizeof(long), cmp);
        printf("%-42s %9.1f %9.1f\n", names[v], lat[v][0] / 1e3, lat[v][runs / 2] / 1e3);
    }
    return 0;
}
