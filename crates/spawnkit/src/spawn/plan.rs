//! [`Plan`]: a [`Command`] compiled into the exact steps the child replays.
//!
//! Everything the child needs is allocated here, in the parent, before any clone: C strings
//! and pointer arrays for argv/envp, the joined PATH candidates, the fd table moves, the
//! pipes. The child only walks [`Plan::steps`] (see `sys/in_child.rs`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::Arc;

use super::command::Command;
use super::limits::{CpuList, Limit, Umask};
use super::options::{PathSearch, Signal, Stdio, Strategy};
use crate::error::{escaped, quoted, Error, Result};
use crate::steps::{FdRef, Step, MAX_FD};
use crate::sys::parent::{self, CStrArray};
use crate::sys::{environ, IdMaps, PlanView};

impl Step {
    /// The step's name in error messages, and what it worked on.
    pub(crate) fn describe(&self) -> (&'static str, String) {
        // Paths shown bare (`mount bind SRC on DST`) are escaped as `ls -b` does; see quoted.
        let show = |c: &CString| escaped(OsStr::from_bytes(c.as_bytes()));
        match self {
            Step::Unshare { flags } => {
                ("unshare", crate::isolate::Namespaces::from_bits(*flags).to_string())
            }
            Step::WriteFile { path, .. } => ("write", show(path)),
            Step::Mount { source, target, fstype, flags, .. } => {
                let f = *flags;
                let what = if f & libc::MS_REMOUNT != 0 {
                    let mut opts = vec!["remount"];
                    for (bit, name) in [
                        (libc::MS_RDONLY, "ro"),
                        (libc::MS_NOSUID, "nosuid"),
                        (libc::MS_NODEV, "nodev"),
                        (libc::MS_NOEXEC, "noexec"),
                    ] {
                        if f & bit != 0 {
                            opts.push(name);
                        }
                    }
                    opts.join(",")
                } else if f & libc::MS_BIND != 0 {
                    format!("bind {}", source.as_ref().map(show).unwrap_or_default())
                } else if f & libc::MS_PRIVATE != 0 {
                    "private propagation".to_string()
                } else {
                    fstype.as_ref().map(show).unwrap_or_default()
                };
                ("mount", format!("{what} on {}", show(target)))
            }
            Step::Sethostname { name } => ("sethostname", quoted(OsStr::from_bytes(name))),
            Step::LoopbackUp => ("ioctl SIOCSIFFLAGS", "lo up".into()),
            Step::FreshSysfs { target } => {
                ("mount", format!("sysfs on {} (read-only)", show(target)))
            }
            Step::AwaitIdMaps { .. } => ("write", "uid_map, gid_map (from the parent)".into()),
            Step::MountSetattr { target, set, .. } => {
                let mut what = vec!["remount"];
                for (bit, name) in [(1, "ro"), (2, "nosuid"), (4, "nodev"), (8, "noexec")] {
                    if set & bit != 0 {
                        what.push(name);
                    }
                }
                ("mount", format!("{} on {} (recursive)", what.join(","), show(target)))
            }
            Step::Chroot { path } => ("chroot", quoted(OsStr::from_bytes(path.as_bytes()))),
            Step::SignalDefault { .. } => ("sigaction", "SIG_DFL".into()),
            Step::Setsid => ("setsid", String::new()),
            Step::Setpgid { pgid } => ("setpgid", pgid.to_string()),
            Step::DupAway { fd, target, .. } => ("dup2", format!("fd {fd} -> {target}")),
            Step::Dup2 { from: FdRef::Fd(fd) | FdRef::Slot { fd, .. }, to } => {
                ("dup2", format!("fd {fd} -> {to}"))
            }
            Step::ClearCloexec { fd } => ("dup2", format!("fd {fd} -> {fd}")),
            Step::CloseRange { first, last } if *last == u32::MAX => {
                ("close_range", format!("fds {first}.."))
            }
            Step::CloseRange { first, last } => ("close_range", format!("fds {first}..={last}")),
            Step::Umask { mask } => {
                ("umask", Umask::new(*mask).map(|m| m.to_string()).unwrap_or_default())
            }
            Step::Setrlimit { resource, .. } => ("setrlimit", resource.name().to_string()),
            Step::RestoreFdLimit { .. } => {
                ("setrlimit", "NOFILE (the server's, given back)".into())
            }
            Step::Nice { value } => ("setpriority", format!("nice {value}")),
            Step::Affinity { cpus, .. } => ("sched_setaffinity", format!("cpus {}", join(cpus))),
            Step::Chdir { path } => ("chdir", quoted(OsStr::from_bytes(path.as_bytes()))),
            Step::Setgroups { groups, .. } => ("setgroups", format!("[{}]", join(groups))),
            Step::Setgid { gid } => ("setresgid", format!("gid {gid}")),
            Step::Setuid { uid } => ("setresuid", format!("uid {uid}")),
            Step::ParentDeathSignal { signal, .. } => (
                "prctl PR_SET_PDEATHSIG",
                Signal::new(*signal).map(|s| s.name()).unwrap_or_default(),
            ),
            Step::NoNewPrivs => ("prctl PR_SET_NO_NEW_PRIVS", String::new()),
            Step::DropBoundingCaps => ("prctl PR_CAPBSET_DROP", "every capability".into()),
            Step::ClearCaps => {
                ("capset", "no capabilities (ambient cleared), a new session keyring".into())
            }
        }
    }
}

