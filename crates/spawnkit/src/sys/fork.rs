//! The fork-exec strategy: a real `fork()`, then the same steps as the vfork child, then
//! the caller's `pre_exec` hooks. The child's [`Report`] travels over a close-on-exec pipe:
//! EOF without a report means execve succeeded.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::in_child::{child_main, Report, STEP_NONE};
use super::PlanView;
use super::{context, last_errno, pidfd, Outcome, SignalsBlocked};
use crate::steps::Hook;

/// A close-on-exec pipe whose write end is at least `min` (above every fd a dup2 step
/// writes): EOF on the read end says the child holding the write end has exec'd or exited.
pub(crate) fn cloexec_pipe_above(min: i32) -> Result<(OwnedFd, OwnedFd), i32> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(last_errno());
    }
    // SAFETY: both fds are new and ours.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    if fds[1] >= min {
        return Ok((r, w)); // above every fd the child's map writes already (the usual case)
    }
    // Move the write end above every fd the child's map writes, so no dup2 step can
    // overwrite it.
    // SAFETY: F_DUPFD_CLOEXEC on an open fd returns a new fd or -1.
    let high = unsafe { libc::fcntl(fds[1], libc::F_DUPFD_CLOEXEC, min) };
    if high < 0 {
        return Err(last_errno());
    }
    drop(w);
    // SAFETY: `high` is new and ours.
    Ok((r, unsafe { OwnedFd::from_raw_fd(high) }))
}

/// A MAP_SHARED anonymous page holding the [`Report`], so the parent sees the step a forked
/// child was in even when it died there.
struct SharedReport(*mut Report);

impl SharedReport {
    fn new() -> Result<SharedReport, i32> {
        // SAFETY: a fresh anonymous shared mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(last_errno());
        }
        let p = p as *mut Report;
        // SAFETY: the page is writable and large enough for a Report.
        unsafe { p.write(Report { step: STEP_NONE, errno: 0, detail: 0 }) };
        Ok(SharedReport(p))
    }

    fn read(&self) -> Report {
        // SAFETY: the page lives until drop; volatile because the child wrote it.
        unsafe { self.0.read_volatile() }
    }
}

impl Drop for SharedReport {
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped by `new`.
        unsafe { libc::munmap(self.0 as *mut libc::c_void, 4096) };
    }
}

/// Why a fork-exec spawn produced no [`Outcome`].
pub(crate) enum ForkFailure {
    /// A system call of the parent failed.
    Syscall(&'static str, i32),
    /// The child was reaped before its pidfd could be opened (SIGCHLD ignored); its report.
    Gone(Report),
}

/// fork() with the child's pidfd stored in `pidfd`: clone3 (which also writes this thread's
/// pid slot as the child is made: `sys::clone::with_pid_slot`), else a raw
/// `clone(SIGCHLD | CLONE_PIDFD)` and the slot written after it, else fork() itself when the
/// kernel or a filter refuses both (a kernel before 5.2 leaves `pidfd` at -1).
///
/// # Safety
/// As fork(), and more: the child must run nothing that relies on what glibc's fork() does
/// for it (the fork handlers, the allocator's locks made consistent).
unsafe fn fork_with_pidfd(pidfd: &mut i32) -> libc::pid_t {
    // SAFETY: the caller's contract.
    if let Some(pid) = unsafe { super::clone::fork3(pidfd) } {
        if pid < 0 {
            *pidfd = -1;
        }
        return pid;
    }
    let flags = (libc::SIGCHLD | libc::CLONE_PIDFD) as libc::c_ulong;
    // SAFETY: the caller's contract; the third argument points at a live i32.
    let r =
        unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, pidfd as *mut i32, 0usize, 0usize) };
    if r > 0 {
        // With its pidfd: written into the slot now (late, which only a spawn that pinned the
        // reaper lets this fallback do). glibc's fork below has none: its child is not
        // noted, so that a pinned reaper never reaps it by pid before `pidfd_open`.
        super::clone::disable_clone3();
        super::clone::note_pid(r as libc::pid_t);
    }
    if r >= 0 {
        return r as libc::pid_t;
    }
    *pidfd = -1;
    match last_errno() {
        // SAFETY: the caller's contract.
        libc::EINVAL | libc::ENOSYS | libc::EPERM => unsafe { libc::fork() },
        _ => -1,
    }
}

