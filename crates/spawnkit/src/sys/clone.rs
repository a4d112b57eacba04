//! The clone trampoline: start a `CLONE_VM | CLONE_VFORK` child on a stack of its own (or a
//! `CLONE_VM` child without `CLONE_VFORK`, when the calling thread has work to do for the
//! child before it execs: see `spawn_clone_vfork`).
//!
//! `clone3(2)` is tried first (it takes `CLONE_CLEAR_SIGHAND` and, later, `CLONE_INTO_CGROUP`
//! and namespace flags); when it is refused with ENOSYS, EPERM or EINVAL (old kernels,
//! seccomp filters that predate it, sandboxes that deny it: rust-lang/rust#89522) the engine
//! falls back to `clone(2)` and remembers that for the life of the process.

use core::arch::asm;
use core::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::cell::Cell;

use super::in_child::{child_main, pool_main, ChildCtx, Dock};
use super::raw::check;
use super::stack::Stack;
use super::SignalsBlocked;

/// `CLONE_CLEAR_SIGHAND` (Linux 5.5): reset handled signals to SIG_DFL in the child.
pub(crate) const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;

/// `CLONE_INTO_CGROUP` (Linux 5.7): start the child in the cgroup whose fd is in `cgroup`.
pub(crate) const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The kernel's `struct clone_args` (clone3(2)), version 2 (88 bytes).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const UNKNOWN: u8 = 0;
const CLONE3_OK: u8 = 1;
const CLONE3_REFUSED: u8 = 2;
static CLONE3: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Force the `clone(2)` path (tests, callers that know clone3 is filtered, and a fork whose
/// clone3 was refused where clone(2) then worked).
pub(crate) fn disable_clone3() {
    CLONE3.store(CLONE3_REFUSED, Ordering::Relaxed);
}

/// Whether clone3 has made a child in this process already (so the pid slot is written at
/// the clone: see [`with_pid_slot`]).
pub(crate) fn clone3_known_to_work() -> bool {
    CLONE3.load(Ordering::Relaxed) == CLONE3_OK
}

/// Whether the last spawns used clone3 (for diagnostics and `spawnkit bench`).
pub(crate) fn clone3_in_use() -> bool {
    CLONE3.load(Ordering::Relaxed) != CLONE3_REFUSED
}

thread_local! {
    /// Where this thread's next child's pid is written as the child is made (the address of
    /// an `AtomicI32`; 0: nowhere), and whether it may be written late (after the call):
    /// see [`with_pid_slot`].
    static PID_SLOT: Cell<(usize, bool)> = const { Cell::new((0, true)) };
}

/// Run `f` (a spawn) with the pid of each child this thread makes written into `slot` as the
/// child is made, before it can run, let alone end: by the kernel at the clone
/// (`CLONE_PARENT_SETTID`, clone3), and by the pool before it wakes a parked child. A spawn
/// server's reaper, on another thread, reads it to know a child it reaps for that spawn's
/// before the spawn returns. The clone(2) fallback, which has the one `parent_tid` for its
/// pidfd, writes it after the call: late, which only a spawn that pinned the reaper allows
/// (`late_ok`); any other fails rather than fall back when clone3 is refused.
pub(crate) fn with_pid_slot<R>(slot: &AtomicI32, late_ok: bool, f: impl FnOnce() -> R) -> R {
    struct Restore((usize, bool));
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = PID_SLOT.try_with(|s| s.set(self.0));
        }
    }
    let before = PID_SLOT.with(|s| s.replace((slot as *const AtomicI32 as usize, late_ok)));
    let _restore = Restore(before);
    f()
}

/// Whether a refused clone3 may fall back to clone(2) for this thread's spawn: with no pid
/// slot, or one that may be written late (the spawn pinned the reaper). Decided by the
/// spawn, not by what other threads learned of clone3 since.
fn may_fall_back() -> bool {
    PID_SLOT.try_with(|s| s.get().0 == 0 || s.get().1).unwrap_or(true)
}