fn join<T: ToString>(v: &[T]) -> String {
    v.iter().map(T::to_string).collect::<Vec<_>>().join(",")
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, subject) = self.describe();
        match self {
            Step::SignalDefault { set } => {
                let sigs: Vec<String> = (1..=64)
                    .filter(|n| set & (1u64 << (n - 1)) != 0)
                    .map(|n| Signal::new(n).map(|s| s.name()).unwrap_or_default())
                    .collect();
                write!(f, "sigaction {} SIG_DFL", sigs.join(","))
            }
            Step::DupAway { above, .. } => write!(f, "{name} {subject} (via a copy >= {above})"),
            Step::WriteFile { data, .. } => {
                write!(f, "{name} {subject} {}", quoted(OsStr::from_bytes(data)))
            }
            Step::ClearCloexec { fd } => write!(f, "keep fd {fd} (clear FD_CLOEXEC)"),
            Step::Setrlimit { resource, soft, hard } => {
                write!(f, "setrlimit {resource} {}:{}", Limit(*soft), Limit(*hard))
            }
            Step::RestoreFdLimit { soft, hard } => {
                let (s, h) = (Limit(*soft), Limit(*hard));
                write!(f, "setrlimit NOFILE {s}:{h} if it is {h}:{h} (the server's, given back)")
            }
            _ if subject.is_empty() => f.write_str(name),
            _ => write!(f, "{name} {subject}"),
        }
    }
}

/// What to execve: the candidates in PATH order, argv and envp.
pub(crate) struct Exec {
    pub(crate) program: OsString,
    /// The PATH that was searched, when the program has no `/`.
    pub(crate) searched: Option<OsString>,
    /// Shared with the per-thread cache of the last PATH search (see [`candidates`]).
    pub(crate) candidates: Arc<CStrArray>,
    pub(crate) argv: CStrArray,
    /// Always a copy, even when the environment is inherited unchanged: another thread's
    /// setenv may free the live `environ` array while the child is in execve (EFAULT).
    /// `std::env::vars_os` copies under std's environment lock (a process that has only
    /// ever had one thread compares in place instead: `sys::environ`). Shared with the
    /// per-thread cache of the last inherited environment when it is unchanged.
    pub(crate) envp: Arc<CStrArray>,
    /// How the child walks the candidates.
    pub(crate) search: PathSearch,
}

/// A [`Command`] compiled for one spawn: the steps, the exec candidates, and the fds made
/// for it (pipes, /dev/null). Dropping a plan closes those fds.
pub struct Plan {
    pub(crate) steps: Vec<Step>,
    pub(crate) exec: Exec,
    pub(crate) sigmask: u64,
    pub(crate) strategy: Strategy,
    pub(crate) scratch: usize,
    /// The highest fd number the child's map writes (new fds of the spawn go above it).
    pub(crate) max_target: RawFd,
    /// The parent's ends of the stdio pipes.
    pub(crate) parent_pipes: [Option<OwnedFd>; 3],
    /// Fds made only for the child (pipe ends, /dev/null, the lock file), closed in the
    /// parent after the spawn.
    pub(crate) child_ends: Vec<OwnedFd>,
    /// `CLONE_NEW*` flags for the clone.
    pub(crate) clone_flags: u64,
    /// A cgroup v2 directory for CLONE_INTO_CGROUP, and its path.
    pub(crate) cgroup: Option<(OwnedFd, String)>,
    /// The lock the child holds: taken by the parent just before the clone.
    pub(crate) lock: Option<(RawFd, crate::isolate::Lock)>,
    /// Id maps written from outside by the spawning thread, between the clone and the exec.
    pub(crate) id_maps: Option<crate::isolate::compile::IdMapJob>,
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("strategy", &self.strategy)
            .field("steps", &self.steps)
            .field("candidates", &self.candidates())
            .field("argv", &self.argv())
            .finish_non_exhaustive()
    }
}

