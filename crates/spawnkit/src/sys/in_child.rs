//! Code that runs in the child, between clone and execve: replays a [`Plan`](crate::Plan)'s steps with raw
//! system calls, then `execve`s.
//!
//! Everything here therefore obeys the rules in `sys/mod.rs`: raw syscalls, no allocation, no
//! panics, only memory prepared by the parent. The lints below keep panic paths (indexing,
//! overflow checks of debug builds, unwrap) out of this file.
#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use core::ffi::c_char;
use core::ptr;
use core::sync::atomic::{compiler_fence, AtomicI32, AtomicU32, AtomicUsize, Ordering};

use super::raw::{check, sc};
use crate::steps::{FdRef, Hook, Step};

/// What the child leaves for the parent. Written only by the child, read by the parent once
/// the child has exec'd or exited (vfork: the parent thread sleeps until then; fork: in a
/// MAP_SHARED page, read after EOF on the notify pipe). `step` is the index of the step being
/// run; `STEP_EXEC` means execve was reached. `errno == 0` with `step == STEP_EXEC` means
/// success.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Report {
    pub step: i32,
    pub errno: i32,
    /// Extra detail: the PATH candidate that decided an exec failure.
    pub detail: i32,
}

pub(crate) const STEP_EXEC: i32 = -2;
pub(crate) const STEP_PRE_EXEC: i32 = -3;
pub(crate) const STEP_SIGNALS: i32 = -4;
pub(crate) const STEP_NONE: i32 = -1;
/// A pool child's wake-up (sys/pool.rs): its own copy of the fd table, the server's death
/// signal cleared, the requester's filesystem ids. Nothing of the plan has run yet.
pub(crate) const STEP_POOL: i32 = -5;

/// Everything the child reads, prepared by the parent before the clone.
pub(crate) struct ChildCtx<'a> {
    pub steps: &'a [Step],
    pub candidates: &'a [*const c_char],
    pub argv: *const *const c_char,
    pub envp: *const *const c_char,
    /// Try every PATH candidate (CPython's search) instead of execvp's rules.
    pub try_all: bool,
    /// The mask installed just before execve (bit N-1 = signal N).
    pub sigmask: u64,
    /// Reset every handled signal to SIG_DFL by hand (clone without CLONE_CLEAR_SIGHAND, fork).
    pub reset_handlers: bool,
    /// The child starts with the calling thread's mask (clone3, which blocks nothing around
    /// the clone), not with all signals blocked (clone(2), fork, a pool child).
    pub mask_inherited: bool,
    pub report: *mut Report,
    /// Slots for fds moved out of the way by `DupAway`.
    pub scratch: *mut i32,
    pub scratch_len: usize,
    /// The caller's hook (fork-exec only). Runs after every step, before the mask is restored.
    pub pre_exec: Option<*mut [Hook]>,
    /// The close-on-exec pipe whose EOF tells the parent the child has exec'd or exited
    /// (fork-exec, a started spawn, id maps written from outside; -1 otherwise). Never closed
    /// by a close_range step, never taken as one of the caller's fds.
    pub notify_fd: i32,
    /// That pipe's read end (the parent's; -1 when there is no pipe). The child has a copy
    /// of it until its exec (close-on-exec, made before the clone), and it is never taken as
    /// one of the caller's fds either.
    pub notify_read: i32,
}

/// The kernel's `struct sigaction` (x86_64 and aarch64 share this layout).
#[repr(C)]
#[derive(Default)]
pub(crate) struct KernelSigaction {
    pub handler: usize,
    pub flags: u64,
    pub restorer: usize,
    pub mask: u64,
}

const SIG_DFL: usize = 0;
const SIG_IGN: usize = 1;
const NSIG: i32 = 64;

/// What a parked pool child (sys/pool.rs) and the thread that wakes it share. Made by that
/// thread before the clone and kept in place until the child has exec'd or exited.
#[derive(Default)]
pub(crate) struct Dock {
    /// [`DOCK_PARKED`] until the waker stores [`DOCK_GO`] (Release) and wakes the futex.
    pub go: AtomicU32,
    /// The child's tid: stored by the kernel before the clone returns (CLONE_PARENT_SETTID),
    /// set to 0 and futex-woken by it when the child execs or exits (CLONE_CHILD_CLEARTID).
    pub tid: AtomicI32,
    /// The `ChildCtx` to run, stored before `go`.
    pub ctx: AtomicUsize,
    /// Filesystem ids to take on waking (a root server's `--allow-uid` client), stored before
    /// `go`: `fs_set` 1, then `fs_uid` and `fs_gid`.
    pub fs_set: AtomicU32,
    pub fs_uid: AtomicU32,
    pub fs_gid: AtomicU32,
    /// The server's pid: a child whose parent is already gone when it starts exits at once.
    pub parent: i32,
}