/// This thread's pid slot (0: none).
fn pid_slot() -> usize {
    PID_SLOT.try_with(|s| s.get().0).unwrap_or(0)
}

/// Mark this thread's child `pid` failed in its pid slot, if it has one (the pid negated: see
/// the reaper's `Spawning::slot`): only if the slot still holds it (a reaper that reaped the
/// child first emptied the slot, and the pid may be another process's since).
pub(crate) fn note_failed(pid: i32) {
    let slot = pid_slot();
    if slot != 0 {
        // SAFETY: as in `note_pid`.
        let slot = unsafe { &*(slot as *const AtomicI32) };
        let _ = slot.compare_exchange(pid, -pid, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// Write `pid` into this thread's pid slot, if it has one.
pub(crate) fn note_pid(pid: i32) {
    let slot = pid_slot();
    if slot != 0 {
        // SAFETY: the slot is an AtomicI32 that `with_pid_slot`'s caller keeps alive for as
        // long as it is set (the closure's run).
        unsafe { (*(slot as *const AtomicI32)).store(pid, Ordering::Release) };
    }
}

/// The result of a successful clone: the child's pid and its pidfd.
pub(crate) struct Cloned {
    pub pid: i32,
    pub pidfd: i32,
}

/// Start the child. With `vfork` (CLONE_VFORK) return once it has exec'd or exited; without,
/// return at once, the child running on `stack` in this address space.
///
/// `ctx.reset_handlers` is set here to match the syscall used: clone3 clears handlers with
/// `CLONE_CLEAR_SIGHAND`, in the kernel, as the child is made, so no handler of ours can ever
/// run in it, and the calling thread's mask is left alone (the child starts with it and
/// installs the requested one before execve). clone(2) leaves the reset to the child: all
/// signals are blocked in the calling thread around that call, so the child starts with all
/// blocked until it has reset them (rule 4 of sys/mod.rs).
///
/// # Safety
/// `ctx` must satisfy the child's
/// rules (sys/mod.rs): every pointer valid until the child has exec'd or exited, which with
/// `vfork` is when this returns, and without it is for the caller to wait for (EOF on a
/// close-on-exec pipe in `ctx.notify_fd`) before `ctx`, `stack` or anything they point to is
/// touched, moved or freed.
/// `extra` adds `CLONE_NEW*` flags; `cgroup` (a cgroup v2 directory fd) asks for
/// CLONE_INTO_CGROUP, which only clone3 can do: then there is no fallback. Without `pidfd`
/// the child gets none (`Cloned::pidfd` is -1): for a caller that reaps by pid.
pub(crate) unsafe fn clone_vfork(
    ctx: &mut ChildCtx<'_>,
    stack: &Stack,
    (extra, cgroup): (u64, Option<i32>),
    vfork: bool,
    pidfd: bool,
) -> Result<Cloned, i32> {
    let needs_clone3 = cgroup.is_some();
    let base = if pidfd { BASE_FLAGS } else { libc::CLONE_VM as u64 };
    let flags = if vfork { base | libc::CLONE_VFORK as u64 } else { base };
    // Known refused: clone(2) at once, unless this spawn may not fall back (then clone3 is
    // tried all the same, and its error returned).
    if CLONE3.load(Ordering::Relaxed) == CLONE3_REFUSED {
        if needs_clone3 {
            return Err(libc::ENOSYS);
        }
        if may_fall_back() {
            // SAFETY: the caller's contract.
            return unsafe { clone_legacy_blocked(ctx, stack, flags | extra) };
        }
    }
    // SAFETY: the caller's contract.
    match unsafe { clone3(ctx, stack, flags | extra, cgroup) } {
        Ok(c) => {
            CLONE3.store(CLONE3_OK, Ordering::Relaxed);
            Ok(c)
        }
        // Refused (old kernel, seccomp filter, sandbox): try clone(2), and remember that only
        // if clone(2) then works, so a genuine clone3 error is still reported as such. Not
        // for a spawn whose pid slot may not be written late (it did not pin the reaper:
        // clone(2) would write the slot only after the call; see `with_pid_slot`).
        Err(e) if refused(e) && !needs_clone3 && may_fall_back() => {
            // SAFETY: the caller's contract.
            match unsafe { clone_legacy_blocked(ctx, stack, flags | extra) } {
                Ok(c) => {
                    CLONE3.store(CLONE3_REFUSED, Ordering::Relaxed);
                    Ok(c)
                }
                Err(legacy) => Err(if e == libc::ENOSYS { legacy } else { e }),
            }
        }
        Err(e) => Err(e),
    }
}

const BASE_FLAGS: u64 = libc::CLONE_VM as u64 | libc::CLONE_PIDFD as u64;

/// clone(2) with all signals blocked in the calling thread for the call: the child starts
/// with that mask (the parent's handlers are still installed in it until it resets them).
unsafe fn clone_legacy_blocked(
    ctx: &mut ChildCtx<'_>,
    stack: &Stack,
    flags: u64,
) -> Result<Cloned, i32> {
    let _blocked = SignalsBlocked::new();
    // SAFETY: the caller's contract; signals are blocked.
    unsafe { clone_legacy(ctx, stack, flags) }
}

const CHILD_MAIN: unsafe extern "C" fn(*const ChildCtx<'_>) -> ! = child_main;

/// Start a pool child (sys/pool.rs): clone3 with `CLONE_VM | CLONE_FILES | CLONE_PIDFD |
/// CLONE_CLEAR_SIGHAND`, its tid stored in `dock.tid` before this returns
/// (`CLONE_PARENT_SETTID`) and cleared, with a futex wake, when it execs or exits
/// (`CLONE_CHILD_CLEARTID`: the kernel does that at mm_release when the memory is shared). It
/// runs `pool_main(dock)` on `stack` and parks. clone3 only: no fallback (the caller then
/// spawns the usual way).
///
/// # Safety
/// All signals must be blocked in the calling thread (the child keeps that mask while
/// parked). `dock` and `stack` must stay where they are, untouched but for the dock's
/// protocol, until the child has exec'd or exited (`dock.tid` back to 0).
pub(crate) unsafe fn clone_parked(dock: &Dock, stack: &Stack) -> Result<Cloned, i32> {
    if CLONE3.load(Ordering::Relaxed) == CLONE3_REFUSED {
        return Err(libc::ENOSYS);
    }
    let mut pidfd: i32 = -1;
    let tid = dock.tid.as_ptr() as u64;
    let args = CloneArgs {
        flags: libc::CLONE_VM as u64
            | libc::CLONE_FILES as u64
            | libc::CLONE_PIDFD as u64
            | libc::CLONE_PARENT_SETTID as u64
            | libc::CLONE_CHILD_CLEARTID as u64
            | CLONE_CLEAR_SIGHAND,
        pidfd: &mut pidfd as *mut i32 as u64,
        child_tid: tid,
        parent_tid: tid,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base() as u64,
        stack_size: stack.size() as u64,
        ..Default::default()
    };
    let entry: unsafe extern "C" fn(*const Dock) -> ! = pool_main;
    // SAFETY: `args` is a valid clone_args; the child starts on `stack` and runs
    // `pool_main(dock)`, which never returns (caller's contract).
    let r = unsafe {
        trampoline(
            libc::SYS_clone3,
            &args as *const CloneArgs as usize,
            core::mem::size_of::<CloneArgs>(),
            0,
            0,
            0,
            dock as *const Dock as usize,
            entry as usize,
        )
    };
    let pid = check(r)? as i32;
    // A server whose spawns are served by parked children knows clone3 works from here.
    CLONE3.store(CLONE3_OK, Ordering::Relaxed);
    Ok(Cloned { pid, pidfd })
}

/// fork() as clone3 with `CLONE_PIDFD` (no `CLONE_VM`, no stack: the child returns from
/// this call on its own copy of memory, as from fork), with this thread's pid slot written
/// by the kernel as the child is made (`CLONE_PARENT_SETTID`: see [`with_pid_slot`]). The
/// pid (0 in the child), or -1 with errno set; `None` when clone3 is refused and the caller
/// may fall back to clone(2), which writes the slot only after the call (the caller then
/// marks clone3 refused with [`disable_clone3`] if clone(2) works).
///
/// # Safety
/// As fork(), and more: the child must run nothing that relies on what glibc's fork() does
/// for it (the fork handlers, the allocator's locks made consistent).
pub(crate) unsafe fn fork3(pidfd: &mut i32) -> Option<libc::pid_t> {
    if CLONE3.load(Ordering::Relaxed) == CLONE3_REFUSED && may_fall_back() {
        return None;
    }
    let slot = pid_slot();
    let settid = if slot != 0 { libc::CLONE_PARENT_SETTID as u64 } else { 0 };
    // CLONE_CLEAR_SIGHAND as every clone3 here (the child resets its handlers anyway): a
    // kernel that takes clone3 but not that flag (5.3, 5.4) refuses this one too, so "clone3
    // works" means the same after a fork as after a clone-vfork.
    let args = CloneArgs {
        flags: libc::CLONE_PIDFD as u64 | CLONE_CLEAR_SIGHAND | settid,
        pidfd: pidfd as *mut i32 as u64,
        parent_tid: slot as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    // SAFETY: a valid clone_args with no CLONE_VM and no stack: the child runs on a copy of
    // this stack (the caller's contract covers what it runs).
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            core::mem::size_of::<CloneArgs>(),
        )
    };
    if r > 0 {
        CLONE3.store(CLONE3_OK, Ordering::Relaxed);
    }
    if r >= 0 {
        return Some(r as libc::pid_t);
    }
    if refused(super::last_errno()) && may_fall_back() {
        return None;
    }
    Some(-1)
}

/// Whether clone3 failing with `e` means it is refused here (an old kernel, a seccomp filter,
/// a sandbox), not that this clone failed.
fn refused(e: i32) -> bool {
    matches!(e, libc::ENOSYS | libc::EPERM | libc::EINVAL | libc::E2BIG)
}

/// # Safety
/// As for [`clone_vfork`]; `flags` holds BASE_FLAGS, CLONE_VFORK if wanted, and CLONE_NEW*.
unsafe fn clone3(
    ctx: &mut ChildCtx<'_>,
    stack: &Stack,
    flags: u64,
    cgroup: Option<i32>,
) -> Result<Cloned, i32> {
    ctx.reset_handlers = false;
    ctx.mask_inherited = true;
    let mut pidfd: i32 = -1;
    let into_cgroup = if cgroup.is_some() { CLONE_INTO_CGROUP } else { 0 };
    // The pid slot, if any: the kernel writes the child's pid there before the child runs.
    let slot = pid_slot();
    let settid = if slot != 0 { libc::CLONE_PARENT_SETTID as u64 } else { 0 };
    let args = CloneArgs {
        flags: flags | CLONE_CLEAR_SIGHAND | into_cgroup | settid,
        cgroup: cgroup.unwrap_or(0) as u64,
        pidfd: &mut pidfd as *mut i32 as u64,
        parent_tid: slot as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base() as u64,
        stack_size: stack.size() as u64,
        ..Default::default()
    };
    // SAFETY: `args` is a valid clone_args; the child starts on `stack` and runs
    // `child_main(ctx)`, which never returns (caller's contract).
    let r = unsafe {
        trampoline(
            libc::SYS_clone3,
            &args as *const CloneArgs as usize,
            core::mem::size_of::<CloneArgs>(),
            0,
            0,
            0,
            ctx as *const ChildCtx<'_> as usize,
            CHILD_MAIN as usize,
        )
    };
    let pid = check(r)? as i32;
    Ok(Cloned { pid, pidfd })
}

/// # Safety
/// As for [`clone_vfork`]; `flags` as for [`clone3`].
unsafe fn clone_legacy(ctx: &mut ChildCtx<'_>, stack: &Stack, flags: u64) -> Result<Cloned, i32> {
    ctx.reset_handlers = true;
    ctx.mask_inherited = false;
    let mut pidfd: i32 = -1;
    let flags = flags | libc::SIGCHLD as u64;
    // SAFETY: clone(2) with CLONE_PIDFD stores the pidfd through `parent_tid` (the third
    // argument on x86_64 and aarch64); the child starts on the top of `stack` and runs
    // `child_main(ctx)`, which never returns.
    let r = unsafe {
        trampoline(
            libc::SYS_clone,
            flags as usize,
            stack.top() as usize,
            &mut pidfd as *mut i32 as usize,
            0,
            0,
            ctx as *const ChildCtx<'_> as usize,
            CHILD_MAIN as usize,
        )
    };
    let pid = check(r)? as i32;
    if pidfd < 0 && flags & libc::CLONE_PIDFD as u64 != 0 {
        // A kernel before 5.2 ignores CLONE_PIDFD: without a pidfd the child cannot be handed
        // out safely. Stop and reap it (after which it no longer runs on `stack`).
        // SAFETY: `pid` is our own unreaped child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, core::ptr::null_mut(), libc::__WALL);
        }
        return Err(libc::ENOSYS);
    }
    note_pid(pid);
    Ok(Cloned { pid, pidfd })
}

/// Issue clone/clone3; in the child (return value 0, now on the new stack) call
/// `entry(arg)` (`child_main(ctx)` or `pool_main(dock)`), which never returns. Returns the raw
/// result in the parent.
///
/// # Safety
/// The arguments must describe a clone onto a fresh stack; `entry` must be an
/// `unsafe extern "C" fn(*const T) -> !` and `arg` a `*const T` valid for as long as the child
/// uses it (guaranteed by CLONE_VFORK, or by the caller's wait for the child's exec or exit).
#[cfg(target_arch = "x86_64")]
unsafe fn trampoline(
    nr: i64,
    a1: usize,
    a2: usize,
    a3: usize,
    a4: usize,
    a5: usize,
    arg: usize,
    entry: usize,
) -> isize {
    let ret: isize;
    // SAFETY: in the parent the syscall returns like any other (rax, rcx, r11 clobbered).
    // In the child rsp is already the new stack's top (16-byte aligned); clear rbp so
    // backtraces end here, pass ctx in rdi, and call the entry, which never returns.
    unsafe {
        asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") nr as isize => ret,
            in("rdi") a1, in("rsi") a2, in("rdx") a3, in("r10") a4, in("r8") a5,
            in("r12") arg,
            in("r13") entry,
            lateout("rcx") _, lateout("r11") _,
            options(nostack)
        );
    }
    ret
}

#[cfg(target_arch = "aarch64")]
unsafe fn trampoline(
    nr: i64,
    a1: usize,
    a2: usize,
    a3: usize,
    a4: usize,
    a5: usize,
    arg: usize,
    entry: usize,
) -> isize {
    let ret: isize;
    // SAFETY: as on x86_64: the parent gets x0; the child, already on the new stack (sp
    // 16-aligned), clears the frame pointer and branches to the entry with ctx in x0.
    unsafe {
        asm!(
            "svc 0",
            "cbnz x0, 2f",
            "mov x29, xzr",
            "mov x30, xzr",
            "mov x0, x9",
            "blr x10",
            "brk #0",
            "2:",
            in("x8") nr,
            inlateout("x0") a1 as isize => ret,
            in("x1") a2, in("x2") a3, in("x3") a4, in("x4") a5,
            in("x9") arg,
            in("x10") entry,
            options(nostack)
        );
    }
    ret
}
