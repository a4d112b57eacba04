//! Runs a [`Plan`] with its strategy and turns the child's report into a [`Child`] or an
//! [`Error`] naming the failed step.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use super::command::Command;
use super::options::{Stdio, Strategy};
use super::plan::Plan;
use crate::error::{quoted, Error, ErrorKind, Result};
use crate::sys::fork::ForkFailure;
use crate::sys::in_child::{Report, STEP_EXEC, STEP_PRE_EXEC, STEP_SIGNALS};
use crate::sys::{self, pidfd};
use crate::{orphans, Child};

pub(crate) fn spawn(cmd: &mut Command) -> Result<Child> {
    orphans::reap();
    let plan = Plan::build(cmd)?;
    spawn_planned(cmd, plan)
}

/// [`spawn`] with the plan built already.
fn spawn_planned(cmd: &mut Command, mut plan: Plan) -> Result<Child> {
    let (pid, pidfd) = launch(cmd, &mut plan, true)?;
    let pidfd = pidfd.expect("a pidfd is made when one is asked for");
    let [stdin, stdout, stderr] = std::mem::take(&mut plan.parent_pipes);
    Ok(Child::new(pid, pidfd, stdin, stdout, stderr, cmd.kill_on_drop))
}

/// Spawn for a caller that knows its child by pid alone and reaps every child of its process
/// itself (a spawn server's reaper, for a request whose status it sends): the clone-vfork
/// and posix-spawn strategies make no pidfd (which saves its file, and the server's closing
/// of it); fork-exec, or a child parked in the pool, comes with one, returned. A child that
/// fails before its exec is not reaped here (the caller's reaper does). The parent's ends of
/// pipes the command asked for close here.
pub(crate) fn spawn_bare(cmd: &mut Command) -> Result<(i32, Option<std::os::fd::OwnedFd>)> {
    orphans::reap();
    let mut plan = Plan::build(cmd)?;
    launch(cmd, &mut plan, false)
}

/// Run `plan`: the child's pid, and its pidfd (always with `want_pidfd`).
fn launch(
    cmd: &mut Command,
    plan: &mut Plan,
    want_pidfd: bool,
) -> Result<(i32, Option<std::os::fd::OwnedFd>)> {
    if let Some((fd, lock)) = &plan.lock {
        crate::isolate::compile::acquire(*fd, lock)?;
    }
    let (pid, pidfd) = match plan.strategy {
        Strategy::PosixSpawn => sys::posix::spawn_posix(&plan.view(), want_pidfd)?,
        Strategy::CloneVfork | Strategy::ForkExec => {
            let out = if plan.strategy == Strategy::CloneVfork {
                sys::spawn_clone_vfork(&plan.view(), want_pidfd)
                    .map_err(|(step, e)| clone_error(plan, step, e))?
            } else {
                match sys::fork::spawn_fork_exec(&plan.view(), &mut cmd.pre_exec) {
                    Ok(out) => out,
                    Err(ForkFailure::Syscall(step, e)) => return Err(Error::os(step, "", e)),
                    Err(ForkFailure::Gone(report)) if report.errno != 0 => {
                        return Err(child_error(plan, report, None));
                    }
                    Err(ForkFailure::Gone(_)) => {
                        return Err(Error::os("pidfd_open", "", libc::ESRCH).with_reason(
                            "the child ran and was reaped elsewhere (SIGCHLD ignored?)",
                        ));
                    }
                }
            };
            if !handed_out(out.report, cmd.pre_exec_may_exit, cmd.may_die_before_exec) {
                // The child failed before execve and exited (or died): reap it here.
                // With no pidfd (`spawn_bare`) it is left to the caller's reaper: a wait by
                // pid here could find another child that took the pid after the reaper was
                // first, and take its status. The error then cannot name a signal.
                // No longer this spawn's child, before it is reaped here (the slot emptied:
                // its pid may be another's after) or left to the reaper (the slot marks it
                // failed, its pid negated: the reaper reaps it by pid with no answer, even
                // while a pinned spawn holds off its other reaps).
                match out.pidfd {
                    Some(_) => sys::clone::note_pid(0),
                    None => sys::clone::note_failed(out.pid),
                }
                let ended = out.pidfd.as_ref().and_then(reap_failed);
                return Err(child_error(plan, out.report, ended));
            }
            (out.pid, out.pidfd)
        }
    };
    handed_over(cmd, plan);
    Ok((pid, pidfd))
}

