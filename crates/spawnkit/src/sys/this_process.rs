//! Small facts and knobs of the calling process (parent side, or a fork()ed child that may
//! call libc): ids, the process group, fd flags, close_range(2), getrlimit(2).

use core::sync::atomic::{AtomicU64, Ordering};

use super::last_errno;

pub(crate) use super::parent::geteuid;

/// getpgrp(2).
pub(crate) fn getpgrp() -> i32 {
    // SAFETY: getpgrp has no arguments and cannot fail.
    unsafe { libc::getpgrp() }
}

/// gettid(2): the calling thread's id.
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// Whether process `pid` shares this process's address space (kcmp(2) `KCMP_VM`): true
/// for a `CLONE_VM` child that has not exec'd yet.
pub(crate) fn shares_our_vm(pid: i32) -> Result<bool, i32> {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: getpid has no arguments and cannot fail.
    let me = unsafe { libc::getpid() };
    // SAFETY: kcmp takes two pids, a type and two unused integers; no memory is passed.
    let r = unsafe {
        libc::syscall(libc::SYS_kcmp, me, pid, KCMP_VM, 0 as libc::c_long, 0 as libc::c_long)
    };
    if r < 0 {
        Err(last_errno())
    } else {
        Ok(r == 0)
    }
}

/// The signals this process ignores (SIG_IGN), read with rt_sigaction(2) for each (SIGKILL
/// and SIGSTOP cannot be). An exec keeps them ignored in the new program.
pub(crate) fn ignored_signals() -> u64 {
    use super::in_child::KernelSigaction;
    let mut bits = 0u64;
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let mut old = KernelSigaction::default();
        // SAFETY: rt_sigaction with no new action only writes the old one into `old` (the
        // kernel's layout, 8-byte mask on x86_64 and aarch64).
        let r = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                std::ptr::null::<KernelSigaction>(),
                &mut old as *mut KernelSigaction,
                8usize,
            )
        };
        if r == 0 && old.handler == libc::SIG_IGN {
            bits |= 1u64 << (sig - 1);
        }
    }
    bits
}

/// fcntl(fd, F_GETFD): the fd flags.
pub(crate) fn fd_flags(fd: i32) -> Result<i32, i32> {
    // SAFETY: F_GETFD takes an integer fd and no memory argument.
    let r = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if r < 0 {
        Err(last_errno())
    } else {
        Ok(r)
    }
}

/// fcntl(fd, F_SETFD, FD_CLOEXEC).
pub(crate) fn set_cloexec(fd: i32) -> Result<(), i32> {
    // SAFETY: F_SETFD on an fd number only changes its flags.
    let r = unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    if r < 0 {
        Err(last_errno())
    } else {
        Ok(())
    }
}

/// kill(-pgid, sig): signal every process of a process group.
pub(crate) fn kill_group(pgid: i32, sig: i32) -> Result<(), i32> {
    if pgid <= 1 {
        return Err(libc::EINVAL); // kill(0)/kill(-1) would reach our own group or everyone
    }
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is passed.
    if unsafe { libc::kill(-pgid, sig) } != 0 {
        Err(last_errno())
    } else {
        Ok(())
    }
}

/// kill(getpid(), sig): signal this process (any thread that does not block `sig` takes
/// it, or a signalfd when every thread blocks it).
pub(crate) fn signal_self(sig: i32) {
    // SAFETY: kill(2) with our own pid; no memory is passed.
    unsafe { libc::kill(libc::getpid(), sig) };
}

/// close_range(first, last, CLOSE_RANGE_CLOEXEC): mark the range close-on-exec.
pub(crate) fn cloexec_range(first: u32, last: u32) -> Result<(), i32> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range(2) with CLOSE_RANGE_CLOEXEC only sets flags on this process's fds.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, CLOSE_RANGE_CLOEXEC) };
    if r != 0 {
        Err(last_errno())
    } else {
        Ok(())
    }
}

/// getrlimit(2): (soft, hard).
pub(crate) fn getrlimit(resource: libc::__rlimit_resource_t) -> Result<(u64, u64), i32> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes `lim`, a local.
    if unsafe { libc::getrlimit(resource, &mut lim) } == 0 {
        Ok((lim.rlim_cur, lim.rlim_max))
    } else {
        Err(last_errno())
    }
}

/// The soft `RLIMIT_NOFILE` this process had before [`raise_fd_limit`] raised it (`u64::MAX`:
/// never raised), and the hard one it raised it to. Atomics, not a lock: a process forked
/// while another thread held a lock would find it held for good.
static FD_LIMIT_SOFT: AtomicU64 = AtomicU64::new(u64::MAX);
static FD_LIMIT_HARD: AtomicU64 = AtomicU64::new(0);

/// Raise this process's soft `RLIMIT_NOFILE` to its hard limit (what Go's runtime does at
/// start), once per process, remembering the limit it had for [`fd_limit_given`].
pub(crate) fn raise_fd_limit() {
    if fd_limit_given().is_some() {
        return;
    }
    let Ok((soft, hard)) = getrlimit(libc::RLIMIT_NOFILE) else { return };
    if soft >= hard {
        return;
    }
    let lim = libc::rlimit { rlim_cur: hard, rlim_max: hard };
    // SAFETY: setrlimit reads one rlimit struct, a local.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
        FD_LIMIT_HARD.store(hard, Ordering::Relaxed);
        FD_LIMIT_SOFT.store(soft, Ordering::Release);
    }
}

/// The fd limit this process had before [`raise_fd_limit`] raised it, if it did: what a
/// plan built here gives a child back (`Step::RestoreFdLimit`).
pub(crate) fn fd_limit_given() -> Option<(u64, u64)> {
    let soft = FD_LIMIT_SOFT.load(Ordering::Acquire);
    (soft != u64::MAX).then(|| (soft, FD_LIMIT_HARD.load(Ordering::Relaxed)))
}

/// pidfd_send_signal(pidfd, sig, NULL, 0) on a raw fd number the caller keeps open.
pub(crate) fn pidfd_send_signal(pidfd: i32, sig: i32) -> Result<(), i32> {
    // SAFETY: integer arguments and a NULL siginfo (allowed); a wrong fd number gives EBADF.
    let r = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd, sig, std::ptr::null::<u8>(), 0)
    };
    if r < 0 {
        Err(last_errno())
    } else {
        Ok(())
    }
}
