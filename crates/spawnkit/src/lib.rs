//! spawnkit: launch Linux processes fast and safely.
//!
//! ```no_run
//! use spawnkit::{Command, Resource, Stdio};
//!
//! let out = Command::new("sh")
//!     .args(["-c", "ulimit -n; pwd"])
//!     .current_dir("/tmp")
//!     .rlimit(Resource::Nofile, 64, 64)
//!     .stdout(Stdio::Pipe)
//!     .output()?;
//! assert_eq!(out.stdout, b"64\n/tmp\n");
//! # Ok::<(), spawnkit::Error>(())
//! ```
//!
//! A [`Command`] compiles to a [`Plan`]: the exact list of [`Step`]s the child replays with
//! raw system calls between clone and execve. The default [`Strategy::CloneVfork`] starts the
//! child with `clone3(CLONE_VM | CLONE_VFORK | CLONE_PIDFD)` on a stack of its own, so the cost
//! does not grow with the parent's memory and threads in the parent are safe. Errors name the
//! step that failed: `chdir "/nope": No such file or directory (os error 2)`.

#![deny(unsafe_code)]

mod error;
mod isolate;
mod lock_wait;
mod orphans;
pub mod process;
pub mod serve;
mod signals;
mod spawn;
mod steps;
#[allow(unsafe_code)]
mod sys;
#[cfg(feature = "tokio")]
pub mod tokio;
mod users;

pub use error::{quoted, Error, ErrorKind, Result};
pub use isolate::{IdMap, Lock, Namespaces, PrivateTmp, TmpOptions, UserMap};
pub use serve::{Client, PrivateServer, Server, ServerOptions};
pub use signals::{ReceivedSignal, SignalFd};
pub use spawn::command::Command;
pub use spawn::engine::Starting;
pub use spawn::handle::{Child, ExitStatus, Output};
pub use spawn::limits::{CpuList, Limit, ParseValueError, Rlimit, Umask};
pub use spawn::options::{PathSearch, Resource, SigSet, Signal, Stdio, Strategy, RLIM_INFINITY};
pub use spawn::plan::{Plan, DEFAULT_PATH};
pub use steps::{FdRef, Step};
pub use users::{Group, LookupError, ParseIdError, User};

/// How many times this process has copied its environment for a spawn that inherits it
/// (`std::env::vars_os`, under std's lock) rather than reusing the last copy after comparing
/// in place (a process that has only ever had one thread). For tests.
#[doc(hidden)]
pub fn env_copies() -> usize {
    sys::environ::copies()
}

/// Reap children whose [`Child`] was dropped while they ran and that have exited since.
/// Returns how many such children still run. Every spawn does this too.
pub fn reap_orphans() -> usize {
    orphans::reap()
}

/// Whether spawns in this process use clone3 (false once clone3 was refused and the engine
/// fell back to clone).
pub fn uses_clone3() -> bool {
    sys::clone::clone3_in_use()
}

/// Make the clone-vfork strategy use clone(2) from now on, as it does by itself once clone3 is
/// refused (for tests and for callers that know a seccomp filter denies clone3 with an
/// unusual errno).
pub fn disable_clone3() {
    sys::clone::disable_clone3()
}