/// A child being started by [`Command::start`]: cloned, perhaps not yet exec'd. Its outcome
/// is known once [`Starting::fd`] is readable (or at once, when that is `None`); then
/// [`Starting::finish`] returns the [`Child`] or the error of the step that failed, without
/// blocking. Dropping it unfinished waits for the child to exec or exit (at most its steps
/// before execve) and then drops the child as a [`Child`] would be dropped.
#[must_use = "a started child is known to have exec'd only once finished"]
pub struct Starting {
    state: StartState,
}

// Pending is the usual state and lives in one place (a future, a slot); boxing it would only add
// an allocation per start.
#[allow(clippy::large_enum_variant)]
enum StartState {
    Ready(Result<Child>),
    /// `launch` is declared before `plan`: it drops first, after the child let go of the plan.
    Pending {
        launch: crate::sys::Launch,
        plan: Plan,
        kill_on_drop: bool,
        may_die_before_exec: bool,
    },
    Taken,
}

impl std::fmt::Debug for Starting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Starting");
        match &self.state {
            StartState::Ready(r) => d.field("ready", &r.as_ref().map(|c| c.id())),
            StartState::Pending { launch, .. } => d.field("pid", &launch.pid),
            StartState::Taken => d.field("finished", &true),
        };
        d.finish()
    }
}

impl Starting {
    /// The child's pid (`None` when the spawn already failed).
    pub fn id(&self) -> Option<u32> {
        match &self.state {
            StartState::Ready(Ok(c)) => Some(c.id()),
            StartState::Pending { launch, .. } => Some(launch.pid as u32),
            _ => None,
        }
    }

    /// The fd that becomes readable when the outcome is known (the read end of a
    /// close-on-exec pipe whose only writer is the child: EOF once it has exec'd or exited).
    /// `None` when it is known already.
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match &self.state {
            StartState::Pending { launch, .. } => {
                launch.notify.as_ref().map(std::os::fd::AsFd::as_fd)
            }
            _ => None,
        }
    }

    /// The error, when the outcome is known already and is one (a spawn the start fell back
    /// to failed).
    #[cfg(feature = "tokio")]
    pub(crate) fn failed(&self) -> Option<&Error> {
        match &self.state {
            StartState::Ready(Err(e)) => Some(e),
            _ => None,
        }
    }

    /// The child once it has exec'd, or the error naming the step that failed (the failed
    /// child reaped). Blocks until the child has exec'd or exited if [`fd`](Starting::fd)
    /// was not readable yet.
    pub fn finish(mut self) -> Result<Child> {
        self.take()
    }

    fn take(&mut self) -> Result<Child> {
        match std::mem::replace(&mut self.state, StartState::Taken) {
            StartState::Ready(r) => r,
            StartState::Taken => Err(Error::unsupported("spawn", "already finished")),
            StartState::Pending { mut launch, mut plan, kill_on_drop, may_die_before_exec } => {
                let report = launch.finish();
                let pidfd = launch.pidfd.take().expect("a pending launch holds its pidfd");
                // (No pre_exec hook here: a start is clone-vfork.)
                if !handed_out(report, false, may_die_before_exec) {
                    let ended = reap_failed(&pidfd);
                    return Err(child_error(&plan, report, ended));
                }
                let [stdin, stdout, stderr] = std::mem::take(&mut plan.parent_pipes);
                Ok(Child::new(launch.pid, pidfd, stdin, stdout, stderr, kill_on_drop))
            }
        }
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if matches!(self.state, StartState::Pending { .. }) {
            drop(self.take());
        }
    }
}

/// Start the child without waiting for its exec where the plan allows (the clone-vfork
/// strategy, no id maps written from outside): the calling thread returns right after the
/// clone. Otherwise (or when the start's own pipe or stack cannot be had) spawn as [`spawn`]
/// does and return the outcome ready. The command's `Stdio::File`/`Stdio::Owned` streams are
/// handed to the child here, as a successful spawn hands them: a start that fails later
/// (at `finish`) has used them up, where a failed `spawn` leaves them in the command.
pub(crate) fn start(cmd: &mut Command) -> Result<Starting> {
    orphans::reap();
    let mut plan = Plan::build(cmd)?;
    if plan.strategy != Strategy::CloneVfork || plan.id_maps.is_some() {
        return Ok(Starting { state: StartState::Ready(spawn_planned(cmd, plan)) });
    }
    if let Some((fd, lock)) = &plan.lock {
        crate::isolate::compile::acquire(*fd, lock)?;
    }
    let launch = match crate::sys::start_clone(&plan.view()) {
        Ok(l) => l,
        // What only a start needs (its pipe above the child's fds, a stack of its own) could
        // not be had, where a spawn needs neither (a low RLIMIT_NOFILE, no memory for a
        // mapping): spawn instead. The pipe may also have taken the last free fds, leaving
        // none for the clone's pidfd (EMFILE, ENFILE), where a spawn needs only that one.
        Err(("pipe2" | "mmap", _) | ("clone", libc::EMFILE | libc::ENFILE)) => {
            return Ok(Starting { state: StartState::Ready(spawn_planned(cmd, plan)) });
        }
        Err((step, e)) => return Err(clone_error(&plan, step, e)),
    };
    // The child has its own copies of its fds (no CLONE_FILES): the parent's go at once.
    handed_over(cmd, &mut plan);
    Ok(Starting {
        state: StartState::Pending {
            launch,
            plan,
            kill_on_drop: cmd.kill_on_drop,
            may_die_before_exec: cmd.may_die_before_exec,
        },
    })
}