pub(crate) const DOCK_PARKED: u32 = 0;
pub(crate) const DOCK_GO: u32 = 1;

/// A pool child's entry point: ask to be killed with its parent, park on `dock.go` (all
/// signals blocked: the mask it was cloned with), and when woken, take the request's
/// context, undo what only a parked child has (the shared fd table, the death signal, the
/// server's filesystem ids) and go on as any other child: [`child_main`].
///
/// # Safety
/// `dock` points to a live [`Dock`] that stays in place until this child has exec'd or exited;
/// the `ChildCtx` stored in it before `go` obeys `child_main`'s contract.
pub(crate) unsafe extern "C" fn pool_main(dock: *const Dock) -> ! {
    // SAFETY: the waker keeps the dock alive until this child has exec'd or exited.
    let dock = unsafe { &*dock };
    // SAFETY: prctl and getppid take integers.
    let orphaned = unsafe {
        sc!(libc::SYS_prctl, libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        sc!(libc::SYS_getppid) != dock.parent as isize
    };
    if orphaned {
        exit(0);
    }
    loop {
        let go = dock.go.load(Ordering::Acquire);
        if go == DOCK_GO {
            break;
        }
        if go != DOCK_PARKED {
            exit(0);
        }
        // SAFETY: FUTEX_WAIT on a live u32 of the shared memory, no timeout. A private futex
        // is keyed by (mm, address), and the waker shares this mm.
        unsafe {
            sc!(
                libc::SYS_futex,
                dock.go.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                DOCK_PARKED,
                0usize
            )
        };
    }
    let ctx = dock.ctx.load(Ordering::Relaxed) as *const ChildCtx<'_>;
    // SAFETY: stored before `go` (Release, read above with Acquire); the waker keeps it alive
    // until this child has exec'd or exited.
    let c = unsafe { &*ctx };
    report(c, STEP_POOL, 0, 0);
    if let Err(e) = wake_up(dock) {
        report(c, STEP_POOL, e, 0);
        exit(127);
    }
    // SAFETY: the caller's contract: `ctx` obeys child_main's.
    unsafe { child_main(ctx) }
}

/// What a woken pool child undoes before the plan: the server's death signal (a child the
/// server started lives on after it), the fd table shared with the server since the clone
/// (a copy of it now, holding the fds received with the request, as a clone now would
/// copy), and the server's filesystem ids when the request wants its client's.
fn wake_up(dock: &Dock) -> Result<(), i32> {
    // SAFETY: prctl and unshare take integers.
    check(unsafe { sc!(libc::SYS_prctl, libc::PR_SET_PDEATHSIG, 0, 0, 0, 0) })?;
    // Signals sent to it while parked (all blocked) are still pending: a clone made for the
    // request would have none, so take them all (a zero timeout: never waits).
    let all: u64 = !0;
    let zero = [0i64; 2];
    loop {
        // SAFETY: rt_sigtimedwait reads an 8-byte set and a timespec from live locals; no
        // siginfo is asked for (NULL).
        let r = unsafe {
            sc!(
                libc::SYS_rt_sigtimedwait,
                &all as *const u64,
                ptr::null_mut::<u8>(),
                zero.as_ptr(),
                8
            )
        };
        if r < 0 {
            break; // EAGAIN: none left (any other error: nothing more to take either)
        }
    }
    // SAFETY: as above.
    check(unsafe { sc!(libc::SYS_unshare, libc::CLONE_FILES) })?;
    if dock.fs_set.load(Ordering::Relaxed) != 0 {
        let (uid, gid) = (dock.fs_uid.load(Ordering::Relaxed), dock.fs_gid.load(Ordering::Relaxed));
        // SAFETY: setgroups with an empty list (no pointer read); setfsgid and setfsuid take
        // integers and return the previous id (u32::MAX, an invalid id, only reads it).
        let (g, u) = unsafe {
            check(sc!(libc::SYS_setgroups, 0, ptr::null::<u32>()))?;
            sc!(libc::SYS_setfsgid, gid);
            sc!(libc::SYS_setfsuid, uid);
            (sc!(libc::SYS_setfsgid, u32::MAX), sc!(libc::SYS_setfsuid, u32::MAX))
        };
        if g != gid as isize || u != uid as isize {
            return Err(libc::EPERM);
        }
    }
    Ok(())
}

#[inline(always)]
fn report(ctx: &ChildCtx<'_>, step: i32, errno: i32, detail: i32) {
    // SAFETY: `report` points to the parent's Report, alive for the whole spawn; the parent
    // reads it only after the child has exec'd or exited. Volatile: the compiler must not
    // drop or reorder the write across the execve/exit system calls.
    unsafe { ptr::write_volatile(ctx.report, Report { step, errno, detail }) };
    compiler_fence(Ordering::SeqCst);
}

/// Exit the child. `exit_group` because the child is a process of its own.
fn exit(code: i32) -> ! {
    loop {
        // SAFETY: exit_group takes an int and does not return.
        unsafe { sc!(libc::SYS_exit_group, code) };
    }
}

/// The child's entry point: run every step, exec, and on failure record it and exit 127.
///
/// # Safety
/// `ctx` points to a live [`ChildCtx`] whose pointers are valid (rule 2 of `sys/mod.rs`).
pub(crate) unsafe extern "C" fn child_main(ctx: *const ChildCtx<'_>) -> ! {
    // SAFETY: the parent keeps `ctx` alive until the child has exec'd or exited.
    let ctx = unsafe { &*ctx };
    match run(ctx) {
        Ok(()) => {}
        Err((step, errno, detail)) => report(ctx, step, errno, detail),
    }
    exit(127)
}

type Fail = (i32, i32, i32);

fn run(ctx: &ChildCtx<'_>) -> Result<(), Fail> {
    // A clone3 child starts with the caller's mask, not with all blocked: what the command
    // asks to block is blocked first, so a signal it blocks that comes before execve (its own
    // death signal, sent by the ParentDeathSignal step) stays pending into the program, as on
    // every other path. One system call, only there and only when a mask is asked for.
    if ctx.mask_inherited && ctx.sigmask != 0 {
        sigprocmask(libc::SIG_BLOCK, ctx.sigmask).map_err(|e| (STEP_SIGNALS, e, 0))?;
    }
    if ctx.reset_handlers {
        report(ctx, STEP_SIGNALS, 0, 0);
        reset_handled_signals().map_err(|e| (STEP_SIGNALS, e, 0))?;
    }
    for (i, step) in ctx.steps.iter().enumerate() {
        let i = i as i32;
        report(ctx, i, 0, 0);
        // A step may pack a detail above the errno (AwaitIdMaps: which map file failed).
        run_step(ctx, step).map_err(|e| (i, e & 0xffff, e >> 16))?;
    }
    if let Some(hooks) = ctx.pre_exec {
        report(ctx, STEP_PRE_EXEC, 0, 0);
        // SAFETY: only the fork-exec strategy sets hooks; they run in a real fork() child,
        // where the caller promised (by the unsafe `pre_exec`) that they are fork-safe.
        for hook in unsafe { (*hooks).iter_mut() } {
            // A panicking hook must not unwind out of the forked child: report it as EINVAL.
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut *hook)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err((STEP_PRE_EXEC, e.raw_os_error().unwrap_or(libc::EINVAL), 0))
                }
                Err(_) => return Err((STEP_PRE_EXEC, libc::EINVAL, 0)),
            }
        }
    }
    report(ctx, STEP_EXEC, 0, 0);
    sigprocmask(libc::SIG_SETMASK, ctx.sigmask).map_err(|e| (STEP_SIGNALS, e, 0))?;
    exec(ctx)
}

