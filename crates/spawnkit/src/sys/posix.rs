//! The posix-spawn strategy: glibc's `posix_spawn`, for comparison and as a fallback (never
//! `posix_spawnp`, whose PATH search reads the live environment: see `spawn_posix`). Steps it cannot express are refused with an Unsupported error naming them.

use std::ffi::c_char;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;

use super::pidfd;
use super::PlanView;
use crate::error::{quoted, Error, ErrorKind, Result};
use crate::steps::{FdRef, Step, MAX_FD};

/// glibc's POSIX_SPAWN_SETSID (2.26).
const POSIX_SPAWN_SETSID: libc::c_short = 0x80;

extern "C" {
    fn posix_spawn_file_actions_addchdir_np(
        actions: *mut libc::posix_spawn_file_actions_t,
        path: *const c_char,
    ) -> libc::c_int;
    fn posix_spawn_file_actions_addclosefrom_np(
        actions: *mut libc::posix_spawn_file_actions_t,
        from: libc::c_int,
    ) -> libc::c_int;
}

struct Attrs {
    attr: libc::posix_spawnattr_t,
    actions: libc::posix_spawn_file_actions_t,
}

impl Drop for Attrs {
    fn drop(&mut self) {
        // SAFETY: both were initialised in `prepare`.
        unsafe {
            libc::posix_spawnattr_destroy(&mut self.attr);
            libc::posix_spawn_file_actions_destroy(&mut self.actions);
        }
    }
}

fn check(what: &'static str, r: libc::c_int) -> Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(Error::os(what, "", r))
    }
}

/// A glibc sigset_t holding exactly `bits` (bit N-1 = signal N). Written word by word:
/// `sigaddset` refuses glibc's internal signals 32 and 33, which must be in the SETSIGDEF set
/// or glibc leaves them ignored in the child.
fn sigset(bits: u64) -> libc::sigset_t {
    // SAFETY: sigset_t is plain integer words; all-zero is the empty set, and on Linux its
    // first 64-bit word holds signals 1..=64, bit N-1 for signal N.
    unsafe {
        let mut set = MaybeUninit::<libc::sigset_t>::zeroed().assume_init();
        (&mut set as *mut libc::sigset_t as *mut u64).write(bits);
        set
    }
}

/// glibc's internal signals (SIGCANCEL, SIGSETXID): posix_spawn marks them ignored in the
/// child unless they are in the SETSIGDEF set. The other strategies leave them at SIG_DFL.
const GLIBC_INTERNAL: u64 = (1 << 31) | (1 << 32);

/// The error for the first step posix_spawn(3) has no attribute or file action for, if any.
pub(crate) fn refusal(steps: &[Step]) -> Option<Error> {
    steps.iter().find(|s| !can_do(s)).map(unsupported)
}

/// The steps [`prepare`] turns into posix_spawn attributes and file actions.
fn can_do(step: &Step) -> bool {
    matches!(
        step,
        Step::SignalDefault { .. }
            | Step::Setsid
            | Step::Setpgid { .. }
            | Step::DupAway { .. }
            | Step::Dup2 { .. }
            | Step::ClearCloexec { .. }
            | Step::CloseRange { .. }
            | Step::Chdir { .. }
    )
}

fn unsupported(step: &Step) -> Error {
    let (name, _) = step.describe();
    Error::unsupported(
        "posix_spawn",
        format!("the posix-spawn strategy cannot do {name} ({step}); use clone-vfork or fork-exec"),
    )
}