impl fmt::Display for Plan {
    /// One line per step, as `spawnkit run --dry-run` prints it. Paths, arguments and names
    /// are exact: quoted with C escapes (`"/tmp/\377"`), or escaped as `ls -b` where they
    /// stand bare (`mount bind /a\ b on /a\ b`); see [`quoted`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "strategy {}", self.strategy)?;
        if self.clone_flags != 0 {
            let ns = crate::isolate::Namespaces::from_bits(self.clone_flags);
            writeln!(f, "clone with new namespaces: {ns}")?;
        }
        if self.cgroup.is_some() {
            writeln!(f, "clone into the cgroup (CLONE_INTO_CGROUP)")?;
        }
        if let Some((fd, lock)) = &self.lock {
            let kind = if lock.shared { "LOCK_SH" } else { "LOCK_EX" };
            writeln!(
                f,
                "flock {} {kind} (fd {fd}, in the parent, before the clone)",
                escaped(&lock.path)
            )?;
        }
        for step in &self.steps {
            writeln!(f, "{step}")?;
        }
        writeln!(f, "sigprocmask SETMASK {:#x}", self.sigmask)?;
        let show = |arr: &CStrArray| -> Vec<String> {
            arr.iter().map(|c| quoted(OsStr::from_bytes(c))).collect()
        };
        let (cands, argv) = (show(&self.exec.candidates), show(&self.exec.argv));
        write!(f, "execve {} argv [{}]", cands.join(" | "), argv.join(", "))
    }
}

/// The PATH used when the child's environment has none (glibc's and CPython's default).
pub const DEFAULT_PATH: &str = "/bin:/usr/bin";

fn os_err(step: &'static str, subject: &str, errno: i32) -> Error {
    Error::os(step, subject, errno)
}

