//! The rows of the benchmark: what starts the tiny child. Only [`Row::spawn`] differs between
//! rows; every method measures all rows with the same code around it.
//!
//! Later rows (the spawn server, a warm pool) are new variants here.

use std::ffi::{CStr, OsStr};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

use spawnkit::{Command, Stdio, Strategy};

use super::sys::{self, Baseline, Popen};

/// One way to start the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row {
    /// fork(), dup2, execvp (C).
    ForkExec,
    /// vfork(), dup2, execvp (C).
    VforkExec,
    /// glibc posix_spawnp with a dup2 file action (C).
    PosixSpawnp,
    /// system("tinychild"): /bin/sh -c, which searches PATH.
    System,
    /// popen("tinychild", "r"): /bin/sh -c with stdout on popen's own pipe.
    Popen,
    /// `spawnkit::Command` with this strategy.
    Spawnkit(Strategy),
}

/// Every row the Rust side measures, baselines first.
pub const ALL: [Row; 8] = [
    Row::ForkExec,
    Row::VforkExec,
    Row::PosixSpawnp,
    Row::System,
    Row::Popen,
    Row::Spawnkit(Strategy::CloneVfork),
    Row::Spawnkit(Strategy::PosixSpawn),
    Row::Spawnkit(Strategy::ForkExec),
];

impl Row {
    /// Stable key in the JSON file.
    pub fn id(self) -> &'static str {
        match self {
            Row::ForkExec => "fork_exec",
            Row::VforkExec => "vfork_exec",
            Row::PosixSpawnp => "posix_spawnp",
            Row::System => "system",
            Row::Popen => "popen",
            Row::Spawnkit(Strategy::CloneVfork) => "spawnkit_clone_vfork",
            Row::Spawnkit(Strategy::PosixSpawn) => "spawnkit_posix_spawn",
            Row::Spawnkit(Strategy::ForkExec) => "spawnkit_fork_exec",
        }
    }

    /// The name in tables and charts.
    pub fn name(self) -> String {
        match self {
            Row::ForkExec => "fork+exec".into(),
            Row::VforkExec => "vfork+exec".into(),
            Row::PosixSpawnp => "glibc posix_spawnp".into(),
            Row::System => "system()".into(),
            Row::Popen => "popen()".into(),
            Row::Spawnkit(s) if s == Strategy::default() => format!("spawnkit {s} (default)"),
            Row::Spawnkit(s) => format!("spawnkit {s}"),
        }
    }

    /// "baseline" or "spawnkit".
    pub fn kind(self) -> &'static str {
        match self {
            Row::Spawnkit(_) => "spawnkit",
            _ => "baseline",
        }
    }

    /// Whether the row copies the parent's page tables (fork): slow from a large parent.
    pub fn forks(self) -> bool {
        matches!(self, Row::ForkExec | Row::Spawnkit(Strategy::ForkExec))
    }

    /// Whether the row can keep several children running at once (system() waits).
    pub fn concurrent(self) -> bool {
        !matches!(self, Row::System | Row::Popen)
    }

    /// Start `prog` (a bare name, found along PATH) with stdout on `out_fd`. popen() ignores
    /// `out_fd`: its child writes to popen's own pipe (`Started::own_fd`).
    pub fn spawn(self, prog: &CStr, out_fd: RawFd) -> Result<Started, String> {
        match self {
            Row::ForkExec => Baseline::ForkExec.call(prog, out_fd).map(Started::Pid),
            Row::VforkExec => Baseline::VforkExec.call(prog, out_fd).map(Started::Pid),
            Row::PosixSpawnp => Baseline::PosixSpawnp.call(prog, out_fd).map(Started::Pid),
            Row::System => Baseline::System.call(prog, out_fd).map(Started::Finished),
            Row::Popen => Popen::open(prog).map(Started::Popen),
            Row::Spawnkit(strategy) => Command::new(OsStr::from_bytes(prog.to_bytes()))
                .stdout(Stdio::Fd(out_fd))
                .strategy(strategy)
                .spawn()
                .map(Started::Child)
                .map_err(|e| e.to_string()),
        }
    }
}

/// A started child, to be reaped by its owner's own means.
pub enum Started {
    /// A pid from the C baselines: waitpid.
    Pid(i32),
    /// A spawnkit child: `Child::wait` (waitid on its pidfd).
    Child(spawnkit::Child),
    /// A popen()ed child: pclose.
    Popen(Popen),
    /// system() has waited already: the wait status.
    Finished(i32),
}

impl Started {
    /// The child's pid, when it may still be running.
    pub fn pid(&self) -> Option<i32> {
        match self {
            Started::Pid(p) => Some(*p),
            Started::Child(c) => Some(c.id() as i32),
            Started::Popen(_) | Started::Finished(_) => None,
        }
    }

    /// The fd the child's output arrives on when it is not the one handed to `spawn`.
    pub fn own_fd(&self) -> Option<RawFd> {
        match self {
            Started::Popen(p) => Some(p.fd),
            _ => None,
        }
    }

    /// Reap the child; an error unless it exited with status 0.
    pub fn reap(self) -> Result<(), String> {
        let status = match self {
            Started::Pid(pid) => sys::waitpid(pid)?,
            Started::Finished(status) => status,
            Started::Popen(p) => p.close()?,
            Started::Child(mut c) => {
                let st = c.wait().map_err(|e| e.to_string())?;
                if st.success() {
                    return Ok(());
                }
                return Err(format!("the child ended with {st}"));
            }
        };
        sys::waited(status)
    }
}
