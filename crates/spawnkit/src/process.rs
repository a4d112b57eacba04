//! The calling process's own facts and fds, for the faces (the `spawnkit` command, the
//! Python glue, the benchmarks) so that none of them needs `unsafe` for them: effective uid,
//! process group, fd flags, close-on-exec ranges, RLIMIT_NOFILE, poll(2) for readability,
//! pidfd_open(2), pidfd_send_signal(2), a reaped process's status from its pidfd and a
//! signal to a whole process group.
//!
//! These are plain libc calls: fine in the parent and in a `fork()`ed child (a `pre_exec`
//! hook), never between clone and execve of the default strategy.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};

use crate::sys;

fn os(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

/// geteuid(2): the effective user id.
pub fn geteuid() -> u32 {
    sys::this_process::geteuid()
}

/// getpgrp(2): the process group of the calling process.
pub fn getpgrp() -> i32 {
    sys::this_process::getpgrp()
}

/// kill(2) of `-pgid`: `sig` to every process of group `pgid` (a group a child leads, e.g. one
/// started with `process_group(0)`: its id is the child's pid while the child is not reaped).
/// EINVAL for `pgid` ≤ 1, which would be this process's own group or every process.
pub fn kill_process_group(pgid: i32, sig: i32) -> io::Result<()> {
    sys::this_process::kill_group(pgid, sig).map_err(os)
}

/// fcntl(2) `F_GETFD`: the fd flags of `fd` (`FD_CLOEXEC`), or why not (EBADF: not open).
pub fn fd_flags(fd: RawFd) -> io::Result<i32> {
    sys::this_process::fd_flags(fd).map_err(os)
}

/// fcntl(2) `F_SETFD, FD_CLOEXEC`: mark `fd` close-on-exec.
pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    sys::this_process::set_cloexec(fd).map_err(os)
}

/// close_range(2) with `CLOSE_RANGE_CLOEXEC`: mark every open fd in `first..=last`
/// close-on-exec (Linux 5.11+; an error on older kernels).
pub fn cloexec_range(first: u32, last: u32) -> io::Result<()> {
    sys::this_process::cloexec_range(first, last).map_err(os)
}

/// getrlimit(2) `RLIMIT_NOFILE`: (soft, hard).
pub fn nofile_limit() -> io::Result<(u64, u64)> {
    sys::this_process::getrlimit(libc::RLIMIT_NOFILE).map_err(os)
}

/// poll(2) `POLLIN` on each of `fds` for up to `timeout_ms` (negative: forever). Returns
/// which ones are ready (any revents: readable, hung up or in error), all false on timeout.
/// EINTR is returned as an error, for the caller to handle its signals and retry.
pub fn poll_readable<const N: usize>(fds: [RawFd; N], timeout_ms: i32) -> io::Result<[bool; N]> {
    let mut pfds = fds.map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
    sys::pidfd::poll(&mut pfds, timeout_ms).map_err(os)?;
    Ok(pfds.map(|p| p.revents != 0))
}

/// poll(2) on each of `fds` for hang-up alone (no event asked: `POLLHUP` and `POLLERR` are
/// always reported) for up to `timeout_ms` (negative: forever). A pidfd hangs up once its
/// process has been reaped: the wait for a child started by a spawn server, which the server
/// reaps, and whose exit status the kernel records then (a pidfd is readable, `POLLIN`, from
/// the exit on, before that reap: waiting for `POLLIN` would wake too early, again and
/// again). Which ones hung up; all false on timeout. EINTR is returned as an error.
pub fn poll_hung_up<const N: usize>(fds: [RawFd; N], timeout_ms: i32) -> io::Result<[bool; N]> {
    let mut pfds = fds.map(|fd| libc::pollfd { fd, events: 0, revents: 0 });
    sys::pidfd::poll(&mut pfds, timeout_ms).map_err(os)?;
    Ok(pfds.map(|p| p.revents != 0))
}

/// pidfd_send_signal(2) of signal number `sig` (0 only checks) through `pidfd`, which the
/// caller keeps open for the call. ESRCH (the process has exited) is returned as it is.
pub fn pidfd_send_signal(pidfd: RawFd, sig: i32) -> io::Result<()> {
    sys::this_process::pidfd_send_signal(pidfd, sig).map_err(os)
}

/// pidfd_open(2): a pidfd for process `pid` (close-on-exec).
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    sys::pidfd::open(pid).map_err(os)
}

/// How the process behind `pidfd` ended, read with `ioctl(PIDFD_GET_INFO)` and
/// `PIDFD_INFO_EXIT` (Linux 6.15+; for any process, not only a child of ours): `None` while
/// it runs or before its parent has reaped it. An error on a kernel without the ioctl. The
/// instant between a reaped process leaving the pid table and the kernel recording its exit
/// is waited out, as a remote `Child`'s wait does.
pub fn pidfd_exit_status(pidfd: BorrowedFd<'_>) -> io::Result<Option<crate::ExitStatus>> {
    Ok(sys::pidfd::exit_info_settled(pidfd).map_err(os)?.map(crate::ExitStatus::from))
}