impl Plan {
    /// What sys/ reads of this plan to spawn it (sys imports nothing from spawn/ or isolate/).
    pub(crate) fn view(&self) -> PlanView<'_> {
        PlanView {
            steps: &self.steps,
            candidates: &self.exec.candidates,
            argv: &self.exec.argv,
            envp: &self.exec.envp,
            program: &self.exec.program,
            searched: self.exec.searched.as_deref(),
            try_all: self.exec.search == PathSearch::TryAll,
            sigmask: self.sigmask,
            scratch: self.scratch,
            max_target: self.max_target,
            clone_flags: self.clone_flags,
            cgroup: self.cgroup.as_ref().map(|(fd, _)| fd.as_raw_fd()),
            id_maps: self.id_maps.as_ref().map(|job| IdMaps {
                uid_map: &job.uid_map,
                gid_map: &job.gid_map,
                go_write: job.go_write.as_raw_fd(),
            }),
        }
    }

    /// The steps, in the order the child runs them.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The paths execve will try, in order.
    pub fn candidates(&self) -> Vec<OsString> {
        self.exec.candidates.iter().map(|c| OsString::from_vec(c.to_vec())).collect()
    }

    /// argv as the child gets it.
    pub fn argv(&self) -> Vec<OsString> {
        self.exec.argv.iter().map(|c| OsString::from_vec(c.to_vec())).collect()
    }

    /// The strategy the plan is for.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The signal mask installed just before execve.
    pub fn signal_mask(&self) -> u64 {
        self.sigmask
    }

    pub(crate) fn build(cmd: &Command) -> Result<Plan> {
        let exec = build_exec(cmd)?;
        let mut plan = Plan {
            steps: Vec::new(),
            exec,
            sigmask: cmd.sigmask.bits(),
            strategy: cmd.strategy,
            scratch: 0,
            max_target: 2,
            parent_pipes: [None, None, None],
            child_ends: Vec::new(),
            clone_flags: 0,
            cgroup: None,
            lock: None,
            id_maps: None,
        };
        if !cmd.pre_exec.is_empty() && cmd.strategy != Strategy::ForkExec {
            return Err(Error::unsupported(
                "pre_exec",
                format!("a pre_exec hook needs the fork-exec strategy, not {}", cmd.strategy),
            ));
        }

        let iso = crate::isolate::compile::prepare(&cmd.isolation, cmd.strategy)?;
        plan.clone_flags = iso.clone_flags;
        plan.cgroup = iso.cgroup;
        plan.child_ends.extend(iso.child_ends);
        plan.id_maps = iso.id_maps;
        plan.steps.extend(iso.early);
        let mut keep = Vec::new();
        if let Some((fd, lock)) = iso.lock {
            // Above every fd the command maps, so no map overwrites the lock or is
            // overwritten by it; the child keeps it under that number, as flock(1)'s command.
            let min = cmd.fds.iter().map(|(t, _)| t.saturating_add(1)).max().unwrap_or(3).max(3);
            let fd = parent::move_above(fd, min).map_err(|e| Error::os("fcntl", "F_DUPFD", e))?;
            keep.push(fd.as_raw_fd());
            plan.lock = Some((fd.as_raw_fd(), lock));
            plan.child_ends.push(fd);
        }

        let mut sig_default = cmd.sig_default;
        if cmd.restore_signals {
            sig_default = sig_default.with(Signal::PIPE).with(Signal::XFSZ);
        }
        // SIGKILL and SIGSTOP always have their default action (sigaction refuses them).
        let unchangeable = (1u64 << (libc::SIGKILL - 1)) | (1u64 << (libc::SIGSTOP - 1));
        let set = sig_default.bits() & !unchangeable;
        if set != 0 {
            plan.steps.push(Step::SignalDefault { set });
        }
        if cmd.setsid {
            plan.steps.push(Step::Setsid);
        }
        if let Some(pgid) = cmd.pgid {
            if pgid < 0 {
                return Err(Error::invalid("setpgid", pgid.to_string(), "negative process group"));
            }
            plan.steps.push(Step::Setpgid { pgid });
        }
        plan.plan_fds(cmd, &keep)?;
        if let Some(mask) = cmd.umask {
            let Some(mask) = Umask::new(mask) else {
                return Err(Error::invalid("umask", format!("{mask:o}"), "not a mode (0..=0777)"));
            };
            plan.steps.push(Step::Umask { mask: mask.bits() });
        }
        for &(resource, soft, hard) in &cmd.rlimits {
            plan.steps.push(Step::Setrlimit { resource, soft, hard });
        }
        // In a process that raised its soft fd limit to its hard one (a server that owns its
        // process: `this_process::raise_fd_limit`), a child whose command sets no fd limit
        // gets the one the process was given back, if it still has the raised one; not
        // through posix_spawn, which cannot set a limit (its child keeps the raised one).
        if let Some((soft, hard)) = crate::sys::this_process::fd_limit_given() {
            if cmd.strategy != Strategy::PosixSpawn
                && !cmd.rlimits.iter().any(|(r, _, _)| *r == crate::Resource::Nofile)
            {
                plan.steps.push(Step::RestoreFdLimit { soft, hard });
            }
        }
        if let Some(inc) = cmd.nice {
            let value = parent::current_nice().saturating_add(inc).clamp(-20, 19);
            plan.steps.push(Step::Nice { value });
        }
        if let Some(cpus) = &cmd.cpus {
            let list = CpuList::new(cpus.iter().copied())
                .map_err(|e| Error::invalid("sched_setaffinity", "cpus", &e.to_string()))?;
            plan.steps.push(Step::Affinity { mask: list.mask(), cpus: list.0 });
        }
        // chroot, chdir "/", and the /proc mount; then the command's own chdir, inside.
        plan.steps.extend(iso.chroot);
        if let Some(dir) = &cmd.cwd {
            let path = CString::new(dir.as_os_str().as_bytes())
                .map_err(|_| nul_error("chdir", dir.as_os_str()))?;
            plan.steps.push(Step::Chdir { path });
        }
        if iso.drop_caps {
            // Before the credential steps, which need CAP_SETUID/CAP_SETGID (dropping from
            // the bounding set leaves the effective set alone), and after every mount.
            plan.steps.push(Step::DropBoundingCaps);
        }
        match (&cmd.groups, cmd.uid) {
            (Some(groups), _) => {
                plan.steps.push(Step::Setgroups { groups: groups.clone(), ignore_eperm: false })
            }
            (None, Some(_)) => {
                plan.steps.push(Step::Setgroups { groups: vec![], ignore_eperm: true })
            }
            (None, None) => {}
        }
        if let Some(gid) = cmd.gid {
            refuse_all_ones("setresgid", "gid", gid)?;
            plan.steps.push(Step::Setgid { gid });
        }
        if let Some(uid) = cmd.uid {
            refuse_all_ones("setresuid", "uid", uid)?;
            plan.steps.push(Step::Setuid { uid });
        }
        if iso.drop_caps {
            plan.steps.push(Step::ClearCaps);
        }
        if let Some(sig) = cmd.pdeathsig {
            // In a new pid namespace the parent is outside it: getppid() answers 0 there.
            let parent = if iso.new_pid_ns { 0 } else { parent::getpid() };
            plan.steps.push(Step::ParentDeathSignal { signal: sig.number(), parent });
        }
        if cmd.no_new_privs {
            plan.steps.push(Step::NoNewPrivs);
        }
        if plan.exec.program.is_empty() && plan.exec.search != PathSearch::TryAll {
            // execvp("") fails at once with ENOENT. Checked last, so that every other input
            // is checked first; CPython's search (TryAll) runs the child instead, whose chdir
            // fails first and whose "DIR/" candidates then say EACCES or ENOENT.
            return Err(Error::os("execve", "\"\"", libc::ENOENT));
        }
        if plan.strategy == Strategy::PosixSpawn {
            // What posix_spawn cannot do is refused here, as the spawn would refuse it, so a
            // plan that builds (a dry run) is one the spawn takes.
            if let Some(e) = crate::sys::posix::refusal(&plan.steps) {
                return Err(e);
            }
        }
        Ok(plan)
    }

    /// Turn stdio and fd maps into dup steps that survive swaps and cycles, then the
    /// close_range steps around the fds the child keeps.
    fn plan_fds(&mut self, cmd: &Command, keep: &[RawFd]) -> Result<()> {
        let mut maps: Vec<(RawFd, RawFd)> = Vec::new();
        let mut null: Option<RawFd> = None;
        let mut stderr_to_stdout = false;
        // Streams closed in the child (Stdio::Closed): closed after every dup, which may
        // read the parent's fd of that number.
        let mut closed: Vec<RawFd> = Vec::new();
        for (target, spec) in cmd.stdio.iter().enumerate() {
            let target = target as RawFd;
            let src = match spec {
                None | Some(Stdio::Inherit) => continue,
                Some(Stdio::Closed) => {
                    closed.push(target);
                    continue;
                }
                Some(Stdio::Null) => match null {
                    Some(fd) => fd,
                    None => {
                        let fd =
                            parent::dev_null().map_err(|e| os_err("open", "\"/dev/null\"", e))?;
                        let raw = fd.as_raw_fd();
                        self.child_ends.push(fd);
                        null = Some(raw);
                        raw
                    }
                },
                Some(Stdio::Pipe) => {
                    let (r, w) = parent::pipe().map_err(|e| os_err("pipe2", "", e))?;
                    let (mine, theirs) = if target == 0 { (w, r) } else { (r, w) };
                    let raw = theirs.as_raw_fd();
                    self.parent_pipes[target as usize] = Some(mine);
                    self.child_ends.push(theirs);
                    raw
                }
                Some(Stdio::File(f)) => f.as_raw_fd(),
                Some(Stdio::Owned(f)) => f.as_raw_fd(),
                Some(Stdio::Fd(fd)) => {
                    if *fd < 0 {
                        return Err(Error::invalid(
                            "dup2",
                            format!("fd {fd} -> {target}"),
                            "negative fd",
                        ));
                    }
                    *fd
                }
                Some(Stdio::Stdout) => {
                    if target != 2 {
                        return Err(Error::invalid(
                            "dup2",
                            "stdout",
                            "Stdio::Stdout is only for stderr",
                        ));
                    }
                    // Resolved below, once the fd maps (which may move fd 1) are applied.
                    stderr_to_stdout = true;
                    continue;
                }
            };
            maps.push((target, src));
        }
        for &fd in keep {
            maps.retain(|(t, _)| *t != fd);
            closed.retain(|&t| t != fd);
            maps.push((fd, fd));
        }
        for &(target, src) in &cmd.fds {
            if target < 0 || src < 0 {
                return Err(Error::invalid("dup2", format!("fd {src} -> {target}"), "negative fd"));
            }
            if target > MAX_FD && target != src {
                // The engine works above the highest target (moved copies, the lock): keep
                // that arithmetic far from i32::MAX. No fd table reaches 2^30 (fs.nr_open).
                // Keeping an fd under its own number (keep_fd, pass_fds) writes nothing there.
                return Err(Error::invalid(
                    "dup2",
                    format!("fd {src} -> {target}"),
                    "fd number above 2^30 (beyond any fd table: fs.nr_open)",
                ));
            }
            maps.retain(|(t, _)| *t != target);
            closed.retain(|&t| t != target);
            maps.push((target, src));
        }
        if stderr_to_stdout && !cmd.fds.iter().any(|(t, _)| *t == 2) {
            // 2>&1: whatever the child's fd 1 will be (the parent's fd 1 if inherited,
            // nothing if closed).
            if closed.contains(&1) {
                closed.push(2);
            } else {
                let src = maps.iter().find(|(t, _)| *t == 1).map_or(1, |(_, s)| *s);
                maps.push((2, src));
            }
        }
        // A handful of fds: a vector beats hashing.
        let targets: Vec<RawFd> = maps.iter().map(|(t, _)| *t).collect();
        // A kept fd (a map onto itself) may have any number the caller has open: it is no
        // target the engine writes, and its own fds (F_DUPFD above this) skip open ones.
        self.max_target =
            targets.iter().copied().filter(|&t| t <= MAX_FD).max().unwrap_or(2).max(2);
        let above = self.max_target.saturating_add(1);
        // A source that is also some map's target would be overwritten before it is read:
        // move it out of the way first.
        let mut from: Vec<FdRef> = Vec::with_capacity(maps.len());
        for &(target, src) in &maps {
            if src != target && targets.contains(&src) {
                let slot = self.scratch;
                self.scratch += 1;
                self.steps.push(Step::DupAway { fd: src, above, slot, target });
                from.push(FdRef::Slot { index: slot, fd: src });
            } else {
                from.push(FdRef::Fd(src));
            }
        }
        for (&(target, src), from) in maps.iter().zip(from) {
            if src == target {
                self.steps.push(Step::ClearCloexec { fd: target });
            } else {
                self.steps.push(Step::Dup2 { from, to: target });
            }
        }
        for fd in closed {
            self.steps.push(Step::CloseRange { first: fd as u32, last: fd as u32 });
        }
        if cmd.close_other_fds {
            let mut keep: Vec<u32> =
                targets.iter().filter(|&&t| t > 2).map(|&t| t as u32).collect();
            keep.sort_unstable();
            keep.dedup();
            let mut first = 3u32;
            for k in keep {
                if k > first {
                    self.steps.push(Step::CloseRange { first, last: k - 1 });
                }
                first = k + 1;
            }
            self.steps.push(Step::CloseRange { first, last: u32::MAX });
        }
        Ok(())
    }
}

