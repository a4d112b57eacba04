//! The spawn server's system calls: unix-socket messages with fds (sendmsg(2), recvmsg(2),
//! unix(7) `SCM_RIGHTS`), the peer's credentials (`SO_PEERCRED`), epoll(7), getrandom(2),
//! and the private server's fork(2). Parent side only; plain libc calls are fine here.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::last_errno;

/// The most fds one message may carry (the kernel's `SCM_MAX_FD`).
pub(crate) const MAX_FDS: usize = 253;

/// Room for a `SCM_RIGHTS` control message of [`MAX_FDS`] fds, 8-byte aligned.
#[repr(C, align(8))]
pub(crate) struct CmsgBuf([u8; 64 + MAX_FDS * 4]);

impl CmsgBuf {
    pub(crate) fn new() -> CmsgBuf {
        CmsgBuf([0; 64 + MAX_FDS * 4])
    }
}

/// What one recvmsg returned: the byte count (0 = EOF), whether fds that came with it were
/// lost (`MSG_CTRUNC`: the buffer holds the most a message can carry, so the kernel could not
/// install them all, the receiver being at its fd limit; those it could are in `fds`, the
/// rest it closed), and whether control data other than fds came (`foreign`).
pub(crate) struct Received {
    pub bytes: usize,
    pub fds_cut: bool,
    pub foreign: bool,
}

impl Received {
    /// Whether the control data is anything but the fds sent, whole.
    pub fn truncated(&self) -> bool {
        self.fds_cut || self.foreign
    }
}

/// recvmsg(fd, MSG_CMSG_CLOEXEC [| MSG_DONTWAIT]) into `buf`; the fds of every `SCM_RIGHTS`
/// message are appended to `fds` (close-on-exec from the first instant). Any other control
/// message is reported as `foreign` (the caller drops the connection), fds the kernel could
/// not install as `fds_cut`. EINTR is retried.
pub(crate) fn recv_with_fds(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    cmsg: &mut CmsgBuf,
    dontwait: bool,
) -> Result<Received, i32> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: a zeroed msghdr is a valid value; its pointers are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.0.as_mut_ptr().cast();
    msg.msg_controllen = cmsg.0.len();
    let flags = libc::MSG_CMSG_CLOEXEC | if dontwait { libc::MSG_DONTWAIT } else { 0 };
    let n = loop {
        // SAFETY: `msg` points at `iov` (into `buf`) and `cmsg`, all live and writable.
        let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, flags) };
        if n < 0 {
            let e = last_errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        break n as usize;
    };
    let fds_cut = msg.msg_flags & libc::MSG_CTRUNC != 0;
    let mut foreign = false;
    // SAFETY: the CMSG_* macros walk the control buffer the kernel just filled, bounded by
    // msg_controllen; each SCM_RIGHTS payload holds (cmsg_len - CMSG_LEN(0)) / 4 fds that are
    // now ours (the kernel installed them in this process).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                for i in 0..len / 4 {
                    let raw = std::ptr::read_unaligned(data.add(i * 4) as *const RawFd);
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            } else {
                // SCM_CREDENTIALS and the like are not part of the protocol.
                foreign = true;
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Received { bytes: n, fds_cut, foreign })
}

