/*
 * The design floor under a spawn server's latency and throughput (issue 13, `spawnkit bench
 * server`): the least a server that keeps a pre-created child parked can do for one request,
 * in plain C, so that its rows beside vfork+exec in the same run say how much of spawnkit's
 * server rows is the design and how much is spawnkit.
 *
 * What it does, and nothing more:
 *   client  getcwd, copies `environ` (this C program has one thread: nobody can change the
 *           environment under it; a Rust client must copy it under std's lock), sends one
 *           length-prefixed message (cwd, program, argv, environment) with its stdin, the
 *           given stdout and its stderr by SCM_RIGHTS (fs_submit), and takes the answer
 *           (pid, and the pidfd by SCM_RIGHTS: fs_receive), at once for latency, with up to
 *           16 requests in flight for throughput (answers come in order);
 *   server  one thread blocked in recvmsg, one request at a time; it stores the request in the
 *           parked child's dock, wakes it (futex), sleeps until the kernel clears the child's tid (the child has
 *           exec'd: CLONE_CHILD_CLEARTID), answers, closes what it received, and parks the
 *           next child;
 *           (and, for a bare name, execvp's candidates along the client's PATH);
 *   child   made ahead of time with clone(CLONE_VM | CLONE_FILES | CLONE_PIDFD |
 *           CLONE_CHILD_CLEARTID), all signals blocked, parked on a futex with
 *           PR_SET_PDEATHSIG; woken, it clears the death signal, takes the signals sent while
 *           parked, takes its own copy of the fd table, puts the three fds at 0-2, changes to
 *           the client's cwd, unblocks signals and execs with the client's environment (each candidate in turn, as
 *           execvp; an exec error is written where the server reads it, and answered).
 *
 * Left out, each of which spawnkit's server does: authentication (per connection, not per
 * request), a protocol that carries every option, ids and answers out of order, errors
 * that name the failed step, checking which of the caller's fds are open, close-on-exec
 * everywhere else, signal dispositions, the watchdog, reaping.
 *
 * The server reaps its children after each answer (it does not ignore SIGCHLD: its children
 * would inherit that); the client learns a child's end from its pidfd (readable once it has
 * exited). A parked child killed before `park` stores its tid would leave the server waiting:
 * nothing here sends it a signal.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/futex.h>

extern char **environ;

#define MSG_MAX (128 * 1024)
#define STACK_SIZE (64 * 1024)

struct dock {
    volatile uint32_t go;   /* 0 parked, 1 go */
    volatile int32_t tid;   /* the child's tid; the kernel clears it when the child execs */
    char **cands;           /* the program's paths to try, NULL-terminated */
    char **argv;
    char **envp;
    const char *cwd;
    int fds[3];
    pid_t server;
    volatile int err;       /* the last execve error when the child exits instead */
};

static struct dock dock;
static char req[4 + MSG_MAX];
static char *argv_v[64];
static char *env_v[4096];
static char *cand_v[64];
static char cand_buf[16384];
static char *stack_mem;
static int parked_pidfd = -1;
static pid_t parked_pid = -1;

static long sc(long n, long a, long b, long c, long d)
{
    return syscall(n, a, b, c, d);
}

/* The parked child: raw system calls only (it shares the server's memory). */
static int parked_main(void *arg)
{
    struct dock *d = arg;
    sc(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0);
    if (sc(SYS_getppid, 0, 0, 0, 0) != d->server)
        sc(SYS_exit_group, 0, 0, 0, 0);
    while (__atomic_load_n(&d->go, __ATOMIC_ACQUIRE) == 0)
        sc(SYS_futex, (long)&d->go, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, 0, 0);
    sc(SYS_prctl, PR_SET_PDEATHSIG, 0, 0, 0);
    uint64_t all = ~0ULL;
    long zero[2] = {0, 0};
    while (sc(SYS_rt_sigtimedwait, (long)&all, 0, (long)zero, 8) >= 0)
        ;
    sc(SYS_unshare, CLONE_FILES, 0, 0, 0);
    for (int i = 0; i < 3; i++)
        sc(SYS_dup2, d->fds[i], i, 0, 0);
    sc(SYS_chdir, (long)d->cwd, 0, 0, 0);
    uint64_t none = 0;
    sc(SYS_rt_sigprocmask, SIG_SETMASK, (long)&none, 0, 8);
    long r = -ENOENT;
    for (char **c = d->cands; *c; c++) {
        r = sc(SYS_execve, (long)*c, (long)d->argv, (long)d->envp, 0);
        if (r != -ENOENT && r != -ENOTDIR && r != -EACCES)
            break;
    }
    d->err = (int)r;
    sc(SYS_exit_group, 127, 0, 0, 0);
    return 0;
}