/// The child has its fds: the child's ends of the pipes and /dev/null close here, in the
/// parent, and so do the files and fds handed over (else a pipe's reader would never see EOF).
fn handed_over(cmd: &mut Command, plan: &mut Plan) {
    plan.child_ends.clear();
    for slot in cmd.stdio.iter_mut() {
        if matches!(slot, Some(Stdio::File(_)) | Some(Stdio::Owned(_))) {
            *slot = None;
        }
    }
}

/// Reap a child that did not reach its execve; how it ended. Where it was reaped already
/// (the reaper of a spawn server, or the kernel in a process that ignores SIGCHLD), its
/// pidfd still tells (PIDFD_GET_INFO, Linux 6.15+), so the error can say which signal
/// killed it.
fn reap_failed(pidfd: &std::os::fd::OwnedFd) -> Option<pidfd::Ended> {
    let fd = std::os::fd::AsFd::as_fd(pidfd);
    pidfd::wait(fd, false).ok().flatten().or_else(|| pidfd::exit_info_settled(fd).ok().flatten())
}

/// Whether the child a launch left is handed out as a [`Child`]: it reached its execve, or
/// it ended before without a step failing (no errno reported) where the command asks for
/// such a child, inside a `pre_exec` hook with [`Command::pre_exec_may_exit`], outside one
/// with [`Command::may_die_before_exec`]. (A hook is its own flag's: with fork-exec, a hook
/// can also end the parent's wait early, by closing the pipe it waits on, while the child
/// lives on.)
fn handed_out(r: Report, pre_exec_may_exit: bool, may_die_before_exec: bool) -> bool {
    if r.errno != 0 {
        return false;
    }
    match r.step {
        STEP_EXEC => true,
        STEP_PRE_EXEC => pre_exec_may_exit,
        _ => may_die_before_exec,
    }
}

/// The error for a child that reported a failed step (or died without reporting).
fn child_error(plan: &Plan, r: Report, ended: Option<pidfd::Ended>) -> Error {
    if r.errno == 0 {
        let during = match r.step {
            STEP_EXEC => "execve".to_string(),
            STEP_SIGNALS => "signal reset".to_string(),
            STEP_PRE_EXEC => "pre_exec hook".to_string(),
            i => plan.steps.get(i as usize).map(|s| s.to_string()).unwrap_or_default(),
        };
        let why = match ended {
            Some(pidfd::Ended::Signaled { signal, .. }) => format!(
                "the child was killed by {} before execve",
                crate::Signal::new(signal).map(|s| s.name()).unwrap_or_default()
            ),
            _ => "the child exited before execve".to_string(),
        };
        return Error::new(ErrorKind::ChildDied, "spawn", format!("({during})"))
            .with_reason(why)
            .in_child();
    }
    let err = match r.step {
        STEP_EXEC => exec_error(plan, r),
        STEP_SIGNALS => Error::os("sigprocmask", "", r.errno),
        STEP_PRE_EXEC => Error::os("pre_exec", "", r.errno),
        i => match plan.steps.get(i as usize) {
            Some(crate::Step::AwaitIdMaps { .. }) => {
                let file = if r.detail == 2 { "gid_map" } else { "uid_map" };
                Error::os("write", format!("/proc/CHILD/{file} (by the parent)"), r.errno)
            }
            Some(crate::Step::DropBoundingCaps) if r.errno == libc::EPERM => {
                let (name, subject) = crate::Step::DropBoundingCaps.describe();
                Error::os(name, subject, r.errno).with_reason(
                    "Operation not permitted (a fenced child drops its capabilities, which needs \
                     CAP_SETPCAP; --keep-caps / keep_capabilities(true) keeps them instead)",
                )
            }
            Some(step) => {
                let (name, subject) = step.describe();
                Error::os(name, subject, r.errno)
            }
            None => Error::os("spawn", "", r.errno),
        },
    };
    err.in_child()
}