fn sigaction_get(sig: i32) -> Result<KernelSigaction, i32> {
    let mut old = KernelSigaction { handler: 0, flags: 0, restorer: 0, mask: 0 };
    // SAFETY: rt_sigaction reads no new action (NULL) and writes the old one into `old`.
    check(unsafe { sc!(libc::SYS_rt_sigaction, sig, 0, &mut old as *mut KernelSigaction, 8) })?;
    Ok(old)
}

fn sigaction_default(sig: i32) -> Result<(), i32> {
    let new = KernelSigaction { handler: SIG_DFL, flags: 0, restorer: 0, mask: 0 };
    // SAFETY: `new` is a valid kernel sigaction; no old action is requested.
    check(unsafe { sc!(libc::SYS_rt_sigaction, sig, &new as *const KernelSigaction, 0, 8) })?;
    Ok(())
}

fn reset_handled_signals() -> Result<(), i32> {
    let mut sig = 1;
    while sig <= NSIG {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            let old = sigaction_get(sig)?;
            if old.handler != SIG_DFL && old.handler != SIG_IGN {
                sigaction_default(sig)?;
            }
        }
        sig = sig.wrapping_add(1);
    }
    Ok(())
}

/// rt_sigprocmask(`how`, `mask`): SIG_BLOCK adds `mask`, SIG_SETMASK installs it.
fn sigprocmask(how: i32, mask: u64) -> Result<(), i32> {
    // SAFETY: `mask` is an 8-byte kernel sigset; no old mask is requested.
    check(unsafe { sc!(libc::SYS_rt_sigprocmask, how, &mask as *const u64, 0, 8) })?;
    Ok(())
}

