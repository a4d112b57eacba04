/*
 * The baseline spawners of `spawnkit bench`, written the way a C program uses each API.
 *
 * Every function starts PROG (a bare name, found along PATH by the API itself: execvp,
 * posix_spawnp, the shell of system() and popen()) with its stdout on OUT_FD, the same fd the
 * benchmark hands to every row, and returns without waiting (except system(), which always
 * waits). Nothing here does work a spawnkit row skips: no signal blocking, no fd closing, no
 * error pipe. The spawnkit rows do more (close the other fds, reset SIGPIPE, report errors);
 * that is part of what they cost.
 *
 * Built by crates/spawnkit-cli/build.rs with the `cc` crate and linked into the spawnkit
 * binary; the Rust side is crates/spawnkit-cli/src/bench/sys.rs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* fork(), then in the child dup2 + execvp. Returns the pid, or -errno. */
int bl_fork_exec(const char *prog, int out_fd)
{
    char *argv[] = {(char *)prog, NULL};
    pid_t pid = fork();
    if (pid == 0) {
        if (out_fd != 1 && dup2(out_fd, 1) < 0)
            _exit(126);
        execvp(prog, argv);
        _exit(127);
    }
    return pid < 0 ? -errno : pid;
}

/* vfork(), then in the child dup2 + execvp (glibc's execvp allocates nothing on this path:
 * the candidate path is built on the stack). Returns the pid, or -errno. */
int bl_vfork_exec(const char *prog, int out_fd)
{
    char *argv[] = {(char *)prog, NULL};
    pid_t pid = vfork();
    if (pid == 0) {
        if (out_fd != 1 && dup2(out_fd, 1) < 0)
            _exit(126);
        execvp(prog, argv);
        _exit(127);
    }
    return pid < 0 ? -errno : pid;
}

/* vfork(), then in the child dup2 + execvp(ARGV[0], ARGV): bl_vfork_exec with arguments, the
 * launcher of the fence method's shell-chain and bubblewrap rows. ERR_FD >= 0 becomes stderr
 * (only the untimed trial run asks for it). Returns the pid, or -errno. */
int bl_vfork_execvp_argv(char *const argv[], int out_fd, int err_fd)
{
    pid_t pid = vfork();
    if (pid == 0) {
        if (out_fd != 1 && dup2(out_fd, 1) < 0)
            _exit(126);
        if (err_fd >= 0 && err_fd != 2 && dup2(err_fd, 2) < 0)
            _exit(126);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid < 0 ? -errno : pid;
}

/* glibc posix_spawnp with one file action (dup2 OUT_FD onto 1). Returns the pid, or -errno. */
int bl_posix_spawnp(const char *prog, int out_fd)
{
    char *argv[] = {(char *)prog, NULL};
    posix_spawn_file_actions_t fa;
    pid_t pid = -1;
    int err = posix_spawn_file_actions_init(&fa);
    if (err != 0)
        return -err;
    if (out_fd != 1)
        err = posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    if (err == 0)
        err = posix_spawnp(&pid, prog, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return err != 0 ? -err : pid;
}

/* system(PROG) with this process's stdout pointed at OUT_FD for the call (system() has no
 * other way to redirect without more shell syntax). Waits, as system() does. Returns the wait
 * status, or -errno. */
int bl_system(const char *prog, int out_fd)
{
    int saved = -1;
    if (out_fd != 1) {
        saved = dup(1);
        if (saved < 0 || dup2(out_fd, 1) < 0)
            return -errno;
    }
    int status = system(prog);
    int err = errno;
    if (saved >= 0) {
        dup2(saved, 1);
        close(saved);
    }
    return status < 0 ? -err : status;
}

/* popen(PROG, "r"): the child's stdout is popen's own pipe. Stores the FILE* in *HANDLE and
 * returns the pipe's read fd, or -errno. */
int bl_popen(const char *prog, void **handle)
{
    FILE *f = popen(prog, "re");
    if (f == NULL)
        return -(errno ? errno : ENOMEM);
    *handle = f;
    return fileno(f);
}

/* pclose: wait for the popen() child. Returns its wait status, or -errno. */
int bl_pclose(void *handle)
{
    int status = pclose((FILE *)handle);
    return status < 0 ? -errno : status;
}