/// sendmsg(fd, MSG_NOSIGNAL [| MSG_DONTWAIT]) of `parts` with `fds` as one `SCM_RIGHTS`
/// message (none when empty). Returns the bytes sent (the fds go with the first byte).
pub(crate) fn send_with_fds(
    fd: BorrowedFd<'_>,
    parts: &[&[u8]],
    fds: &[RawFd],
    dontwait: bool,
) -> Result<usize, i32> {
    if fds.len() > MAX_FDS {
        return Err(libc::EINVAL);
    }
    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 4];
    let count = parts.len().min(iov.len());
    for (slot, part) in iov.iter_mut().zip(parts) {
        *slot = libc::iovec { iov_base: part.as_ptr() as *mut libc::c_void, iov_len: part.len() };
    }
    let mut cmsg = CmsgBuf::new();
    // SAFETY: a zeroed msghdr is a valid value; its pointers are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = count;
    if !fds.is_empty() {
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic; the buffer holds MAX_FDS fds, and
        // CMSG_FIRSTHDR/CMSG_DATA point into it once msg_control is set.
        unsafe {
            let bytes = (fds.len() * 4) as u32;
            msg.msg_control = cmsg.0.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(bytes) as usize;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes) as usize;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr() as *const u8,
                libc::CMSG_DATA(c),
                fds.len() * 4,
            );
        }
    }
    let flags = libc::MSG_NOSIGNAL | if dontwait { libc::MSG_DONTWAIT } else { 0 };
    loop {
        // SAFETY: `msg` points at live iovecs (borrowed `parts`) and the control buffer.
        let n = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, flags) };
        if n < 0 {
            let e = last_errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        return Ok(n as usize);
    }
}

/// The connected peer's (pid, uid, gid) from `SO_PEERCRED`.
/// ioctl(FIONREAD): bytes received on a socket and not read yet (0 on error).
pub(crate) fn unread_bytes(fd: BorrowedFd<'_>) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which is valid.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n as *mut libc::c_int) };
    if r < 0 {
        0
    } else {
        n.max(0) as usize
    }
}

pub(crate) fn peer_cred(fd: BorrowedFd<'_>) -> Result<(i32, u32, u32), i32> {
    let mut cred = libc::ucred { pid: 0, uid: u32::MAX, gid: u32::MAX };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(last_errno());
    }
    Ok((cred.pid, cred.uid, cred.gid))
}

/// Fill `buf` from getrandom(2) (the kernel's CSPRNG; blocks only before it is seeded).
pub(crate) fn random(buf: &mut [u8]) -> Result<(), i32> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = last_errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

/// An epoll instance (epoll_create1(EPOLL_CLOEXEC)).
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    pub(crate) fn new() -> Result<Epoll, i32> {
        // SAFETY: integer argument; returns a new fd or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(last_errno());
        }
        // SAFETY: the fd was just created.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, token: u64) -> Result<(), i32> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event; the epoll fd is ours.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(last_errno());
        }
        Ok(())
    }

    pub(crate) fn add(&self, fd: RawFd, events: u32, token: u64) -> Result<(), i32> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    pub(crate) fn modify(&self, fd: RawFd, events: u32, token: u64) -> Result<(), i32> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    pub(crate) fn delete(&self, fd: RawFd) -> Result<(), i32> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// epoll_wait into `events`; the number filled (0 on timeout or EINTR).
    pub(crate) fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
        // SAFETY: `events` is a writable array of its length.
        let n = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                events.len().min(i32::MAX as usize) as i32,
                timeout_ms,
            )
        };
        n.max(0) as usize
    }
}

/// fork(2): in the child run `body` and `_exit` with what it returns (1 if it panics); it
/// never returns into the caller's frames. The parent gets the child's pid.
///
/// The caller must be single-threaded, or the child may find a lock (malloc's) held by a
/// thread that does not exist there: the private server is started early for this reason.
pub(crate) fn fork_run(body: &mut dyn FnMut() -> i32) -> Result<i32, i32> {
    // SAFETY: fork has no memory preconditions; the child below only runs `body` and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(last_errno());
    }
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(1);
        // SAFETY: _exit ends the child at once: no atexit handlers or destructors of the
        // caller's run (the caller's stdio buffers are not flushed twice).
        unsafe { libc::_exit(code) }
    }
    Ok(pid)
}