fn slot(ctx: &ChildCtx<'_>, index: usize) -> *mut i32 {
    if index < ctx.scratch_len {
        // SAFETY: in bounds of the parent's scratch array (checked just above).
        unsafe { ctx.scratch.add(index) }
    } else {
        ptr::null_mut()
    }
}

fn run_step(ctx: &ChildCtx<'_>, step: &Step) -> Result<(), i32> {
    // SAFETY: every system call in this match gets plain integers or
    // pointers into the Plan, which the parent keeps alive and unchanged during the spawn.
    let ret = unsafe {
        match step {
            Step::Unshare { flags } => sc!(libc::SYS_unshare, *flags),
            Step::WriteFile { path, data } => write_file(path.as_ptr(), data)?,
            Step::Mount { source, target, fstype, flags, data } => {
                let opt =
                    |c: &Option<std::ffi::CString>| c.as_ref().map_or(ptr::null(), |c| c.as_ptr());
                sc!(libc::SYS_mount, opt(source), target.as_ptr(), opt(fstype), *flags, opt(data))
            }
            Step::Sethostname { name } => sc!(libc::SYS_sethostname, name.as_ptr(), name.len()),
            Step::LoopbackUp => loopback_up()?,
            Step::FreshSysfs { target } => {
                const SYSFS: &[u8] = b"sysfs\0";
                let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                let r = sc!(
                    libc::SYS_mount,
                    SYSFS.as_ptr(),
                    target.as_ptr(),
                    SYSFS.as_ptr(),
                    flags,
                    ptr::null::<u8>()
                );
                if r == (libc::EPERM as isize).wrapping_neg() {
                    0
                } else {
                    r
                }
            }
            Step::AwaitIdMaps { ready_fd, go_fd, parent_fds } => {
                for fd in parent_fds {
                    sc!(libc::SYS_close, *fd);
                }
                await_id_maps(*ready_fd, *go_fd)?
            }
            Step::MountSetattr { target, set, remount } => {
                // struct mount_attr { attr_set, attr_clr, propagation, userns_fd }
                let attr: [u64; 4] = [*set, 0, 0, 0];
                let r = sc!(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    target.as_ptr(),
                    libc::AT_RECURSIVE,
                    attr.as_ptr(),
                    32
                );
                if r == (libc::ENOSYS as isize).wrapping_neg() {
                    sc!(
                        libc::SYS_mount,
                        ptr::null::<u8>(),
                        target.as_ptr(),
                        ptr::null::<u8>(),
                        *remount,
                        ptr::null::<u8>()
                    )
                } else {
                    r
                }
            }
            Step::Chroot { path } => sc!(libc::SYS_chroot, path.as_ptr()),
            Step::SignalDefault { set } => {
                let mut sig = 1;
                while sig <= NSIG {
                    if set & 1u64.wrapping_shl(sig.wrapping_sub(1) as u32) != 0 {
                        sigaction_default(sig)?;
                    }
                    sig = sig.wrapping_add(1);
                }
                0
            }
            Step::Setsid => sc!(libc::SYS_setsid),
            Step::Setpgid { pgid } => sc!(libc::SYS_setpgid, 0, *pgid),
            Step::DupAway { fd, above, slot: index, .. } => {
                let fd = user_fd(ctx, *fd)?;
                let new = check(sc!(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, *above))?;
                let p = slot(ctx, *index);
                if p.is_null() {
                    return Err(libc::EINVAL);
                }
                ptr::write_volatile(p, new as i32);
                0
            }
            Step::Dup2 { from, to } => {
                let src = match from {
                    FdRef::Fd(fd) => user_fd(ctx, *fd)?,
                    FdRef::Slot { index, .. } => {
                        let p = slot(ctx, *index);
                        if p.is_null() {
                            return Err(libc::EINVAL);
                        }
                        ptr::read_volatile(p)
                    }
                };
                sc!(libc::SYS_dup3, src, *to, 0)
            }
            Step::ClearCloexec { fd } => sc!(libc::SYS_fcntl, user_fd(ctx, *fd)?, libc::F_SETFD, 0),
            Step::CloseRange { first, last } => close_around(ctx.notify_fd, *first, *last)?,
            Step::Umask { mask } => sc!(libc::SYS_umask, *mask),
            Step::Setrlimit { resource, soft, hard } => {
                let lim = [*soft, *hard];
                sc!(libc::SYS_prlimit64, 0, resource.raw(), lim.as_ptr(), 0)
            }
            Step::RestoreFdLimit { soft, hard } => {
                // Read from the child's own limits (copied at the clone, or when a pool child
                // was made), so no change from outside can race between the check and the set:
                // the hard limit set is the one the child has, which needs no privilege.
                let mut now = [0u64; 2];
                let r = sc!(libc::SYS_prlimit64, 0, libc::RLIMIT_NOFILE, 0, now.as_mut_ptr());
                if r == 0 && now == [*hard, *hard] {
                    let lim = [*soft, *hard];
                    sc!(libc::SYS_prlimit64, 0, libc::RLIMIT_NOFILE, lim.as_ptr(), 0);
                }
                0
            }
            Step::Nice { value } => sc!(libc::SYS_setpriority, libc::PRIO_PROCESS, 0, *value),
            Step::Affinity { mask, .. } => {
                sc!(libc::SYS_sched_setaffinity, 0, mask.len().wrapping_mul(8), mask.as_ptr())
            }
            Step::Chdir { path } => sc!(libc::SYS_chdir, path.as_ptr()),
            Step::Setgroups { groups, ignore_eperm } => {
                let r = sc!(libc::SYS_setgroups, groups.len(), groups.as_ptr());
                if *ignore_eperm && r == (libc::EPERM as isize).wrapping_neg() {
                    0
                } else {
                    r
                }
            }
            Step::Setgid { gid } => sc!(libc::SYS_setresgid, *gid, *gid, *gid),
            Step::Setuid { uid } => sc!(libc::SYS_setresuid, *uid, *uid, *uid),
            Step::ParentDeathSignal { signal, parent } => {
                check(sc!(libc::SYS_prctl, libc::PR_SET_PDEATHSIG, *signal, 0, 0, 0))?;
                // The parent may have died before the prctl: then no signal would ever come.
                if sc!(libc::SYS_getppid) != *parent as isize {
                    let me = sc!(libc::SYS_getpid);
                    sc!(libc::SYS_kill, me, *signal)
                } else {
                    0
                }
            }
            Step::NoNewPrivs => sc!(libc::SYS_prctl, libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
            Step::DropBoundingCaps => drop_bounding_caps()?,
            Step::ClearCaps => clear_caps()?,
        }
    };
    check(ret).map(|_| ())
}

/// Drop every capability from the bounding set, 0 up to the kernel's last (which answers
/// EINVAL past it). Needs CAP_SETPCAP, which a fenced child has: it is root, or root of its
/// own user namespace, when it has fences to protect. Without it the kernel refuses every
/// drop (EPERM, checked before the capability): then a capability already absent from the
/// bounding set is no error, one still in it is (the child must not keep it).
fn drop_bounding_caps() -> Result<isize, i32> {
    let mut cap: usize = 0;
    while cap < 64 {
        // SAFETY: prctl with integer arguments only.
        match check(unsafe { sc!(libc::SYS_prctl, libc::PR_CAPBSET_DROP, cap, 0, 0, 0) }) {
            Ok(_) => {}
            Err(libc::EINVAL) => break,
            Err(e) => {
                // SAFETY: as above.
                let read = unsafe { sc!(libc::SYS_prctl, libc::PR_CAPBSET_READ, cap, 0, 0, 0) };
                match check(read) {
                    Ok(0) => {}
                    Err(libc::EINVAL) => break,
                    _ => return Err(e),
                }
            }
        }
        cap = cap.wrapping_add(1);
    }
    Ok(0)
}

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Empty the ambient set (EINVAL before Linux 4.3, which has none), then capset the
/// effective, permitted and inheritable sets to nothing. After the credential steps, which
/// need CAP_SETUID and CAP_SETGID (lowering capabilities is always allowed).
fn clear_caps() -> Result<isize, i32> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe {
        sc!(libc::SYS_prctl, libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    };
    match check(r) {
        Ok(_) | Err(libc::EINVAL) => {}
        Err(e) => return Err(e),
    }
    // struct __user_cap_header_struct { version, pid } and two __user_cap_data_struct
    // { effective, permitted, inheritable }, all zero: no capability in any set.
    // The kernel writes its preferred version into the header when it rejects ours.
    let mut header: [u32; 2] = [CAPABILITY_VERSION_3, 0];
    let data: [u32; 6] = [0; 6];
    // SAFETY: capset reads (and may write back) the header and reads the two data structs,
    // all locals of this frame.
    check(unsafe { sc!(libc::SYS_capset, header.as_mut_ptr(), data.as_ptr()) })?;
    // A new session keyring of its own: the spawner's session keyring (keys it added, as
    // `keyctl add user ... @s`) is not reachable through the fence. Kernels or seccomp
    // filters without keyctl (ENOSYS) have no keyring to leak.
    // SAFETY: keyctl with integer arguments and a NULL name.
    let r = unsafe { sc!(libc::SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, 0usize) };
    match check(r) {
        Ok(_) | Err(libc::ENOSYS) => Ok(0),
        Err(e) => Err(e),
    }
}

/// keyctl(2) `KEYCTL_JOIN_SESSION_KEYRING`: with a NULL name, a new anonymous keyring.
const KEYCTL_JOIN_SESSION_KEYRING: usize = 1;

/// open(path, O_WRONLY), one write of `data` (uid_map must be written at once), close.
fn write_file(path: *const core::ffi::c_char, data: &[u8]) -> Result<isize, i32> {
    // SAFETY: `path` is a NUL-terminated string of the Plan.
    let fd = check(unsafe {
        sc!(libc::SYS_openat, libc::AT_FDCWD, path, libc::O_WRONLY | libc::O_CLOEXEC)
    })?;
    // SAFETY: `data` is a live slice of the Plan.
    let r = unsafe { sc!(libc::SYS_write, fd, data.as_ptr(), data.len()) };
    // SAFETY: closing the fd opened above.
    unsafe { sc!(libc::SYS_close, fd) };
    match check(r) {
        Ok(n) if n == data.len() => Ok(0),
        Ok(_) => Err(libc::EIO),
        Err(e) => Err(e),
    }
}

/// Signal the parent's helper that the user namespace exists and wait for its answer.
fn await_id_maps(ready_fd: i32, go_fd: i32) -> Result<isize, i32> {
    let r = b'r';
    // SAFETY: writes one byte from a local.
    check(unsafe { sc!(libc::SYS_write, ready_fd, &r as *const u8, 1) })?;
    let mut answer = [0u8; 4];
    let mut got = 0usize;
    while got < 4 {
        let rest = answer.get_mut(got..).unwrap_or_default();
        // SAFETY: reads into the rest of the local buffer.
        match check(unsafe { sc!(libc::SYS_read, go_fd, rest.as_mut_ptr(), rest.len()) }) {
            Ok(0) => return Err(libc::EPIPE),
            Ok(n) => got = got.wrapping_add(n),
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    match i32::from_ne_bytes(answer) {
        0 => Ok(0),
        e => Err(e),
    }
}

/// `struct ifreq` with the flags member: `name[16]`, short flags, padding to 40 bytes.
#[repr(C)]
struct IfreqFlags {
    name: [u8; 16],
    flags: i16,
    pad: [u8; 22],
}

/// Bring "lo" up in the child's (new) network namespace, as `ip link set lo up` does.
fn loopback_up() -> Result<isize, i32> {
    // SAFETY: socket takes integers.
    let sock = check(unsafe {
        sc!(libc::SYS_socket, libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    let mut ifr = IfreqFlags { name: [0; 16], flags: 0, pad: [0; 22] };
    ifr.name[0] = b'l';
    ifr.name[1] = b'o';
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags of `ifr`, on the child's stack.
    let r = check(unsafe {
        sc!(libc::SYS_ioctl, sock, libc::SIOCGIFFLAGS, &mut ifr as *mut IfreqFlags)
    });
    let r = r.and_then(|_| {
        ifr.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as i16;
        // SAFETY: SIOCSIFFLAGS reads `ifr`.
        check(unsafe { sc!(libc::SYS_ioctl, sock, libc::SIOCSIFFLAGS, &ifr as *const IfreqFlags) })
    });
    // SAFETY: closing the socket opened above.
    unsafe { sc!(libc::SYS_close, sock) };
    r.map(|_| 0)
}

/// A parent fd number a step reads (a dup source, an fd kept by number): the engine's own
/// notify pipe is not one of the caller's fds. When the caller names a number that was not
/// open in the parent and either end of the pipe took it, fail as `spawn` would have failed
/// on the closed fd (EBADF) instead of handing the pipe to the program (the write end would
/// also hold back the parent's EOF).
fn user_fd(ctx: &ChildCtx<'_>, fd: i32) -> Result<i32, i32> {
    if fd >= 0 && (fd == ctx.notify_fd || fd == ctx.notify_read) {
        return Err(libc::EBADF);
    }
    Ok(fd)
}

/// Close `first..=last` except `keep` (the fork-exec notify pipe, when there is one).
fn close_around(keep: i32, first: u32, last: u32) -> Result<isize, i32> {
    if keep >= 0 && (keep as u32) >= first && (keep as u32) <= last {
        let keep = keep as u32;
        if keep > first {
            close_range(first, keep.wrapping_sub(1))?;
        }
        if keep < last {
            close_range(keep.wrapping_add(1), last)?;
        }
        Ok(0)
    } else {
        close_range(first, last)
    }
}

/// `CLOSE_RANGE_CLOEXEC` (Linux 5.11): mark the range close-on-exec instead of closing it.
const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;

/// `close_range(2)` with `CLOSE_RANGE_CLOEXEC` (Linux 5.11): the fds are marked, and execve
/// closes them as it closes every close-on-exec fd, so each file is released once, by the
/// kernel's exec path, instead of one by one here (cheaper, and the same result: nothing in
/// the range reaches the program; if execve fails the child exits). On EINVAL (5.9, 5.10)
/// plain close_range; where the kernel lacks it, walk /proc/self/fd with getdents64, and
/// where /proc is missing, close every fd up to RLIMIT_NOFILE.
fn close_range(first: u32, last: u32) -> Result<isize, i32> {
    // SAFETY: close_range takes integers only.
    let r = unsafe { sc!(libc::SYS_close_range, first, last, CLOSE_RANGE_CLOEXEC) };
    let r = match check(r) {
        // SAFETY: as above.
        Err(libc::EINVAL) => unsafe { sc!(libc::SYS_close_range, first, last, 0) },
        _ => r,
    };
    match check(r) {
        Ok(_) => Ok(0),
        Err(libc::ENOSYS) | Err(libc::EPERM) => close_range_fallback(first, last).map(|_| 0),
        Err(e) => Err(e),
    }
}

/// The fallback of [`close_range`], public to the crate so tests can drive it directly.
pub(crate) fn close_range_fallback(first: u32, last: u32) -> Result<(), i32> {
    const PROC_FD: &[u8] = b"/proc/self/fd\0";
    // SAFETY: PROC_FD is NUL-terminated; openat returns a new fd or an error.
    let dir = unsafe {
        sc!(
            libc::SYS_openat,
            libc::AT_FDCWD,
            PROC_FD.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC
        )
    };
    let dir = match check(dir) {
        Ok(fd) => fd as u32,
        Err(_) => return close_brute_force(first, last),
    };
    // Entries are read in fd order (a /proc/self/fd position is fd + 2), so closing while
    // reading skips nothing.
    // 4 KiB, 8-aligned for linux_dirent64; left uninitialised (no memset: the kernel fills it).
    let mut buf = core::mem::MaybeUninit::<[u64; 512]>::uninit();
    loop {
        // SAFETY: `buf` is writable for its full length.
        let n = unsafe { sc!(libc::SYS_getdents64, dir, buf.as_mut_ptr(), 4096) };
        let n = match check(n) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                // SAFETY: closing our own directory fd.
                unsafe { sc!(libc::SYS_close, dir) };
                return Err(e);
            }
        };
        let base = buf.as_ptr() as *const u8;
        let mut off = 0usize;
        while off.wrapping_add(19) < n {
            // SAFETY: linux_dirent64 = { u64 ino, i64 off, u16 reclen, u8 type, name[] };
            // the kernel wrote `n` bytes of whole records, and `off` stays below `n`.
            let (reclen, fd) = unsafe {
                let rec = base.add(off);
                let reclen = ptr::read_unaligned(rec.add(16) as *const u16) as usize;
                (reclen, parse_fd(rec.add(19)))
            };
            if let Some(fd) = fd {
                if fd >= first && fd <= last && fd != dir {
                    // SAFETY: close takes an integer.
                    unsafe { sc!(libc::SYS_close, fd) };
                }
            }
            if reclen == 0 {
                break;
            }
            off = off.wrapping_add(reclen);
        }
    }
    // SAFETY: closing our own directory fd.
    unsafe { sc!(libc::SYS_close, dir) };
    Ok(())
}

/// Parse a NUL-terminated decimal name; `None` for "." and "..".
///
/// # Safety
/// `p` points to a NUL-terminated string.
unsafe fn parse_fd(p: *const u8) -> Option<u32> {
    let mut v: u32 = 0;
    let mut i = 0;
    loop {
        // SAFETY: reading up to and including the terminating NUL.
        let c = unsafe { *p.add(i) };
        if c == 0 {
            return if i == 0 { None } else { Some(v) };
        }
        if !c.is_ascii_digit() || i > 10 {
            return None;
        }
        v = v.wrapping_mul(10).wrapping_add(c.wrapping_sub(b'0') as u32);
        i = i.wrapping_add(1);
    }
}

fn close_brute_force(first: u32, last: u32) -> Result<(), i32> {
    let mut lim = [0u64; 2];
    // SAFETY: prlimit64 writes two u64 into `lim`.
    let r = unsafe { sc!(libc::SYS_prlimit64, 0, libc::RLIMIT_NOFILE, 0, lim.as_mut_ptr()) };
    check(r)?;
    // The hard limit: fds opened before the soft limit was lowered may sit above it.
    let end = lim[1].min((last as u64).wrapping_add(1)).min(1 << 20) as u32;
    let mut fd = first;
    while fd < end {
        // SAFETY: close takes an integer.
        unsafe { sc!(libc::SYS_close, fd) };
        fd = fd.wrapping_add(1);
    }
    Ok(())
}

/// Try each PATH candidate in order with execvp's rules: on ENOENT, ENOTDIR, ESTALE, ENODEV
/// and ETIMEDOUT go on to the next; on EACCES remember it and go on; on anything else stop.
/// If all fail, report EACCES when one was seen, else the last error.
fn exec(ctx: &ChildCtx<'_>) -> Result<(), Fail> {
    if ctx.try_all {
        return exec_try_all(ctx);
    }
    let mut last = libc::ENOENT;
    let mut last_i = 0i32;
    let mut eacces: Option<i32> = None;
    for (i, cand) in ctx.candidates.iter().enumerate() {
        // SAFETY: candidate, argv and envp are NUL-terminated strings and NULL-terminated
        // arrays owned by the Plan.
        let r = unsafe { sc!(libc::SYS_execve, *cand, ctx.argv, ctx.envp) };
        let e = match check(r) {
            Ok(_) => return Ok(()), // unreachable: execve does not return on success
            Err(e) => e,
        };
        last = e;
        last_i = i as i32;
        match e {
            libc::EACCES => {
                if eacces.is_none() {
                    eacces = Some(i as i32);
                }
            }
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => return Err((STEP_EXEC, e, i as i32)),
        }
    }
    match eacces {
        Some(i) => Err((STEP_EXEC, libc::EACCES, i)),
        None => Err((STEP_EXEC, last, last_i)),
    }
}

/// CPython's search (`_posixsubprocess`): try every candidate; report the first error that is
/// not ENOENT or ENOTDIR, else the last one.
fn exec_try_all(ctx: &ChildCtx<'_>) -> Result<(), Fail> {
    let mut last = (libc::ENOENT, 0i32);
    let mut first_other: Option<(i32, i32)> = None;
    for (i, cand) in ctx.candidates.iter().enumerate() {
        // SAFETY: as in `exec`.
        let r = unsafe { sc!(libc::SYS_execve, *cand, ctx.argv, ctx.envp) };
        if let Err(e) = check(r) {
            last = (e, i as i32);
            if e != libc::ENOENT && e != libc::ENOTDIR && first_other.is_none() {
                first_other = Some(last);
            }
        }
    }
    let (e, i) = first_other.unwrap_or(last);
    Err((STEP_EXEC, e, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_open(fd: i32) -> bool {
        // SAFETY: F_GETFD on an fd number has no memory arguments.
        unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
    }

    /// The /proc/self/fd walk that replaces close_range on kernels before 5.9, run in a
    /// forked child so the test process's own fds are untouched.
    #[test]
    fn close_range_fallback_closes_exactly_the_range() {
        // SAFETY: the child only makes system calls and exits with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let mut code = 0;
            for fd in 100..110 {
                // SAFETY: dup2 of stdin-or-/dev/null onto a free number.
                let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
                // SAFETY: as above.
                if null < 0 || unsafe { libc::dup2(null, fd) } != fd {
                    code = 10;
                }
            }
            if close_range_fallback(102, 105).is_err() {
                code = 11;
            }
            for fd in 100..110 {
                let want = !(102..=105).contains(&fd);
                if is_open(fd) != want {
                    code = 20 + (fd - 100);
                }
            }
            // SAFETY: leave the forked child without running the test harness's atexit.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child died: {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "fd check failed (code = 20 + fd - 100)");
    }

    #[test]
    fn parse_fd_names() {
        // SAFETY: NUL-terminated literals.
        unsafe {
            assert_eq!(parse_fd(c"17".as_ptr().cast()), Some(17));
            assert_eq!(parse_fd(c".".as_ptr().cast()), None);
            assert_eq!(parse_fd(c"..".as_ptr().cast()), None);
            assert_eq!(parse_fd(c"".as_ptr().cast()), None);
        }
    }
}