static int park(void)
{
    sigset_t all, old;
    __atomic_store_n(&dock.go, 0, __ATOMIC_RELEASE);
    dock.err = 0;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    parked_pid = clone(parked_main, stack_mem + STACK_SIZE,
                       CLONE_VM | CLONE_FILES | CLONE_PIDFD | CLONE_CHILD_CLEARTID | SIGCHLD,
                       &dock, &parked_pidfd, NULL, &dock.tid);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (parked_pid < 0)
        return -1;
    __atomic_store_n(&dock.tid, parked_pid, __ATOMIC_RELEASE);
    return 0;
}

/* Read one request (a 4-byte length, then that many bytes) into req, its fds (at most 3) into
 * FDS: one recvmsg when it all came at once, as it does here (a request is one sendmsg far
 * below the socket buffer, so one skb, and a recvmsg ends with the skb that brought fds: it
 * never takes bytes of the request behind it, even with many in flight). Returns the body's
 * length, or -1. */
static long read_request(int s, int *fds, int *nfds)
{
    size_t got = 0, want = 4;
    while (got < want) {
        char cbuf[CMSG_SPACE(3 * sizeof(int))];
        struct iovec iov = {req + got, sizeof req - got};
        struct msghdr m = {0};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = cbuf;
        m.msg_controllen = sizeof cbuf;
        ssize_t n = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
        if (n <= 0)
            return -1;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                if (*nfds + k > 3)
                    return -1;
                memcpy(fds + *nfds, CMSG_DATA(c), (size_t)k * sizeof(int));
                *nfds += k;
            }
        }
        got += (size_t)n;
        if (got >= 4) {
            uint32_t len;
            memcpy(&len, req, 4);
            if (len > MSG_MAX)
                return -1;
            want = 4 + (size_t)len;
        }
    }
    return (long)(want - 4);
}

/* One sendmsg of LEN bytes at BUF with the N fds at FDS (SCM_RIGHTS). */
static ssize_t send_with_fds(int s, void *buf, size_t len, const int *fds, int n)
{
    char cbuf[CMSG_SPACE(3 * sizeof(int))];
    struct iovec iov = {buf, len};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf;
    m.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)n * sizeof(int));
    return sendmsg(s, &m, MSG_NOSIGNAL);
}

static void serve(int s)
{
    stack_mem = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack_mem == MAP_FAILED || park() < 0)
        _exit(1);
    for (;;) {
        int fds[3], nfds = 0;
        long len = read_request(s, fds, &nfds);
        if (len < 0 || nfds != 3)
            _exit(0);
        /* cwd \0 program \0 argv... \0 \0 env... \0 \0 */
        char *p = req + 4, *end = req + 4 + len;
        dock.cwd = p;
        p += strlen(p) + 1;
        const char *prog = p;
        p += strlen(p) + 1;
        int a = 0, e = 0;
        while (p < end && *p && a < 63) {
            argv_v[a++] = p;
            p += strlen(p) + 1;
        }
        argv_v[a] = NULL;
        p++;
        while (p < end && *p && e < 4095) {
            env_v[e++] = p;
            p += strlen(p) + 1;
        }
        env_v[e] = NULL;
        /* execvp's candidates: the name itself when it has a '/', else each PATH entry */
        int n = 0;
        if (strchr(prog, '/')) {
            cand_v[n++] = (char *)prog;
        } else {
            const char *path = "/usr/local/bin:/usr/bin:/bin";
            for (int i = 0; i < e; i++)
                if (strncmp(env_v[i], "PATH=", 5) == 0)
                    path = env_v[i] + 5;
            char *q = cand_buf, *qend = cand_buf + sizeof cand_buf;
            size_t pl = strlen(prog);
            while (n < 63) {
                const char *colon = strchr(path, ':');
                size_t dl = colon ? (size_t)(colon - path) : strlen(path);
                if (q + dl + pl + 2 > qend)
                    break;
                cand_v[n++] = q;
                memcpy(q, path, dl);
                q += dl;
                if (dl > 0)
                    *q++ = '/';
                memcpy(q, prog, pl + 1);
                q += pl + 1;
                if (!colon)
                    break;
                path = colon + 1;
            }
        }
        cand_v[n] = NULL;
        dock.cands = cand_v;
        dock.argv = argv_v;
        dock.envp = env_v;
        memcpy(dock.fds, fds, sizeof dock.fds);
        __atomic_store_n(&dock.go, 1, __ATOMIC_RELEASE);
        sc(SYS_futex, (long)&dock.go, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, 0);
        int32_t t;
        while ((t = __atomic_load_n(&dock.tid, __ATOMIC_ACQUIRE)) != 0)
            sc(SYS_futex, (long)&dock.tid, FUTEX_WAIT, t, 0);
        /* the pid, or the exec's -errno when the child exited instead */
        int32_t pid = dock.err ? dock.err : parked_pid;
        if (send_with_fds(s, &pid, sizeof pid, &parked_pidfd, 1) < 0)
            _exit(0);
        close(parked_pidfd);
        for (int i = 0; i < 3; i++)
            close(fds[i]);
        if (park() < 0)
            _exit(1);
        /* the children that have ended since (off the next request's path) */
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
    }
}