/// In a freshly forked private server: signals to their defaults (INT ignored, as CPython's
/// forkserver does: a terminal's Ctrl-C is the owner's business), none blocked, and every fd
/// but 0-2 and `keep` closed (sorted ascending).
pub(crate) fn private_server_setup(keep: &[RawFd]) {
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP || (32..=33).contains(&sig) {
            continue;
        }
        let action = if sig == libc::SIGINT { libc::SIG_IGN } else { libc::SIG_DFL };
        // SAFETY: setting a disposition to SIG_DFL/SIG_IGN involves no handler code.
        unsafe { libc::signal(sig, action) };
    }
    let none: u64 = 0;
    // SAFETY: rt_sigprocmask reads 8 bytes from `none`.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &none as *const u64,
            std::ptr::null_mut::<u64>(),
            8,
        )
    };
    let mut first: u32 = 3;
    for &fd in keep.iter().chain(std::iter::once(&(u32::MAX as RawFd))) {
        let fd = fd as u32;
        if fd > first {
            // SAFETY: close_range on numbers only; the fds closed are no one's here.
            unsafe { libc::syscall(libc::SYS_close_range, first, fd - 1, 0) };
        }
        first = first.max(fd.saturating_add(1));
    }
}

/// The wait status a `PIDFD_GET_INFO` exit code or waitpid gives, as (exited, value, core).
pub(crate) fn decode_wait_status(status: i32) -> (bool, i32, bool) {
    if libc::WIFEXITED(status) {
        (true, libc::WEXITSTATUS(status), false)
    } else {
        (false, libc::WTERMSIG(status), libc::WCOREDUMP(status))
    }
}

/// Run `f` with this thread's filesystem ids set to `uid`/`gid` and no supplementary groups
/// (raw setfsuid(2), setfsgid(2), setgroups(2): per thread, unlike glibc's wrappers of the
/// last, which broadcast to every thread). Leaving fsuid 0 drops the filesystem
/// capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH...) from the effective set, and a
/// child cloned meanwhile starts with these ids: a root server's spawn for another uid opens
/// and chdirs with that uid's rights, not root's. Restored afterwards.
pub(crate) fn with_fs_ids<R>(uid: u32, gid: u32, f: impl FnOnce() -> R) -> Result<R, i32> {
    // SAFETY: getgroups(0, NULL) only counts.
    let count = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut saved = vec![0 as libc::gid_t; count.max(0) as usize];
    // SAFETY: getgroups writes at most `saved.len()` gids into `saved`.
    let n = unsafe { libc::getgroups(saved.len() as i32, saved.as_mut_ptr()) };
    if n < 0 {
        return Err(last_errno());
    }
    saved.truncate(n as usize);
    // SAFETY: raw setgroups with an empty list (per thread).
    if unsafe { libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) } < 0 {
        return Err(last_errno());
    }
    // SAFETY: setfsgid/setfsuid take integers; they return the previous id.
    let (old_gid, old_uid) = unsafe {
        let g = libc::syscall(libc::SYS_setfsgid, gid);
        let u = libc::syscall(libc::SYS_setfsuid, uid);
        (g, u)
    };
    // A pool child woken by `f` was made before: it takes these ids itself.
    super::pool::set_fs_ids(Some((uid, gid)));
    let r = f();
    super::pool::set_fs_ids(None);
    // SAFETY: as above, restoring the ids and groups saved before.
    unsafe {
        libc::syscall(libc::SYS_setfsuid, old_uid);
        libc::syscall(libc::SYS_setfsgid, old_gid);
        libc::syscall(libc::SYS_setgroups, saved.len(), saved.as_ptr());
    }
    Ok(r)
}

/// SIGCHLD's default action, without `SA_NOCLDWAIT`: the process's children stay zombies
/// until it reaps them (an inherited `SIG_IGN` or `SA_NOCLDWAIT` would let the kernel reap
/// them at their exit and their statuses be lost).
pub(crate) fn keep_children_for_reaping() -> Result<(), i32> {
    // SAFETY: a zeroed sigaction is valid; SIG_DFL runs no handler code.
    let r = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGCHLD, &sa, std::ptr::null_mut())
    };
    if r < 0 {
        return Err(last_errno());
    }
    Ok(())
}
