/*
 * The herd of `spawnkit bench ps`: N sleeping processes for the process-table benchmark.
 * Like tinychild.c, no libc and no dynamic loader, so each of the N children costs the kernel
 * a task and a few pages, and nothing else.
 *
 *   spawnkit-herd N
 *   spawnkit-herd shm TOTAL_MIB A_MIB B_MIB
 *
 * forks N children (clone(SIGCHLD), i.e. fork(2)); each asks for SIGKILL when the herd dies
 * (PR_SET_PDEATHSIG) and sleeps in pause(). When all N exist the herd writes "ready\n" to
 * fd 1, then reads fd 0 until end of file and exits, which kills the children. A failed fork
 * writes "fork failed\n" and exits 1 (the children die with it).
 *
 * With `shm`, the shared-memory fixture of issue 6 instead: map TOTAL MiB
 * MAP_SHARED|MAP_ANONYMOUS, let child A write the first A MiB and exit, then child B the first
 * B MiB and exit, reap both, write "ready\n", and hold the region until end of file on fd 0.
 * The region then holds max(A, B) MiB that no process's RSS shows.
 *
 * Built by crates/spawnkit-cli/build.rs like tinychild.c (-static -nostdlib).
 */

#if defined(__x86_64__)
#define NR_READ 0
#define NR_WRITE 1
#define NR_PAUSE 34
#define NR_CLONE 56
#define NR_EXIT_GROUP 231
#define NR_PRCTL 157
#define NR_GETPPID 110
#define NR_GETPID 39
#define NR_MMAP 9
#define NR_WAIT4 61

static inline long sys6(long nr, long a, long b, long c, long d, long e, long f)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#elif defined(__aarch64__)
#define NR_READ 63
#define NR_WRITE 64
#define NR_PAUSE -1 /* no pause(2) on aarch64: ppoll(NULL, 0, NULL, NULL) instead */
#define NR_PPOLL 73
#define NR_CLONE 220
#define NR_EXIT_GROUP 94
#define NR_PRCTL 167
#define NR_GETPPID 173
#define NR_GETPID 172
#define NR_MMAP 222
#define NR_WAIT4 260

static inline long sys6(long nr, long a, long b, long c, long d, long e, long f)
{
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
}
#else
#error "herd: only x86_64 and aarch64"
#endif

#define sys5(nr, a, b, c, d, e) sys6(nr, a, b, c, d, e, 0)

#define SIGCHLD 17
#define SIGKILL 9
#define PR_SET_PDEATHSIG 1

#if defined(__x86_64__)
__asm__(".globl _start\n_start:\n\txor %ebp, %ebp\n\tmov %rsp, %rdi\n\tcall herd_main\n\tud2\n");
#else
__asm__(".globl _start\n_start:\n\tmov x29, xzr\n\tmov x0, sp\n\tbl herd_main\n\tbrk #0\n");
#endif

static void say(const char *s, long n) { sys5(NR_WRITE, 1, (long)s, n, 0, 0); }

__attribute__((noreturn)) static void leave(long code)
{
    for (;;)
        sys5(NR_EXIT_GROUP, code, 0, 0, 0, 0);
}

__attribute__((noreturn)) static void sleep_forever(long herd)
{
    sys5(NR_PRCTL, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    /* The herd may have died before the prctl: then nothing would kill us. */
    if (sys5(NR_GETPPID, 0, 0, 0, 0, 0) != herd)
        leave(0);
    for (;;) {
#if defined(__x86_64__)
        sys5(NR_PAUSE, 0, 0, 0, 0, 0);
#else
        sys5(NR_PPOLL, 0, 0, 0, 0, 0);
#endif
    }
}

static long number(const char *arg)
{
    long n = 0;
    for (; arg && *arg >= '0' && *arg <= '9'; arg++)
        n = n * 10 + (*arg - '0');
    return n;
}

static void wait_for_eof(void)
{
    char buf[64];
    while (sys5(NR_READ, 0, (long)buf, sizeof buf, 0, 0) > 0) {
    }
}

#define PROT_RW 3
#define MAP_SHARED_ANON 0x21
#define MIB (1L << 20)

/* Write one byte in every page of the first `mib` MiB in a child, and wait for it. */
static void writer(char *base, long mib)
{
    long pid = sys5(NR_CLONE, SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) {
        for (long off = 0; off < mib * MIB; off += 4096)
            base[off] = 1;
        leave(0);
    }
    if (pid < 0 || sys5(NR_WAIT4, pid, 0, 0, 0, 0) != pid) {
        say("fork failed\n", 12);
        leave(1);
    }
}

__attribute__((noreturn)) static void shm_fixture(long total, long a, long b)
{
    long base = sys6(NR_MMAP, 0, total * MIB, PROT_RW, MAP_SHARED_ANON, -1, 0);
    if (base < 0 && base > -4096) {
        say("mmap failed\n", 12);
        leave(1);
    }
    writer((char *)base, a);
    writer((char *)base, b);
    say("ready\n", 6);
    wait_for_eof();
    leave(0);
}

/* The stack at _start: argc, then argv[]. */
__attribute__((noreturn, used)) void herd_main(long *sp)
{
    long argc = sp[0];
    const char *arg = argc > 1 ? (const char *)sp[2] : "0";
    if (arg[0] == 's' && arg[1] == 'h' && arg[2] == 'm' && arg[3] == 0 && argc == 5)
        shm_fixture(number((const char *)sp[3]), number((const char *)sp[4]),
                    number((const char *)sp[5]));
    long n = number(arg);
    long self = sys5(NR_GETPID, 0, 0, 0, 0, 0);
    for (long i = 0; i < n; i++) {
        long pid = sys5(NR_CLONE, SIGCHLD, 0, 0, 0, 0);
        if (pid == 0)
            sleep_forever(self);
        if (pid < 0) {
            say("fork failed\n", 12);
            leave(1);
        }
    }
    say("ready\n", 6);
    wait_for_eof();
    leave(0);
}
