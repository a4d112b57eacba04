//! A pool of pre-created children, per thread (the spawn server's spawning threads): the
//! clone is done ahead of time, off the request path, and a request only wakes a child.
//!
//! A pool child is made by `clone3(CLONE_VM | CLONE_FILES | CLONE_PIDFD |
//! CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID | CLONE_CLEAR_SIGHAND)` on a stack of its own,
//! with all signals blocked, and runs `in_child::pool_main`: it asks for SIGKILL when its
//! parent thread dies and parks on a futex in its [`Dock`]. A spawn that may use it (no
//! namespace flags or cgroup for the clone, no id maps written from outside: [`eligible`])
//! stores the `ChildCtx` in the dock, wakes the child and sleeps until the kernel clears the
//! dock's tid (it does so, with a futex wake, when a child that shares our memory execs or
//! exits): the same moment a `CLONE_VFORK` clone returns. The woken child clears its death
//! signal, takes its own copy of the fd table (`unshare(CLONE_FILES)`: the fds that came with
//! the request are in it, as they would be in a clone made now), takes the requester's
//! filesystem ids when [`set_fs_ids`] gave some, and runs the plan as any child does.
//!
//! What differs from a clone made at request time, and why it does not show: the child
//! inherited the thread's state when it was made, not when woken. The server changes none of
//! it after it starts (signal dispositions, rlimits, cwd, umask, namespaces, affinity,
//! credentials); every one a request sets, the plan sets in the child. Its pid and start time
//! are older than the request.
//!
//! Every parked child's pid is listed in its server's [`ParkedList`] so the server's watchdog
//! (which kills a spawning thread's children that still share our memory when a spawn takes
//! too long) leaves them alone. The list is the server's, not the process's: a private server
//! forked from a process where another server's thread held a process-wide list's lock at
//! that instant would have found it locked for good.

use core::sync::atomic::Ordering;
use std::cell::{Cell, RefCell};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use super::in_child::{ChildCtx, Dock, DOCK_GO, STEP_NONE, STEP_POOL};
use super::stack::Stack;
use super::{clone, parent, pidfd, raw, PlanView, SignalsBlocked};

/// One parked child.
struct Parked {
    dock: Box<Dock>,
    /// Taken out once the child no longer runs on it.
    stack: Option<Stack>,
    pid: i32,
    /// Taken out when the child is handed to the spawn.
    pidfd: Option<OwnedFd>,
    /// The server's list it is on while parked.
    list: Arc<ParkedList>,
}

impl Parked {
    /// The stack of a child that has exec'd or exited, for the next child.
    fn keep_stack(&mut self) {
        if let Some(stack) = self.stack.take() {
            let _ = POOL.try_with(|p| {
                if let Some(pool) = p.borrow_mut().as_mut() {
                    pool.spare.push(stack);
                }
            });
        }
    }
}

struct Pool {
    size: usize,
    parked: Vec<Parked>,
    /// Stacks of children that have exec'd, for the next ones.
    spare: Vec<Stack>,
    list: Arc<ParkedList>,
}

thread_local! {
    static POOL: RefCell<Option<Pool>> = const { RefCell::new(None) };
    static FS_IDS: Cell<Option<(u32, u32)>> = const { Cell::new(None) };
    /// While a [`Kept`] lives: this thread's spawns clone, its parked children stay parked.
    static KEPT: Cell<bool> = const { Cell::new(false) };
}

/// While it lives, this thread's spawns clone and leave its parked children parked (a spawn
/// server's requests that came several to a frame: see `serve::server::spawn_for`).
pub(crate) struct Kept(bool);

impl Kept {
    pub(crate) fn new() -> Kept {
        Kept(KEPT.try_with(|k| k.replace(true)).unwrap_or(false))
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let _ = KEPT.try_with(|k| k.set(self.0));
    }
}

/// The pids of one server's parked children (its watchdog's to read).
pub(crate) type ParkedList = Mutex<Vec<i32>>;

pub(crate) fn lock(list: &ParkedList) -> MutexGuard<'_, Vec<i32>> {
    list.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keep up to `size` children parked for this thread's spawns (0: none). The children are made
/// by [`refill`], not here; each is listed in `list` while parked.
pub(crate) fn enable(size: usize, list: Arc<ParkedList>) {
    disable();
    if size > 0 {
        let _ = POOL.try_with(|p| {
            *p.borrow_mut() = Some(Pool { size, parked: Vec::new(), spare: Vec::new(), list })
        });
    }
}