/// Spawn with fork().
pub(crate) fn spawn_fork_exec(plan: &PlanView, hooks: &mut [Hook]) -> Result<Outcome, ForkFailure> {
    let (rd, wr) =
        cloexec_pipe_above(plan.max_target + 1).map_err(|e| ForkFailure::Syscall("pipe2", e))?;
    let shared = SharedReport::new().map_err(|e| ForkFailure::Syscall("mmap", e))?;
    let mut unused = Report::default();
    let mut scratch = vec![-1i32; plan.scratch];
    let hooks = if hooks.is_empty() { None } else { Some(hooks as *mut [Hook]) };
    let mut ctx = context(plan, &mut unused, &mut scratch, hooks);
    ctx.report = shared.0;
    ctx.set_notify(&rd, &wr);
    let blocked = SignalsBlocked::new();
    let mut given: i32 = -1;
    let pid = match hooks {
        // No hooks: the child runs `child_main` alone (raw system calls, nothing allocated),
        // so a raw clone can stand in for fork() and hand back the child's pidfd with its
        // pid (CLONE_PIDFD). pidfd_open after fork() finds nothing once a child that exec'd
        // and exited at once was reaped by the kernel (in a process that ignores SIGCHLD,
        // such as a spawn server) before the parent ran again.
        // SAFETY: clone without CLONE_VM and without a stack is fork(): the child runs on its
        // own copy of this stack and memory; it only runs `child_main`, which obeys the child
        // rules. CLONE_PIDFD stores the pidfd through the third argument (x86_64, aarch64).
        None => unsafe { fork_with_pidfd(&mut given) },
        // SAFETY: fork has no preconditions; the child only runs `child_main`, which obeys
        // the child rules (plus the caller's hooks, covered by the unsafe `pre_exec`
        // contract).
        Some(_) => unsafe { libc::fork() },
    };
    if pid == 0 {
        // SAFETY: `ctx` is valid in the child's copy of memory.
        unsafe { child_main(&ctx) }
    }
    let fork_errno = last_errno();
    drop(blocked);
    drop(wr);
    if pid < 0 {
        return Err(ForkFailure::Syscall("fork", fork_errno));
    }
    let pidfd = if given >= 0 {
        // SAFETY: CLONE_PIDFD stored a new pidfd owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(given) })
    } else {
        // The pidfd first, while the child is most likely alive (it has not exec'd yet, or
        // just).
        pidfd::open(pid)
    };
    // EOF once the child has exec'd (close-on-exec) or exited.
    let mut byte = 0u8;
    loop {
        // SAFETY: reads at most one byte into `byte`.
        let n = unsafe { libc::read(rd.as_raw_fd(), &mut byte as *mut u8 as *mut libc::c_void, 1) };
        if n < 0 && last_errno() == libc::EINTR {
            continue;
        }
        break;
    }
    let report = shared.read();
    let pidfd = match pidfd {
        Ok(fd) => fd,
        // Reaped by the kernel already (SIGCHLD ignored): the report still says what happened,
        // and the pid must not be signalled.
        Err(libc::ESRCH) => return Err(ForkFailure::Gone(report)),
        Err(e) => {
            // Without a pidfd the child cannot be handed out: stop and reap it.
            // SAFETY: `pid` is our own unreaped child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            return Err(ForkFailure::Syscall("pidfd_open", e));
        }
    };
    Ok(Outcome { pid, pidfd: Some(pidfd), report })
}