/// `(uid_t)-1` and `(gid_t)-1` are not ids: setresuid/setresgid take them as "leave this one
/// unchanged", so the child would keep the parent's (root's) id without a word.
fn refuse_all_ones(step: &'static str, what: &str, id: u32) -> Result<()> {
    if id == u32::MAX {
        return Err(Error::invalid(
            step,
            format!("{what} {id}"),
            &format!("({what}_t)-1 is not an id ({step}(2) takes it as \"no change\")"),
        ));
    }
    Ok(())
}

fn nul_error(what: &'static str, s: &OsStr) -> Error {
    Error::invalid(what, quoted(s), "contains a NUL byte")
}

fn build_exec(cmd: &Command) -> Result<Exec> {
    let program = cmd.program.clone();
    let arg0 = cmd.arg0.as_deref().unwrap_or(&program);
    let bytes = cmd.args.iter().map(|a| a.len() + 1).sum::<usize>() + arg0.len() + 1;
    let mut argv = CStrArray::with_capacity(cmd.args.len() + 1, bytes);
    for a in std::iter::once(arg0).chain(cmd.args.iter().map(OsString::as_os_str)) {
        argv.push(&[a.as_bytes()]).map_err(|_| nul_error("argument", a))?;
    }
    let (envp, path) = build_env(cmd)?;
    let prog = program.as_bytes();
    let (candidates, searched) = if prog.contains(&b'/') {
        let mut one = CStrArray::with_capacity(1, prog.len() + 1);
        one.push(&[prog]).map_err(|_| nul_error("execve", &program))?;
        (Arc::new(one.finish()), None)
    } else {
        let path = path.unwrap_or_else(|| OsString::from(DEFAULT_PATH));
        (candidates(path.as_bytes(), prog).map_err(|_| nul_error("execve", &program))?, Some(path))
    };
    Ok(Exec { program, searched, candidates, argv: argv.finish(), envp, search: cmd.path_search })
}

