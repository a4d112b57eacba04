/*
 * The tiny child of `spawnkit bench` (Josh Triplett's latency method, LPC 2022): no libc, no
 * dynamic loader, three raw system calls. It reads CLOCK_MONOTONIC with the clock_gettime
 * *system call* (not the vDSO, which a static binary without libc has no code to find), writes
 * the 16-byte struct timespec to fd 1, and exits with exit_group(0).
 *
 * Built by crates/spawnkit-cli/build.rs:
 *   gcc -static -nostdlib -nostartfiles -O2 -fno-stack-protector ... tinychild.c
 * and embedded in the spawnkit binary, which writes it to a temporary directory put first in
 * PATH, so every row of the benchmark finds it with the same one-entry PATH search.
 */

struct timespec_k {
    long tv_sec;
    long tv_nsec;
};

#if defined(__x86_64__)
#define NR_CLOCK_GETTIME 228
#define NR_WRITE 1
#define NR_EXIT_GROUP 231

static inline long sys3(long nr, long a, long b, long c)
{
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return ret;
}
#elif defined(__aarch64__)
#define NR_CLOCK_GETTIME 113
#define NR_WRITE 64
#define NR_EXIT_GROUP 94

static inline long sys3(long nr, long a, long b, long c)
{
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
    return x0;
}
#else
#error "tinychild: only x86_64 and aarch64"
#endif

#define CLOCK_MONOTONIC 1

/* The kernel enters _start with the stack pointer 16-byte aligned; a C function expects it
 * as after a call, so _start (assembly) calls tiny_main like any function. */
#if defined(__x86_64__)
__asm__(".globl _start\n_start:\n\txor %ebp, %ebp\n\tcall tiny_main\n\tud2\n");
#else
__asm__(".globl _start\n_start:\n\tmov x29, xzr\n\tbl tiny_main\n\tbrk #0\n");
#endif

__attribute__((noreturn, used)) void tiny_main(void)
{
    struct timespec_k ts = {0, 0};
    sys3(NR_CLOCK_GETTIME, CLOCK_MONOTONIC, (long)&ts, 0);
    sys3(NR_WRITE, 1, (long)&ts, sizeof ts);
    for (;;)
        sys3(NR_EXIT_GROUP, 0, 0, 0);
}