/// Kill and reap this thread's parked children; no pool from now on.
pub(crate) fn disable() {
    let pool = POOL.try_with(|p| p.borrow_mut().take()).ok().flatten();
    drop(pool);
}

/// Whether this thread's pool has fewer children than it keeps.
pub(crate) fn wants_refill() -> bool {
    POOL.try_with(|p| p.borrow().as_ref().is_some_and(|p| p.parked.len() < p.size)).unwrap_or(false)
}

/// Whether this thread's pool has a child parked now.
pub(crate) fn ready() -> bool {
    POOL.try_with(|p| p.borrow().as_ref().is_some_and(|p| !p.parked.is_empty())).unwrap_or(false)
}

/// Make one child if the pool wants one. False when none was made (full, no pool, or the
/// clone failed: then the pool is switched off for this thread, and spawns clone as usual).
pub(crate) fn refill() -> bool {
    let _ = POOL.try_with(|p| {
        let mut p = p.borrow_mut();
        let Some(pool) = p.as_mut() else { return false };
        // Children killed while parked (the kernel cleared their tid): reaped, replaced.
        let (alive, dead): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut pool.parked)
            .into_iter()
            .partition(|c| c.dock.tid.load(Ordering::Acquire) != 0);
        pool.parked = alive;
        for mut c in dead {
            lock(&c.list).retain(|&p| p != c.pid);
            if let Some(fd) = &c.pidfd {
                let _ = pidfd::wait(fd.as_fd(), false);
            }
            if let Some(stack) = c.stack.take() {
                pool.spare.push(stack);
            }
        }
        if pool.parked.len() >= pool.size {
            return false;
        }
        match make(pool.spare.pop(), &pool.list) {
            Ok(child) => {
                pool.parked.push(child);
                true
            }
            // clone3 refused (an old kernel, a sandbox): no pool on this thread for good.
            // Anything else (no fd, no pid, no memory for now): try again at the next refill.
            Err(libc::ENOSYS | libc::EINVAL | libc::EPERM) => {
                pool.size = 0;
                false
            }
            Err(_) => false,
        }
    });
    wants_refill()
}

fn make(stack: Option<Stack>, list: &Arc<ParkedList>) -> Result<Parked, i32> {
    let stack = match stack {
        Some(s) => s,
        None => Stack::new()?,
    };
    let dock = Box::new(Dock { parent: parent::getpid(), ..Default::default() });
    let mut listed = lock(list);
    let cloned = {
        let _blocked = SignalsBlocked::new();
        // SAFETY: all signals are blocked (the child keeps that mask while parked); the dock
        // (boxed) and the stack move into the `Parked` kept until the child has exec'd or
        // exited (`take` and `Drop for Parked` wait for the tid to clear).
        unsafe { clone::clone_parked(&dock, &stack) }?
    };
    // Listed before the lock is released: the watchdog never sees it unlisted while parked.
    listed.push(cloned.pid);
    // SAFETY: CLONE_PIDFD stored a new pidfd owned by nobody else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(cloned.pidfd) };
    Ok(Parked { dock, stack: Some(stack), pid: cloned.pid, pidfd: Some(pidfd), list: list.clone() })
}

/// The filesystem ids this thread spawns with for now (`sock::with_fs_ids`), for a pool child
/// to take when woken; `None` afterwards.
pub(crate) fn set_fs_ids(ids: Option<(u32, u32)>) {
    let _ = FS_IDS.try_with(|f| f.set(ids));
}

/// Whether a spawn of `plan` may use a pool child: nothing the clone itself must be given
/// (namespaces, a cgroup) and no id maps this thread writes between the clone and the exec.
pub(crate) fn eligible(plan: &PlanView<'_>) -> bool {
    plan.clone_flags == 0 && plan.cgroup.is_none() && plan.id_maps.is_none()
}