fn exec_error(plan: &Plan, r: Report) -> Error {
    let exec = &plan.exec;
    if let (Some(path), libc::ENOENT) = (&exec.searched, r.errno) {
        return Error::os("execve", quoted(&exec.program), r.errno)
            .with_reason(format!("not found in PATH ({})", path.to_string_lossy()));
    }
    let subject = exec
        .candidates
        .iter()
        .nth(r.detail as usize)
        .map(|c| quoted(OsStr::from_bytes(c)))
        .unwrap_or_else(|| quoted(&exec.program));
    Error::os("execve", subject, r.errno)
}

/// A failed clone, with what it was asked to do: namespaces, a cgroup.
fn clone_error(plan: &Plan, step: &'static str, errno: i32) -> Error {
    if step != "clone" {
        return Error::os(step, "", errno);
    }
    let mut what = Vec::new();
    if plan.clone_flags != 0 {
        what.push(format!(
            "with new namespaces {}",
            crate::isolate::Namespaces::from_bits(plan.clone_flags)
        ));
    }
    if let Some((_, path)) = &plan.cgroup {
        what.push(format!("into cgroup {path}"));
    }
    let err = Error::os("clone", what.join(" "), errno);
    let hint = match errno {
        libc::ENOSPC | libc::EUSERS if plan.clone_flags != 0 => {
            Some("a namespace limit is reached (/proc/sys/user/max_*_namespaces)")
        }
        libc::EPERM if plan.clone_flags != 0 => {
            Some("creating these namespaces needs CAP_SYS_ADMIN, or a user namespace")
        }
        libc::EACCES | libc::EBUSY | libc::EOPNOTSUPP | libc::E2BIG | libc::ENOSYS
            if plan.cgroup.is_some() =>
        {
            Some("the cgroup refuses the child (clone3 CLONE_INTO_CGROUP: Linux 5.7+, a cgroup v2 leaf you may write)")
        }
        _ => None,
    };
    match hint {
        Some(h) => err.with_reason(format!("{} ({h})", std::io::Error::from_raw_os_error(errno))),
        None => err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SigSet, Signal, Step};
    use std::io::Read;
    use std::os::fd::AsRawFd;

    /// A signal the command blocks that comes before execve (here its death signal, sent by
    /// the ParentDeathSignal step to the child itself: the plan is told its parent is pid 1,
    /// so the step finds it "gone") stays pending into the program on every strategy. On the
    /// clone-vfork strategy the child starts with the caller's mask (clone3 clears the
    /// handlers; nothing is blocked around it), so it must block the command's mask first.
    #[test]
    fn a_blocked_signal_sent_before_exec_stays_pending_into_the_program() {
        for strategy in [Strategy::ForkExec, Strategy::CloneVfork] {
            let (r, w) = crate::sys::parent::pipe().unwrap();
            // grep, not a shell: dash clears its signal mask as it starts.
            let mut cmd = Command::new("grep");
            cmd.args(["-E", "^(SigPnd|ShdPnd|SigBlk)", "/proc/self/status"])
                .stdout(Stdio::Fd(w.as_raw_fd()))
                .strategy(strategy)
                .signal_mask(SigSet::empty().with(Signal::USR1))
                .parent_death_signal(Signal::USR1);
            let mut plan = Plan::build(&cmd).unwrap();
            let mut faked = 0;
            for step in plan.steps.iter_mut() {
                if let Step::ParentDeathSignal { parent, .. } = step {
                    *parent = 1;
                    faked += 1;
                }
            }
            assert_eq!(faked, 1, "{strategy}: the plan has one ParentDeathSignal step");
            let mut child = spawn_planned(&mut cmd, plan).unwrap();
            drop(cmd);
            drop(w);
            let status = child.wait().unwrap();
            let mut out = String::new();
            std::fs::File::from(r).read_to_string(&mut out).unwrap();
            assert!(status.success(), "{strategy}: {status} (killed before exec?)\n{out}");
            let usr1 = 1u64 << (libc::SIGUSR1 - 1);
            let field = |name: &str| {
                let line = out.lines().find(|l| l.starts_with(name)).expect(name);
                u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
            };
            assert_eq!(field("SigBlk:") & usr1, usr1, "{strategy}: {out}");
            assert_eq!((field("SigPnd:") | field("ShdPnd:")) & usr1, usr1, "{strategy}: {out}");
        }
    }
}