fn prepare(plan: &PlanView) -> Result<Box<Attrs>> {
    // SAFETY: zeroed storage is initialised right below by the *_init calls.
    let mut a: Box<Attrs> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
    // SAFETY: initialising owned storage.
    unsafe {
        check("posix_spawnattr_init", libc::posix_spawnattr_init(&mut a.attr))?;
        check(
            "posix_spawn_file_actions_init",
            libc::posix_spawn_file_actions_init(&mut a.actions),
        )?;
    }
    let mut flags: libc::c_short =
        (libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF) as libc::c_short;
    let sig_default = plan
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::SignalDefault { set } => Some(*set),
            _ => None,
        })
        .fold(GLIBC_INTERNAL, |a, b| a | b);
    let sd = sigset(sig_default);
    // SAFETY: `a` is initialised; the set is a valid sigset_t.
    unsafe {
        check(
            "posix_spawnattr_setsigdefault",
            libc::posix_spawnattr_setsigdefault(&mut a.attr, &sd),
        )?
    };

    let mask = sigset(plan.sigmask);
    // SAFETY: `a` is initialised; the set is a valid sigset_t.
    unsafe {
        check("posix_spawnattr_setsigmask", libc::posix_spawnattr_setsigmask(&mut a.attr, &mask))?
    };
    let mut slots: Vec<i32> = Vec::new();
    // posix_spawn has no F_DUPFD: temporaries get fixed numbers above every fd any step reads
    // or writes, so they cannot overwrite a source.
    let tmp_base = plan
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Dup2 { from: FdRef::Fd(fd), .. }
            | Step::DupAway { fd, .. }
            | Step::ClearCloexec { fd } => Some(*fd),
            _ => None,
        })
        .chain([plan.max_target])
        // A kept or source fd past any fd table's reach (the plan refuses such targets) cannot
        // meet a temporary placed just above the highest map target: leave it out, so the
        // arithmetic stays far from i32::MAX.
        .filter(|&fd| fd <= MAX_FD)
        .max()
        .unwrap_or(2)
        + 1;
    let closes_all =
        plan.steps.iter().any(|s| matches!(s, Step::CloseRange { last: u32::MAX, .. }));
    // The parent's open fds, read only when needed: to pick temporaries that overwrite no
    // inherited fd when nothing closes them afterwards, and to close only the open fds of a
    // bounded gap between kept fds (posix_spawn has no close_range).
    let needs_open = plan.steps.iter().any(|s| {
        matches!(s, Step::CloseRange { last, .. } if *last != u32::MAX)
            || (!closes_all && matches!(s, Step::DupAway { .. }))
    });
    let open = if needs_open { super::parent::open_fds() } else { Default::default() };
    let mut temporaries: Vec<i32> = Vec::new();
    for step in plan.steps {
        // SAFETY: (all calls below) `a` is initialised; paths are NUL-terminated strings owned
        // by the plan, which outlives the spawn.
        unsafe {
            match step {
                Step::SignalDefault { .. } => {} // in the SETSIGDEF set above
                Step::Setsid => flags |= POSIX_SPAWN_SETSID,
                Step::Setpgid { pgid } => {
                    check(
                        "posix_spawnattr_setpgroup",
                        libc::posix_spawnattr_setpgroup(&mut a.attr, *pgid),
                    )?;
                    flags |= libc::POSIX_SPAWN_SETPGROUP as libc::c_short;
                }
                Step::DupAway { fd, slot, .. } => {
                    // With a final closefrom the temporary goes with it; without, pick a
                    // number no inherited fd uses and close it after the moves.
                    let mut tmp = tmp_base + *slot as i32;
                    if !closes_all {
                        tmp = temporaries.last().map_or(tmp_base, |t| t + 1);
                        while open.contains(&tmp) {
                            tmp += 1;
                        }
                        temporaries.push(tmp);
                    }
                    if slots.len() <= *slot {
                        slots.resize(*slot + 1, -1);
                    }
                    slots[*slot] = tmp;
                    check(
                        "posix_spawn_file_actions_adddup2",
                        libc::posix_spawn_file_actions_adddup2(&mut a.actions, *fd, tmp),
                    )?;
                }
                Step::Dup2 { from, to } => {
                    let src = match from {
                        FdRef::Fd(fd) => *fd,
                        FdRef::Slot { index, .. } => slots.get(*index).copied().unwrap_or(-1),
                    };
                    check(
                        "posix_spawn_file_actions_adddup2",
                        libc::posix_spawn_file_actions_adddup2(&mut a.actions, src, *to),
                    )?;
                }
                // glibc >= 2.29 clears FD_CLOEXEC for dup2(fd, fd) file actions.
                Step::ClearCloexec { fd } => check(
                    "posix_spawn_file_actions_adddup2",
                    libc::posix_spawn_file_actions_adddup2(&mut a.actions, *fd, *fd),
                )?,
                Step::CloseRange { first, last: u32::MAX } => check(
                    "posix_spawn_file_actions_addclosefrom_np",
                    posix_spawn_file_actions_addclosefrom_np(&mut a.actions, *first as i32),
                )?,
                Step::CloseRange { first, last } => {
                    for &fd in open.range(*first as i32..=(*last).min(i32::MAX as u32) as i32) {
                        check(
                            "posix_spawn_file_actions_addclose",
                            libc::posix_spawn_file_actions_addclose(&mut a.actions, fd),
                        )?;
                    }
                }
                Step::Chdir { path } => check(
                    "posix_spawn_file_actions_addchdir_np",
                    posix_spawn_file_actions_addchdir_np(&mut a.actions, path.as_ptr()),
                )?,
                other => return Err(unsupported(other)),
            }
        }
    }
    for tmp in temporaries {
        // SAFETY: `a` is initialised.
        unsafe {
            check(
                "posix_spawn_file_actions_addclose",
                libc::posix_spawn_file_actions_addclose(&mut a.actions, tmp),
            )?
        };
    }
    // SAFETY: `a` is initialised.
    unsafe {
        check("posix_spawnattr_setflags", libc::posix_spawnattr_setflags(&mut a.attr, flags))?
    };
    Ok(a)
}

