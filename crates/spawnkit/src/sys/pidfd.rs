//! pidfds: open, signal, wait, poll (pidfd_open(2), pidfd_send_signal(2), waitid(2) with
//! P_PIDFD, poll(2)). Parent side only; plain libc calls are fine here.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::last_errno;

const P_PIDFD: libc::idtype_t = 3;

/// pidfd_open(pid, 0).
pub(crate) fn open(pid: i32) -> Result<OwnedFd, i32> {
    // SAFETY: pidfd_open takes integers and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: the fd was just created.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// pidfd_send_signal(pidfd, sig, NULL, 0).
pub(crate) fn send_signal(pidfd: BorrowedFd<'_>, sig: i32) -> Result<(), i32> {
    // SAFETY: NULL siginfo is allowed; the pidfd is borrowed and open.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<u8>(),
            0,
        )
    };
    if r < 0 {
        Err(last_errno())
    } else {
        Ok(())
    }
}

/// How a child ended, as waitid reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Exited(i32),
    Signaled { signal: i32, core: bool },
}

/// waitid(P_PIDFD, pidfd, WEXITED [| WNOHANG]): `Ok(None)` when `nohang` and still running.
pub(crate) fn wait(pidfd: BorrowedFd<'_>, nohang: bool) -> Result<Option<Ended>, i32> {
    Ok(waitid(P_PIDFD, pidfd.as_raw_fd() as libc::id_t, nohang)?.map(|(_, e)| e))
}

/// waitid(`idtype`, `id`, WEXITED [| WNOHANG]), EINTR retried: the pid reaped and how it
/// ended; `Ok(None)` when `nohang` and none has ended.
pub(crate) fn waitid(
    idtype: libc::idtype_t,
    id: libc::id_t,
    nohang: bool,
) -> Result<Option<(i32, Ended)>, i32> {
    let flags = libc::WEXITED | if nohang { libc::WNOHANG } else { 0 };
    loop {
        // SAFETY: zeroed siginfo_t is a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes into `info` only.
        let r = unsafe { libc::waitid(idtype, id, &mut info, flags) };
        if r < 0 {
            let e = last_errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        // SAFETY: waitid filled a SIGCHLD siginfo (or left it zeroed with WNOHANG).
        let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
        if pid == 0 {
            return Ok(None);
        }
        return Ok(Some((
            pid,
            match info.si_code {
                libc::CLD_EXITED => Ended::Exited(status),
                libc::CLD_DUMPED => Ended::Signaled { signal: status, core: true },
                _ => Ended::Signaled { signal: status, core: false },
            },
        )));
    }
}

/// poll(2) one fd for `events`; `timeout_ms < 0` waits forever. Returns the revents (0 on
/// timeout). EINTR is returned to the caller, which knows the remaining time.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> Result<usize, i32> {
    // SAFETY: `fds` is a valid array of pollfd for its length.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        Err(last_errno())
    } else {
        Ok(r as usize)
    }
}

/// `struct pidfd_info` as of its first size (`PIDFD_INFO_SIZE_VER0`, 64 bytes; Linux 6.13),
/// whose spare field became `exit_code` in 6.15.
#[repr(C)]
#[derive(Default)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    ids: [u32; 11],
    exit_code: i32,
}

/// `PIDFD_GET_INFO`: `_IOWR(0xFF, 11, struct pidfd_info)` with the 64-byte size.
const PIDFD_GET_INFO: libc::c_ulong = (3 << 30) | (64 << 16) | (0xFF << 8) | 11;
const PIDFD_INFO_EXIT: u64 = 1 << 3;

/// [`exit_info`] past the instant between the process leaving the pid table and the kernel
/// recording its exit, when it reads ESRCH (a few µs, seen once in thousands of reaps on
/// 6.18). Nothing to block on there (the pidfd's POLLHUP is already up): yield, then sleep
/// briefly, bounded (~0.2 s).
pub(crate) fn exit_info_settled(pidfd: BorrowedFd<'_>) -> Result<Option<Ended>, i32> {
    let mut info = exit_info(pidfd);
    let mut tries = 0u32;
    while info == Err(libc::ESRCH) && tries < 200 {
        if tries < 20 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        tries += 1;
        info = exit_info(pidfd);
    }
    info
}

/// How the process behind `pidfd` ended, from `ioctl(PIDFD_GET_INFO)` with
/// `PIDFD_INFO_EXIT` (Linux 6.15+; works for a process that is not our child): `Ok(None)`
/// while it runs or is not reaped yet (the kernel records the exit when the parent reaps),
/// `Err(ENOTTY/EINVAL)` on a kernel without the ioctl.
pub(crate) fn exit_info(pidfd: BorrowedFd<'_>) -> Result<Option<Ended>, i32> {
    let mut info = PidfdInfo { mask: PIDFD_INFO_EXIT, ..PidfdInfo::default() };
    // SAFETY: the ioctl writes at most 64 bytes (the size in its number) into `info`.
    let r = unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_INFO as _, &mut info) };
    if r < 0 {
        let e = last_errno();
        // ESRCH: a process that is gone and whose exit was never recorded.
        return Err(e);
    }
    if info.mask & PIDFD_INFO_EXIT == 0 {
        return Ok(None);
    }
    let (exited, value, core) = super::sock::decode_wait_status(info.exit_code);
    Ok(Some(if exited { Ended::Exited(value) } else { Ended::Signaled { signal: value, core } }))
}