/// The last PATH search of this thread: (PATH, program, candidates). Spawning the same
/// program with the same PATH again (a build system, a benchmark) reuses the joined list.
type SearchCache = Option<(Vec<u8>, Vec<u8>, Arc<CStrArray>)>;

thread_local! {
    static LAST_SEARCH: RefCell<SearchCache> = const { RefCell::new(None) };
}

/// The execve candidates for `prog` along `path`, in order: `dir/prog` for each entry (an
/// empty entry means the current directory: the bare name, resolved after chdir).
fn candidates(path: &[u8], prog: &[u8]) -> std::result::Result<Arc<CStrArray>, ()> {
    let hit = LAST_SEARCH
        .try_with(|c| match &*c.borrow() {
            Some((p, g, cands)) if p == path && g == prog => Some(Arc::clone(cands)),
            _ => None,
        })
        .ok()
        .flatten();
    if let Some(cands) = hit {
        return Ok(cands);
    }
    let dirs = path.split(|&b| b == b':');
    let n = dirs.clone().count();
    let mut cands = CStrArray::with_capacity(n, path.len() + n * (prog.len() + 2));
    for dir in dirs {
        let sep: &[u8] = if dir.is_empty() || dir.ends_with(b"/") { b"" } else { b"/" };
        cands.push(&[dir, sep, prog])?;
    }
    let cands = Arc::new(cands.finish());
    let _ = LAST_SEARCH
        .try_with(|c| *c.borrow_mut() = Some((path.to_vec(), prog.to_vec(), Arc::clone(&cands))));
    Ok(cands)
}