/* Fork the floor server now (while this process is small) and return the client's end of
 * its socket, or -errno; its pid goes to *PID (the caller reaps it: it exits when that end
 * is closed, or when this process dies). */
int fs_start(int *pid_out)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        return -e;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(0);
        /* Keep nothing of the parent's but the socket and stdio: a pipe or socket of its
         * (another server's, say) held open here would keep that one from seeing EOF. */
        int keep = sv[1];
        if (keep > 3)
            syscall(SYS_close_range, 3, keep - 1, 0);
        syscall(SYS_close_range, keep + 1, ~0U, 0);
        dock.server = getpid();
        serve(sv[1]);
        _exit(0);
    }
    close(sv[1]);
    *pid_out = pid;
    return sv[0];
}

int fs_wait(int pidfd);

static char msg[4 + MSG_MAX];

/* Send the request to start PROG (argv {PROG}) through the floor server on SOCK with stdout
 * on OUT_FD, this process's cwd and environment, stdin and stderr: 0, or -errno. Its answer
 * is for fs_receive (answers come in the order of the requests). */
int fs_submit(int sock, const char *prog, int out_fd)
{
    char *p = msg + 4, *end = msg + sizeof msg;
    if (!getcwd(p, 4096))
        return -errno;
    p += strlen(p) + 1;
    size_t l = strlen(prog) + 1;
    if (p + 2 * l + 1 > end)
        return -E2BIG;
    memcpy(p, prog, l);
    p += l;
    memcpy(p, prog, l);
    p += l;
    *p++ = 0;
    for (char **e = environ; *e; e++) {
        l = strlen(*e) + 1;
        if (p + l + 1 > end)
            return -E2BIG;
        memcpy(p, *e, l);
        p += l;
    }
    *p++ = 0;
    uint32_t len = (uint32_t)(p - msg - 4);
    memcpy(msg, &len, 4);
    int fds[3] = {0, out_fd, 2};
    if (send_with_fds(sock, msg, (size_t)(p - msg), fds, 3) != p - msg)
        return -EIO;
    return 0;
}

/* The answer to the oldest request not answered yet: the pid, with the pidfd in *PIDFD, or
 * -errno (the exec's, or -EIO). */
int fs_receive(int sock, int *pidfd)
{
    int32_t pid;
    char rbuf[CMSG_SPACE(sizeof(int))];
    struct iovec riov = {&pid, sizeof pid};
    struct msghdr r = {0};
    r.msg_iov = &riov;
    r.msg_iovlen = 1;
    r.msg_control = rbuf;
    r.msg_controllen = sizeof rbuf;
    if (recvmsg(sock, &r, MSG_CMSG_CLOEXEC | MSG_WAITALL) != sizeof pid)
        return -EIO;
    struct cmsghdr *rc = CMSG_FIRSTHDR(&r);
    if (!rc || rc->cmsg_type != SCM_RIGHTS)
        return -EIO;
    memcpy(pidfd, CMSG_DATA(rc), sizeof(int));
    if (pid < 0) {
        fs_wait(*pidfd);
        *pidfd = -1;
    }
    return pid;
}


/* Wait for the child behind PIDFD to end (its pidfd turns readable), then close it. */
int fs_wait(int pidfd)
{
    struct pollfd p = {pidfd, POLLIN, 0};
    while (poll(&p, 1, -1) < 0 && errno == EINTR)
        ;
    close(pidfd);
    return 0;
}
