//! Everything `unsafe` in spawnkit lives in this module tree.
//!
//! # Imports go downward only
//!
//! sys imports nothing from spawn/ or isolate/. What it replays, the [`Step`]s and their
//! kin, comes from the leaf module `steps.rs`; what it reads of a [`Plan`](crate::Plan) comes
//! as a [`PlanView`] of borrowed slices and fds that `Plan::view` builds in spawn/; the id
//! maps written from outside come as bytes ([`IdMaps`]). spawn/ and isolate/ call into sys,
//! never the other way round.
//!
//! # The rules of the child (read this before touching `in_child.rs`)
//!
//! The default strategy starts the child with `clone(CLONE_VM | CLONE_VFORK)`: the child runs
//! in the parent's address space, on a stack of its own, while the calling thread sleeps until
//! the child calls `execve` or exits. Every other thread of the parent keeps running. The code
//! between clone and execve therefore obeys these rules, and nothing outside [`in_child`] runs
//! there:
//!
//! 1. **Raw system calls only** ([`raw`]): no libc function. libc wrappers write `errno` (a
//!    thread-local shared with the sleeping parent thread), may take locks another parent
//!    thread holds (malloc, stdio, the dynamic loader), and glibc's `setuid` family even
//!    broadcasts to the parent's threads.
//! 2. **No allocation and no freeing.** Everything the child reads was allocated before the
//!    clone by [`Plan`](crate::Plan); the child only borrows it. It writes to exactly two
//!    places: the [`in_child::Report`] and the scratch slots of the same context, both owned by the
//!    parent's frame.
//! 3. **No panics, no unwinding, no Rust std.** The child's code uses no indexing that can
//!    panic, only `get` and iterators, and wrapping arithmetic.
//! 4. **No handler of the parent runs in the child.** clone3's `CLONE_CLEAR_SIGHAND` resets
//!    every handled signal to `SIG_DFL` as the kernel makes the child, so a signal that
//!    reaches it before `execve` takes its default action (or stays ignored), as it would
//!    after; the child starts with the calling thread's mask. On the `clone` fallback the
//!    handlers are inherited: all 64 signals (glibc's internal ones included) are blocked in
//!    the calling thread around the call, so the child starts with all blocked and resets the
//!    handled ones by hand. A clone3 child, starting with the caller's mask, blocks the
//!    requested one first (a signal the command blocks stays pending into the program);
//!    every child installs exactly the requested mask just before `execve`.
//! 5. **Its own stack**: an `mmap`'d region with a `PROT_NONE` guard page below it, so the
//!    child never writes to the parent thread's frames (the stack-clobbering bug Go fixed).
//! 6. **No thread-local storage**: the child runs with the calling thread's TLS register, and
//!    a started child (below) keeps running after that thread has moved on or exited. No
//!    `thread_local!`, no errno, and no build that instruments the child's code with TLS
//!    (stack protector canaries read from TLS, sanitizers).
//!
//! Two exceptions to "the calling thread sleeps". A started spawn ([`start_clone`]) clones
//! without `CLONE_VFORK` and returns at once: its [`Launch`] owns the context, the report, the
//! scratch slots and the stack, and its owner keeps the plan alive and unchanged, until EOF on a
//! close-on-exec pipe held only by the child says it has exec'd or exited; the calling thread
//! goes on with other work meanwhile. And when id maps must be written from outside the
//! new user namespace (arbitrary maps, or a privileged caller, see `isolate/compile.rs`), the
//! clone omits `CLONE_VFORK`. The calling thread then writes the maps while the child waits
//! for them in its `AwaitIdMaps` step, and sleeps until EOF on a close-on-exec pipe says the
//! child has exec'd or exited, as the fork-exec strategy does. Until that EOF it touches
//! nothing the child uses (the context, its stack, the report); the rules above are
//! unchanged for the child.
//!
//! The `fork-exec` strategy replays the same steps in a real `fork()` child; the rules hold
//! there too, except for the user's `pre_exec` hook, which is documented as `unsafe`.
//!
//! Every `unsafe` block below carries a `// SAFETY:` comment pointing back to these rules.

pub(crate) mod clone;
pub(crate) mod environ;
pub(crate) mod fork;
pub(crate) mod forklock;
pub(crate) mod in_child;
pub(crate) mod nss;
pub(crate) mod parent;
pub(crate) mod pidfd;
pub(crate) mod pool;
pub(crate) mod posix;
pub(crate) mod raw;
#[cfg(feature = "tokio")]
pub(crate) mod reactor;
pub(crate) mod sigmask;
pub(crate) mod sock;
pub(crate) mod stack;
pub(crate) mod this_process;