/// Spawn with posix_spawn(p). glibc reaps a child that failed to exec, so a failure here
/// leaves no child behind. Without `want_pidfd` the child's pid alone (for a caller that
/// reaps by pid).
pub(crate) fn spawn_posix(plan: &PlanView, want_pidfd: bool) -> Result<(i32, Option<OwnedFd>)> {
    let a = prepare(plan)?;
    let envp = plan.envp.as_ptr();
    let argv = plan.argv.as_ptr() as *const *mut c_char;
    let envp = envp as *const *mut c_char;
    let mut pid: libc::pid_t = 0;
    // Never posix_spawnp: glibc's search reads PATH with getenv in the child, which shares
    // this process's memory, while another thread's setenv may free the environment (and it
    // would search the parent's PATH, not the child's). The candidates were joined from the
    // child's PATH in the plan; each is tried with execvp's rules, and an absolute one that
    // the parent already sees is missing costs an access(2), not a whole posix_spawn.
    let r = {
        let mut last = libc::ENOENT;
        let mut eacces = false;
        let mut result = libc::ENOENT;
        for i in 0..plan.candidates.len() {
            let Some(cand) = plan.candidates.get(i) else { break };
            let r = match missing(cand) {
                Some(e) => e,
                // SAFETY: all pointers are valid, NUL/NULL-terminated, and outlive the call.
                None => unsafe {
                    libc::posix_spawn(&mut pid, cand.as_ptr(), &a.actions, &a.attr, argv, envp)
                },
            };
            result = r;
            match r {
                0 => break,
                libc::EACCES => eacces = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => break,
            }
            last = r;
        }
        if result != 0 && eacces && result == last {
            libc::EACCES
        } else {
            result
        }
    };
    if r != 0 {
        return Err(posix_error(plan, r).in_child());
    }
    if !want_pidfd {
        // A caller that reaps by pid (a spawn server's reaper): a pidfd_open here could
        // come after that reap.
        return Ok((pid, None));
    }
    match pidfd::open(pid) {
        Ok(fd) => Ok((pid, Some(fd))),
        // Reaped already (SIGCHLD ignored, or a waitpid(-1) elsewhere): the pid may belong to
        // another process by now, so it must not be signalled.
        Err(libc::ESRCH) => Err(Error::os("pidfd_open", pid.to_string(), libc::ESRCH)
            .with_reason("the child ran and was reaped elsewhere (SIGCHLD ignored?)")),
        Err(e) => {
            // SAFETY: our own unreaped child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            Err(Error::os("pidfd_open", pid.to_string(), e))
        }
    }
}

/// Whether an absolute candidate is surely not there (ENOENT, ENOTDIR and the other errors
/// execvp goes on after), by access(2) in the parent; relative ones resolve after the
/// child's chdir, so they are left to posix_spawn.
fn missing(cand: &std::ffi::CStr) -> Option<i32> {
    if cand.to_bytes().first() != Some(&b'/') {
        return None;
    }
    // SAFETY: `cand` is NUL-terminated; faccessat only reads it.
    if unsafe { libc::faccessat(libc::AT_FDCWD, cand.as_ptr(), libc::F_OK, 0) } == 0 {
        return None;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(
            e @ (libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT),
        ) => Some(e),
        _ => None,
    }
}

/// posix_spawn returns one errno for the whole launch. Name the likeliest step: a chdir whose
/// directory fails in the parent too, else the program.
fn posix_error(plan: &PlanView, errno: i32) -> Error {
    let chdir = plan.steps.iter().find_map(|s| match s {
        Step::Chdir { path } => Some(path),
        _ => None,
    });
    if let Some(path) = chdir {
        if matches!(errno, libc::ENOENT | libc::ENOTDIR | libc::EACCES | libc::ELOOP) {
            if let Some(e) = chdir_errno(path) {
                let (name, subject) = Step::Chdir { path: path.clone() }.describe();
                return Error::os(name, subject, e).with_reason(format!(
                    "{} (posix_spawn failed; the directory fails in the parent too)",
                    std::io::Error::from_raw_os_error(e)
                ));
            }
        }
    }
    let err = Error::os("posix_spawn", quoted(plan.program), errno);
    match (plan.searched, errno) {
        (Some(path), libc::ENOENT) => err
            .with_kind(ErrorKind::NotFound)
            .with_reason(format!("not found in PATH ({})", path.to_string_lossy())),
        (None, libc::ENOENT) => err.with_kind(ErrorKind::NotFound),
        _ => err,
    }
}

/// Why chdir(path) fails in the parent, if it does: ENOENT/ENOTDIR/ELOOP from opening it as
/// a directory, EACCES from the search permission.
fn chdir_errno(path: &std::ffi::CStr) -> Option<i32> {
    // SAFETY: NUL-terminated path; open returns a new fd or -1.
    let fd =
        unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Some(super::last_errno());
    }
    // SAFETY: closing the fd just opened.
    unsafe { libc::close(fd) };
    // SAFETY: NUL-terminated path.
    if unsafe { libc::access(path.as_ptr(), libc::X_OK) } != 0 {
        return Some(super::last_errno());
    }
    None
}