fn build_env(cmd: &Command) -> Result<(Arc<CStrArray>, Option<OsString>)> {
    if !cmd.env_clear && cmd.env.is_empty() {
        return inherited_env(cmd.base_env.as_ref());
    }
    let inherited: environ::Vars;
    let base: &[(OsString, OsString)] = match (&cmd.base_env, cmd.env_clear) {
        (_, true) => &[],
        (Some(base), false) => base,
        (None, false) => {
            inherited = environ::snapshot();
            &inherited
        }
    };
    // Changes replace in place (the first entry of a name), so the child sees the parent's
    // order, then new names in the order they were set (what CPython's env dict gives); a
    // removal leaves a hole. An index by name keeps this linear in the sizes.
    let mut slots: Vec<(&OsStr, Option<&OsStr>)> =
        base.iter().map(|(k, v)| (k.as_os_str(), Some(v.as_os_str()))).collect();
    let mut first: HashMap<&OsStr, usize> = HashMap::with_capacity(slots.len() + cmd.env.len());
    for (i, (k, _)) in slots.iter().enumerate() {
        first.entry(*k).or_insert(i);
    }
    for (k, v) in &cmd.env {
        check_env_name(k)?;
        match (first.get(k.as_os_str()), v) {
            (Some(&i), v) => slots[i].1 = v.as_deref(),
            (None, Some(v)) => {
                first.insert(k, slots.len());
                slots.push((k, Some(v)));
            }
            (None, None) => {}
        }
    }
    let vars: Vec<(&OsStr, &OsStr)> =
        slots.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect();
    let path = vars.iter().find(|(k, _)| *k == "PATH").map(|(_, v)| v.to_os_string());
    let bytes = vars.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    let mut envp = CStrArray::with_capacity(vars.len(), bytes);
    for (k, v) in &vars {
        envp.push(&[k.as_bytes(), b"=", v.as_bytes()]).map_err(|_| env_nul_error(k, v))?;
    }
    Ok((Arc::new(envp.finish()), path))
}

/// The last inherited environment of this thread, as packed for execve, its PATH, and the
/// base environment it was packed from when one was given (the same `Arc` again, as a spawn
/// server's connection environment is, is a hit without comparing a string).
type EnvCache = Option<(Arc<CStrArray>, Option<OsString>, Option<Arc<[(OsString, OsString)]>>)>;

thread_local! {
    static LAST_ENV: RefCell<EnvCache> = const { RefCell::new(None) };
}

/// The parent's environment, unchanged: `base` when the command has one, else this thread's
/// snapshot of the process's (`sys::environ::snapshot`: a copy taken with `std::env::vars_os`,
/// never the live `environ`, which another thread's setenv may free while the child is in
/// execve; in a process that has only ever had one thread, the last snapshot again when it
/// still matches in place). When it is the very `Arc` packed last time on this thread, or
/// equals that one string for string, the packed array is reused instead of built again.
fn inherited_env(
    base_arc: Option<&Arc<[(OsString, OsString)]>>,
) -> Result<(Arc<CStrArray>, Option<OsString>)> {
    let snapshot;
    let base_arc = match base_arc {
        Some(b) => b,
        None => {
            snapshot = environ::snapshot();
            &snapshot
        }
    };
    let vars: &[(OsString, OsString)] = base_arc;
    let same = |packed: &CStrArray| {
        packed.len() == vars.len()
            && packed.iter().zip(vars).all(|(kv, (k, v))| {
                let (k, v) = (k.as_bytes(), v.as_bytes());
                kv.len() == k.len() + 1 + v.len()
                    && kv.starts_with(k)
                    && kv[k.len()] == b'='
                    && kv.ends_with(v)
            })
    };
    // The PATH a fresh build would find in `vars`: equal strings do not mean equal pairs (a
    // base's name may hold '=': ("PATH=/a", "b") packs as "PATH=/a=b" too, with no PATH).
    let path_of = || vars.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone());
    let hit = LAST_ENV
        .try_with(|c| match &*c.borrow() {
            Some((packed, path, from)) => {
                let again = from.as_ref().is_some_and(|a| Arc::ptr_eq(a, base_arc));
                if again {
                    Some((Arc::clone(packed), path.clone()))
                } else {
                    same(packed).then(|| (Arc::clone(packed), path_of()))
                }
            }
            _ => None,
        })
        .ok()
        .flatten();
    if let Some(hit) = hit {
        return Ok(hit);
    }
    let bytes = vars.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    let mut envp = CStrArray::with_capacity(vars.len(), bytes);
    let mut path = None;
    for (k, v) in vars {
        // A base environment is taken as the parent's is: names are not checked (an environ
        // entry may start with '='), but a NUL cannot be passed.
        envp.push(&[k.as_bytes(), b"=", v.as_bytes()]).map_err(|_| env_nul_error(k, v))?;
        if path.is_none() && k == "PATH" {
            path = Some(v.clone());
        }
    }
    let envp = Arc::new(envp.finish());
    let from = Some(Arc::clone(base_arc));
    let _ = LAST_ENV.try_with(|c| *c.borrow_mut() = Some((Arc::clone(&envp), path.clone(), from)));
    Ok((envp, path))
}