/// `errno` of the calling thread after a failed libc call (parent side only).
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

use std::os::fd::{FromRawFd, OwnedFd};

use std::ffi::OsStr;
use std::os::fd::RawFd;

use crate::steps::{Hook, Step};
use in_child::{ChildCtx, Report, STEP_NONE};
use parent::CStrArray;

/// A started child and what it left in its [`Report`]: success when
/// `report.step == STEP_EXEC && report.errno == 0`.
pub(crate) struct Outcome {
    pub pid: i32,
    /// None only when the caller asked for none (`spawn_clone_vfork`) and the clone made
    /// the child (a pool child always comes with its pidfd).
    pub pidfd: Option<OwnedFd>,
    pub report: Report,
}

/// All 64 signals blocked in this thread (glibc's internal ones included, which
/// `pthread_sigmask` would filter out) until dropped.
pub(crate) struct SignalsBlocked(u64);

impl SignalsBlocked {
    pub(crate) fn new() -> SignalsBlocked {
        let all: u64 = !0;
        let mut old: u64 = 0;
        // SAFETY: rt_sigprocmask reads `all` and writes the old mask into `old` (8 bytes each).
        unsafe {
            raw::sc!(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &all as *const u64,
                &mut old as *mut u64,
                8
            )
        };
        SignalsBlocked(old)
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `new`.
        unsafe {
            raw::sc!(libc::SYS_rt_sigprocmask, libc::SIG_SETMASK, &self.0 as *const u64, 0, 8)
        };
    }
}

/// What the spawn functions read of a [`Plan`](crate::Plan): borrowed from it by
/// `Plan::view` (in spawn/), so that sys/ needs nothing from spawn/ or isolate/.
pub(crate) struct PlanView<'a> {
    pub steps: &'a [Step],
    /// The execve candidates in PATH order, argv and envp: NULL-terminated pointer arrays.
    pub candidates: &'a CStrArray,
    pub argv: &'a CStrArray,
    pub envp: &'a CStrArray,
    /// The program as given, and the PATH searched for it (error messages of posix_spawn).
    pub program: &'a OsStr,
    pub searched: Option<&'a OsStr>,
    /// CPython's PATH search (try every candidate) rather than execvp's.
    pub try_all: bool,
    pub sigmask: u64,
    /// How many scratch slots the [`Step::DupAway`] steps use.
    pub scratch: usize,
    /// The highest fd number the child's map writes.
    pub max_target: RawFd,
    /// `CLONE_NEW*` flags for the clone.
    pub clone_flags: u64,
    /// A cgroup v2 directory fd for CLONE_INTO_CGROUP.
    pub cgroup: Option<RawFd>,
    /// Id maps this thread writes from outside the new user namespace.
    pub id_maps: Option<IdMaps<'a>>,
}

/// Uid and gid maps the spawning thread writes to /proc/PID/{uid,gid}_map between the clone
/// and the child's exec, answering the child's `AwaitIdMaps` step on `go_write`.
pub(crate) struct IdMaps<'a> {
    /// The contents of uid_map and gid_map (an empty one is not written).
    pub uid_map: &'a [u8],
    pub gid_map: &'a [u8],
    /// Where the answer goes: 4 bytes, 0 or `(file << 16) | errno` of the failed write.
    pub go_write: RawFd,
}

/// Write the child's maps from outside, right after the clone (the user namespace exists from
/// then on; the child waits for the answer in its AwaitIdMaps step), and answer with 0 or
/// (file << 16 | errno), file 1 = uid_map, 2 = gid_map. Always answers: the child waits for
/// it. If the child died before reading, the answer stays in the pipe, harmlessly.
///
/// `/proc/PID` is opened first, then the child is checked to be still ours through its
/// `pidfd` (such a child is always cloned with one): a child killed meanwhile and reaped by
/// another thread (a spawn server's reaper) leaves its pid free for another process, whose
/// maps must never be written. `pidfd_send_signal` of signal 0 finds the child, live or
/// dead, until it is reaped, and fails with ESRCH from then on, before its pid can be given
/// again (a pid slot would not do: a reaper empties it only after its `waitid` has freed the
/// pid). Once the check passes, the directory is the child's whatever the pid becomes.
fn write_id_maps(maps: &IdMaps<'_>, pid: i32, pidfd: i32) {
    // An answer about the maps as a whole names the first one to write.
    let first = if maps.uid_map.is_empty() { 2 } else { 1 };
    let answer = match parent::open_dir(&format!("/proc/{pid}")) {
        Err(e) => (first << 16) | e,
        Ok(_) if !still_ours(pidfd) => (first << 16) | libc::ESRCH,
        Ok(dir) => {
            let files = [(1, c"uid_map", maps.uid_map), (2, c"gid_map", maps.gid_map)];
            let failed = files.into_iter().filter(|(_, _, data)| !data.is_empty()).find_map(
                |(file, name, data)| {
                    parent::write_file_at(&dir, name, data).err().map(|e| (file, e))
                },
            );
            failed.map_or(0, |(file, e)| (file << 16) | e)
        }
    };
    parent::write_all(maps.go_write, &answer.to_ne_bytes());
}