/// Run `ctx` in a parked child of this thread, if there is one: its pid and pidfd once it has
/// exec'd or exited (its report tells which), as `clone_vfork` returns. `None` when there is
/// none, or the child died before it ran anything of the plan (then the caller clones), and
/// while a [`Kept`] lives.
pub(crate) fn run(ctx: &mut ChildCtx<'_>) -> Option<(i32, OwnedFd)> {
    if KEPT.try_with(Cell::get).unwrap_or(false) {
        return None;
    }
    loop {
        let parked = POOL.try_with(|p| p.borrow_mut().as_mut()?.parked.pop()).ok().flatten()?;
        lock(&parked.list).retain(|&p| p != parked.pid);
        // Killed while parked: the kernel cleared its tid (before it could be reaped). Reap
        // it and try the next. Else known as this spawn's child before it runs anything (a
        // spawn server's reaper), and checked again after: a tid still set, read after the
        // pid was noted (the fence orders the two), says the pid was still this child's.
        let alive = parked.dock.tid.load(Ordering::Acquire) != 0;
        if alive {
            super::clone::note_pid(parked.pid);
            core::sync::atomic::fence(Ordering::SeqCst);
        }
        if !alive || parked.dock.tid.load(Ordering::Acquire) == 0 {
            super::clone::note_pid(0);
            recycle(parked);
            continue;
        }
        ctx.reset_handlers = false; // CLONE_CLEAR_SIGHAND did it
        let dock = &parked.dock;
        dock.ctx.store(ctx as *const ChildCtx<'_> as usize, Ordering::Relaxed);
        match FS_IDS.try_with(Cell::get).ok().flatten() {
            Some((uid, gid)) => {
                dock.fs_uid.store(uid, Ordering::Relaxed);
                dock.fs_gid.store(gid, Ordering::Relaxed);
                dock.fs_set.store(1, Ordering::Relaxed);
            }
            None => dock.fs_set.store(0, Ordering::Relaxed),
        }
        dock.go.store(DOCK_GO, Ordering::Release);
        futex_wake(dock.go.as_ptr());
        wait_tid_clear(dock);
        // SAFETY: the child has exec'd or exited (tid cleared): it no longer writes the report.
        let report = unsafe { core::ptr::read_volatile(ctx.report) };
        if report.step == STEP_NONE || report.step == STEP_POOL {
            // It ran nothing of the plan (killed, or its wake-up failed): clone instead.
            // SAFETY: as above; the caller's report goes back to "nothing run".
            unsafe {
                core::ptr::write_volatile(
                    ctx.report,
                    super::Report { step: STEP_NONE, errno: 0, detail: 0 },
                )
            };
            // No longer this spawn's child (before it is reaped: its pid may be another's
            // after).
            super::clone::note_pid(0);
            recycle(parked);
            continue;
        }
        let mut parked = parked;
        parked.keep_stack();
        let pid = parked.pid;
        return parked.pidfd.take().map(|fd| (pid, fd));
    }
}

/// A child that will run nothing more: reaped (it has exited), its stack kept for the next.
fn recycle(mut parked: Parked) {
    if let Some(fd) = &parked.pidfd {
        let _ = pidfd::wait(fd.as_fd(), false);
    }
    parked.keep_stack();
}

fn futex_wake(addr: *mut u32) {
    // SAFETY: FUTEX_WAKE on a live u32; the child waits on it with the private flag (it
    // shares our mm, so the keys match).
    unsafe { raw::sc!(libc::SYS_futex, addr, libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1) };
}

/// Sleep until the kernel clears the child's tid (exec or exit). The kernel's wake for
/// CLONE_CHILD_CLEARTID is a shared futex wake: the wait must not be private.
fn wait_tid_clear(dock: &Dock) {
    loop {
        let t = dock.tid.load(Ordering::Acquire);
        if t == 0 {
            return;
        }
        // SAFETY: FUTEX_WAIT on a live i32, no timeout; returns at once if it changed.
        unsafe { raw::sc!(libc::SYS_futex, dock.tid.as_ptr(), libc::FUTEX_WAIT, t, 0usize) };
    }
}

impl Drop for Parked {
    /// A parked child still parked: killed (SIGKILL also ends a stopped one), and its dock and
    /// stack kept until the kernel has cleared its tid, then reaped.
    fn drop(&mut self) {
        lock(&self.list).retain(|&p| p != self.pid);
        if self.dock.tid.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some(fd) = &self.pidfd {
            let _ = pidfd::send_signal(fd.as_fd(), libc::SIGKILL);
            wait_tid_clear(&self.dock);
            let _ = pidfd::wait(fd.as_fd(), false);
        }
    }
}