/// A variable name must be non-empty and have no '='.
fn check_env_name(k: &OsStr) -> Result<()> {
    let kb = k.as_bytes();
    if kb.is_empty() || kb.contains(&b'=') {
        return Err(Error::invalid(
            "environment",
            quoted(k),
            "a variable name must be non-empty and have no '='",
        ));
    }
    Ok(())
}

fn env_nul_error(k: &OsStr, v: &OsStr) -> Error {
    let mut shown = k.to_owned();
    shown.push("=");
    shown.push(v);
    nul_error("environment", &shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envp_of(cmd: &Command) -> Vec<Vec<u8>> {
        cmd.plan().unwrap().exec.envp.iter().map(<[u8]>::to_vec).collect()
    }

    /// The per-thread cache of the inherited environment never serves a stale copy.
    #[test]
    fn inherited_environment_follows_every_change() {
        let key = "SPAWNKIT_PLAN_CACHE_TEST";
        let cmd = Command::new("true");
        let has = |envp: &[Vec<u8>], kv: &[u8]| envp.iter().any(|e| e == kv);
        let first = envp_of(&cmd);
        assert_eq!(first, envp_of(&cmd), "unchanged environment, same strings");
        std::env::set_var(key, "one");
        assert!(has(&envp_of(&cmd), b"SPAWNKIT_PLAN_CACHE_TEST=one"));
        std::env::set_var(key, "two");
        let envp = envp_of(&cmd);
        assert!(has(&envp, b"SPAWNKIT_PLAN_CACHE_TEST=two"));
        assert!(!has(&envp, b"SPAWNKIT_PLAN_CACHE_TEST=one"));
        std::env::remove_var(key);
        assert!(!envp_of(&cmd).iter().any(|e| e.starts_with(key.as_bytes())));
    }

    /// A base environment given again (the same `Arc`, as a spawn server's connection
    /// environment is) is packed once; another one, even of equal strings, is compared,
    /// and one that differs is packed anew.
    #[test]
    fn a_base_environment_given_again_is_packed_once() {
        let mut cmd = Command::new("true");
        cmd.base_env([("A", "1"), ("PATH", "/bin")]);
        let again = cmd.try_clone().unwrap(); // shares the base's Arc
        let first = cmd.plan().unwrap().exec.envp;
        assert!(Arc::ptr_eq(&first, &again.plan().unwrap().exec.envp), "the same base: reused");
        let mut equal = Command::new("true");
        equal.base_env([("A", "1"), ("PATH", "/bin")]);
        assert!(Arc::ptr_eq(&first, &equal.plan().unwrap().exec.envp), "equal strings: reused");
        let mut other = Command::new("true");
        other.base_env([("A", "2"), ("PATH", "/bin")]);
        assert_eq!(envp_of(&other), [b"A=2".to_vec(), b"PATH=/bin".to_vec()]);
        assert_eq!(envp_of(&cmd), [b"A=1".to_vec(), b"PATH=/bin".to_vec()]);
    }

    /// An environment packed from a base whose name holds '=' gives the same strings as one
    /// whose value does, but not the same PATH: the cache hit takes the PATH of the pairs
    /// it is given, not of the ones it was packed from.
    #[test]
    fn equal_strings_from_other_pairs_keep_their_own_path() {
        let mut odd = Command::new("x");
        odd.base_env([("PATH=/nowhere", "y")]);
        let odd = odd.plan().unwrap();
        assert!(!odd.candidates().contains(&OsString::from("/nowhere=y/x")));
        let mut plain = Command::new("x");
        plain.base_env([("PATH", "/nowhere=y")]);
        let plain = plain.plan().unwrap();
        assert!(Arc::ptr_eq(&odd.exec.envp, &plain.exec.envp), "the same strings: reused");
        assert_eq!(plain.candidates(), ["/nowhere=y/x"]);
    }

    /// The per-thread cache of the last PATH search is keyed on PATH and the program.
    #[test]
    fn path_candidates_follow_path_and_program() {
        let cands = |path: &str, prog: &str| {
            Command::new(prog).env("PATH", path).plan().unwrap().candidates()
        };
        assert_eq!(cands("/a:/b/", "x"), ["/a/x", "/b/x"]);
        assert_eq!(cands("/a:/b/", "x"), ["/a/x", "/b/x"]);
        assert_eq!(cands("/a:/b/", "y"), ["/a/y", "/b/y"]);
        assert_eq!(cands("/c::/d", "y"), ["/c/y", "y", "/d/y"]);
    }
}