/// Whether the child of `pidfd` has not been reaped (its pid is not another process's since):
/// only ESRCH says it has (EPERM from a security module, say, leaves the write to fail or
/// not on its own). With no pidfd (-1), nothing tells: true.
fn still_ours(pidfd: i32) -> bool {
    if pidfd < 0 {
        return true;
    }
    // SAFETY: the pidfd the clone just made, open for this call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(pidfd) };
    !matches!(pidfd::send_signal(fd, 0), Err(libc::ESRCH))
}

/// The context the child reads, pointing into `plan`, `report` and `scratch`.
fn context<'a>(
    plan: &'a PlanView<'a>,
    report: &'a mut Report,
    scratch: &'a mut [i32],
    pre_exec: Option<*mut [Hook]>,
) -> ChildCtx<'a> {
    let envp = plan.envp.as_ptr();
    let cands = plan.candidates.as_ptr();
    let n = plan.candidates.len();
    ChildCtx {
        steps: plan.steps,
        // SAFETY: the pointer array has `n` string pointers followed by a NULL.
        candidates: unsafe { std::slice::from_raw_parts(cands, n) },
        argv: plan.argv.as_ptr(),
        envp,
        sigmask: plan.sigmask,
        reset_handlers: true,
        mask_inherited: false,
        report: report as *mut Report,
        scratch: scratch.as_mut_ptr(),
        scratch_len: scratch.len(),
        notify_fd: -1,
        notify_read: -1,
        try_all: plan.try_all,
        pre_exec,
    }
}

impl ChildCtx<'_> {
    /// The close-on-exec pipe whose EOF tells the parent the child has exec'd or exited: the
    /// child holds the write end, and neither end is ever one of the caller's fds.
    pub(crate) fn set_notify(&mut self, read: &OwnedFd, write: &OwnedFd) {
        use std::os::fd::AsRawFd;
        (self.notify_read, self.notify_fd) = (read.as_raw_fd(), write.as_raw_fd());
    }
}

/// Spawn with clone(CLONE_VM|CLONE_VFORK). Returns the clone's errno if no child started.
///
/// Id maps written from outside (`plan.id_maps`): the clone leaves out CLONE_VFORK, this
/// thread writes the maps to /proc/PID/{uid,gid}_map and answers the child's AwaitIdMaps
/// step, then waits for EOF on a close-on-exec pipe held only by the child (its write end
/// above every fd the child's dup2 steps write, and spared by close_range). The kernel
/// closes it only after the child's exec has switched to the new program's memory (or its
/// exit has released ours), so from then on the stack and context are free again, exactly
/// as when a vfork clone returns. (A helper thread per spawn did this while the vfork
/// parent slept: creating and joining it cost ~35 µs.) As with fork-exec's pipe, a process
/// forked by another thread during the clone inherits the write end until it execs or
/// exits, which delays this spawn's return until then.
pub(crate) fn spawn_clone_vfork(
    plan: &PlanView,
    want_pidfd: bool,
) -> Result<Outcome, (&'static str, i32)> {
    let mut report = Report { step: STEP_NONE, errno: 0, detail: 0 };
    let mut scratch = vec![-1i32; plan.scratch];
    let mut ctx = context(plan, &mut report, &mut scratch, None);
    let cgroup = plan.cgroup;
    let mut notify = match plan.id_maps {
        None => None,
        Some(_) => Some(fork::cloexec_pipe_above(plan.max_target + 1).map_err(|e| ("pipe2", e))?),
    };
    if let Some((r, w)) = &notify {
        ctx.set_notify(r, w);
    }
    if pool::eligible(plan) {
        if let Some((pid, pidfd)) = pool::run(&mut ctx) {
            return Ok(Outcome { pid, pidfd: Some(pidfd), report });
        }
    }
    let (vfork, flags) = (notify.is_none(), plan.clone_flags);
    let cloned = stack::with_stack(|stack| {
        // A child whose maps are written from here is cloned with a pidfd whatever the caller
        // wants: `write_id_maps` checks through it that the child is still ours.
        let with_pidfd = want_pidfd || plan.id_maps.is_some();
        // Without CLONE_VFORK, the wait for EOF below comes before this closure returns (and
        // with it `stack`) and before `ctx` or `report` is touched again.
        // SAFETY: `ctx`, `report`, `scratch` and `stack` outlive the child's use of them
        // (CLONE_VFORK returns only after execve or exit).
        let cloned =
            unsafe { clone::clone_vfork(&mut ctx, stack, (flags, cgroup), vfork, with_pidfd) }?;
        if let (Some(job), Some((rd, wr))) = (&plan.id_maps, notify.take()) {
            // Only the child holds the write end now: EOF comes when it execs or exits.
            drop(wr);
            write_id_maps(job, cloned.pid, cloned.pidfd);
            parent::wait_eof(std::os::fd::AsRawFd::as_raw_fd(&rd));
        }
        Ok(cloned)
    })
    .map_err(|e| ("mmap", e))?
    .map_err(|e| ("clone", e))?;
    // SAFETY: CLONE_PIDFD stored a new pidfd owned by nobody else (-1: none was asked for).
    let pidfd = (cloned.pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(cloned.pidfd) });
    // Closed here if it was made only for the maps' check.
    let pidfd = pidfd.filter(|_| want_pidfd);
    Ok(Outcome { pid: cloned.pid, pidfd, report })
}

/// A child started by [`start_clone`]: cloned without `CLONE_VFORK`, perhaps still running its
/// steps on `stack` in this address space. Owns everything the child reads except the plan's
/// buffers, which its owner must keep alive and unchanged for as long as this lives (declare
/// it before the plan, so it drops first). Until [`Launch::finish`] or the drop has seen EOF on
/// `notify`, nothing the child uses is touched or freed.
pub(crate) struct Launch {
    pub pid: i32,
    pub pidfd: Option<OwnedFd>,
    /// The read end of a close-on-exec pipe whose write end only the child holds: readable
    /// (EOF) once the child has exec'd or exited, after it let go of our memory. `None` until
    /// a child was cloned.
    pub notify: Option<OwnedFd>,
    /// Read by the child; from `Box::into_raw` (it never moves), freed in drop.
    ctx: *mut ChildCtx<'static>,
    /// Written by the child; from `Box::into_raw`, freed in drop.
    report: *mut Report,
    /// The child's scratch slots: a heap buffer that is never resized.
    _scratch: Vec<i32>,
    stack: Option<stack::Stack>,
}

// SAFETY: the raw pointers in `ctx` and `report` point into this Launch's own boxes and into
// the plan its owner keeps with it; the child is another process, and whichever thread holds
// the Launch waits for it the same way.
unsafe impl Send for Launch {}
// SAFETY: through `&Launch` only `pid`, `pidfd` and `notify` can be read; everything the child
// uses is reached only through `&mut self` (finish, drop).
unsafe impl Sync for Launch {}

impl Launch {
    /// Wait for the child to have exec'd or exited (at once when `notify` is readable) and
    /// return its report. Afterwards nothing of ours is in use by the child.
    pub(crate) fn finish(&mut self) -> Report {
        if let Some(stack) = self.stack.take() {
            if let Some(n) = &self.notify {
                parent::wait_eof(std::os::fd::AsRawFd::as_raw_fd(n));
            }
            stack::put_spare(stack);
        }
        // SAFETY: the child is done with the report (EOF above, or no child); it was written
        // through the same pointer, and the kernel's pipe close orders the child's writes
        // before our read.
        unsafe { std::ptr::read_volatile(self.report) }
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        // Dropped before finish (a cancelled start): the child may still be on our stack.
        let _ = self.finish();
        // SAFETY: from Box::into_raw in start_clone, and no longer used by the child.
        drop(unsafe { Box::from_raw(self.ctx) });
        // SAFETY: likewise.
        drop(unsafe { Box::from_raw(self.report) });
    }
}

/// Start the child without CLONE_VFORK and return at once (see [`Launch`]). The plan must use
/// the clone-vfork strategy with no id maps written from outside and no pool; the caller keeps
/// it alive and unchanged until the Launch is finished or dropped. On an error no child runs,
/// and dropping the Launch being built frees what it holds.
pub(crate) fn start_clone(plan: &PlanView) -> Result<Launch, (&'static str, i32)> {
    debug_assert!(plan.id_maps.is_none());
    let stack = stack::take_spare().map_err(|e| ("mmap", e))?;
    let report = Box::into_raw(Box::new(Report { step: STEP_NONE, errno: 0, detail: 0 }));
    let mut scratch = vec![-1i32; plan.scratch];
    // SAFETY: `report` is a fresh allocation, owned by the Launch below.
    let ctx = context(plan, unsafe { &mut *report }, &mut scratch, None);
    // SAFETY: only the lifetime is erased: `ctx` points into the plan's buffers (the caller
    // keeps them alive and unchanged until the Launch is done) and into `report` and the heap
    // buffer of `scratch`, both the Launch's.
    let ctx = unsafe { std::mem::transmute::<ChildCtx<'_>, ChildCtx<'static>>(ctx) };
    let mut launch = Launch {
        pid: 0,
        pidfd: None,
        notify: None,
        ctx: Box::into_raw(Box::new(ctx)),
        report,
        _scratch: scratch,
        stack: Some(stack),
    };
    // The fork lock's window is opened with all signals blocked (forklock.rs: a handler that
    // forked inside it would wait for this thread's own window for ever).
    let _blocked = SignalsBlocked::new();
    // No fork() of this process between the pipe and the close of our write end (see
    // forklock.rs): else a process that never execs could hold the write end.
    let _window = forklock::Window::open();
    let (rd, wr) = fork::cloexec_pipe_above(plan.max_target + 1).map_err(|e| ("pipe2", e))?;
    // SAFETY: the context is the Launch's and no child shares it yet.
    unsafe { (*launch.ctx).set_notify(&rd, &wr) };
    let (st, flags, cgroup) =
        (launch.stack.as_ref().expect("set above"), plan.clone_flags, plan.cgroup);
    // SAFETY: the Launch waits for EOF before freeing what the child uses.
    let cloned = unsafe { clone::clone_vfork(&mut *launch.ctx, st, (flags, cgroup), false, true) };
    // Only the child holds the write end now: EOF comes when it execs or exits.
    drop(wr);
    let c = cloned.map_err(|e| ("clone", e))?;
    launch.pid = c.pid;
    // SAFETY: CLONE_PIDFD stored a new pidfd owned by nobody else.
    launch.pidfd = Some(unsafe { OwnedFd::from_raw_fd(c.pidfd) });
    launch.notify = Some(rd);
    Ok(launch)
}

/// Children for unit tests (fork, kill, waitpid of the test's own children).
#[cfg(test)]
#[allow(unsafe_code)]
pub(crate) mod test_children {
    /// A child that exits with `code` at once.
    pub(crate) fn fork_exit(code: i32) -> i32 {
        // SAFETY: the child only calls _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above.
            unsafe { libc::_exit(code) };
        }
        pid
    }

    /// A child that waits for a signal.
    pub(crate) fn fork_paused() -> i32 {
        // SAFETY: the child only calls pause and _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above.
            unsafe {
                libc::pause();
                libc::_exit(0)
            };
        }
        pid
    }

    /// Kill and reap this process's child `pid`.
    pub(crate) fn kill_and_reap(pid: i32) {
        // SAFETY: the caller's own child, not reaped by anything else.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_children::{fork_paused as paused_child, kill_and_reap};
    use super::*;
    use std::os::fd::AsRawFd;

    /// What `write_id_maps` answers the child for `pid` (its pidfd `pidfd`, -1: none).
    fn answer(pid: i32, pidfd: i32) -> i32 {
        let (r, w) = parent::pipe().expect("pipe");
        let maps = IdMaps { uid_map: b"0 0 1\n", gid_map: b"", go_write: w.as_raw_fd() };
        write_id_maps(&maps, pid, pidfd);
        let mut b = [0u8; 4];
        assert_eq!(parent::read_some(r.as_raw_fd(), &mut b), 4);
        i32::from_ne_bytes(b)
    }

    /// A child reaped since its clone (by another thread: a server's reaper) has left its
    /// pid free: when another process has it, no map of that process is written (the
    /// child's pidfd says it was reaped). (Here the other process is a live
    /// child of the test, never in a new user namespace: writing its map fails with EPERM,
    /// which is what a check that let the write through would answer.)
    #[test]
    fn no_map_is_written_for_another_process_that_has_the_pid() {
        let other = paused_child();
        let gone = paused_child();
        let pidfd = pidfd::open(gone).expect("pidfd");
        kill_and_reap(gone);
        let by_pidfd = answer(other, pidfd.as_raw_fd());
        // Still ours (its own pidfd): the write is tried.
        let own = pidfd::open(other).expect("pidfd");
        let tried = answer(other, own.as_raw_fd());
        kill_and_reap(other); // before any assertion: no child left behind
        assert_eq!(by_pidfd, (1 << 16) | libc::ESRCH);
        assert_ne!(tried, (1 << 16) | libc::ESRCH);
    }
}
