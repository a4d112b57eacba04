//! The tokio face (cargo feature `tokio`): spawn with the engine, wait on the pidfd through
//! [`AsyncFd`]: no SIGCHLD handler, no reaper thread, no orphan queue polling `waitpid`.
//!
//! ```no_run
//! # async fn f() -> spawnkit::Result<()> {
//! use spawnkit::tokio::CommandExt;
//! use spawnkit::{Command, Stdio};
//!
//! let mut child = Command::new("sh").args(["-c", "echo hi"]).stdout(Stdio::Pipe).spawn_async()?;
//! let out = child.wait_with_output().await?;
//! assert_eq!(out.stdout, b"hi\n");
//! # Ok(()) }
//! ```
//!
//! The [`Child`] has tokio's `Child` shape: [`wait`](Child::wait), [`try_wait`](Child::try_wait),
//! [`kill`](Child::kill), [`start_kill`](Child::start_kill), [`id`](Child::id), the pipes as
//! async [`ChildStdin`]/[`ChildStdout`]/[`ChildStderr`], [`wait_with_output`](Child::wait_with_output)
//! and `kill_on_drop` (from [`Command::kill_on_drop`]). The spawn itself is the engine's
//! (clone-vfork: its cost does not grow with the caller's memory), done on the calling task.

use std::io;
use std::os::fd::OwnedFd;

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::AsyncReadExt;
use ::tokio::io::Interest;
use ::tokio::net::unix::pipe;

use crate::error::{Error, Result};
use crate::{Command, ExitStatus, Output, Signal};

mod remote;
pub use remote::Client;

/// The child's stdin: an async pipe writer.
pub type ChildStdin = pipe::Sender;
/// The child's stdout: an async pipe reader.
pub type ChildStdout = pipe::Receiver;
/// The child's stderr: an async pipe reader.
pub type ChildStderr = pipe::Receiver;

/// Async spawning for [`Command`].
pub trait CommandExt {
    /// Start the child (on this task: the spawn is one local clone-vfork) and return a
    /// handle that waits on its pidfd. Must be called inside a tokio runtime with I/O enabled.
    fn spawn_async(&mut self) -> Result<Child>;

    /// Start the child without holding this task's thread while it execs: the clone happens
    /// here (no `CLONE_VFORK`: [`Command::start`]), then the future (which holds no borrow
    /// of the command: it can be handed to `tokio::spawn`) waits for the exec through the reactor and resolves to the child, or to the error of the step that failed
    /// (the same errors [`spawn_async`](CommandExt::spawn_async) returns). Many children can
    /// be starting at once on one thread. Must be polled inside a tokio runtime with I/O
    /// enabled; dropped before it resolves, it hands the child to the runtime's blocking pool,
    /// which waits for its exec (a few steps) and then drops it as a dropped [`Child`] is: the
    /// runtime's thread never waits for it.
    fn start_async(
        &mut self,
    ) -> impl std::future::Future<Output = Result<Child>> + Send + use<Self>;

    /// Start the child and wait for it (stdin, stdout and stderr as set, inherited if not).
    fn status_async(&mut self) -> impl std::future::Future<Output = Result<ExitStatus>> + Send;

    /// Start the child with stdin from /dev/null and stdout and stderr captured (unless set),
    /// and collect its output.
    fn output_async(&mut self) -> impl std::future::Future<Output = Result<Output>> + Send;
}

impl CommandExt for Command {
    fn spawn_async(&mut self) -> Result<Child> {
        Child::new(self.spawn()?)
    }

    fn start_async(&mut self) -> impl std::future::Future<Output = Result<Child>> + Send + use<> {
        use crate::sys::reactor::{register_start, PendingStart};
        let starting = self.start().map(|s| PendingStart(Some(s)));
        async move {
            let mut pending = starting?;
            if pending.0.as_ref().is_some_and(|s| s.fd().is_none()) {
                return Child::new(pending.0.take().expect("checked").finish()?);
            }
            let fd = register_start(pending).map_err(|e| io_error("register start", e))?;
            // Readable means EOF: the child has exec'd or exited (it never writes).
            let _ = fd.readable().await.map_err(|e| io_error("poll start", e))?;
            let starting = fd.into_inner().0.take().expect("still pending");
            Child::new(starting.finish()?)
        }
    }

    fn status_async(&mut self) -> impl std::future::Future<Output = Result<ExitStatus>> + Send {
        let child = self.spawn_async();
        async move { child?.wait().await }
    }

    fn output_async(&mut self) -> impl std::future::Future<Output = Result<Output>> + Send {
        let mut filled = [false; 3];
        for (i, default) in
            [(0, crate::Stdio::Null), (1, crate::Stdio::Pipe), (2, crate::Stdio::Pipe)]
        {
            if self.stdio[i].is_none() {
                self.stdio[i] = Some(default);
                filled[i] = true;
            }
        }
        let child = self.spawn_async();
        for (slot, filled) in self.stdio.iter_mut().zip(filled) {
            if filled {
                *slot = None;
            }
        }
        async move { child?.wait_with_output().await }
    }
}

/// A running child, waited for through its pidfd (readable once it exits).
pub struct Child {
    inner: crate::Child,
    /// The child's stdin, when piped. Dropped (closed) by `wait`.
    pub stdin: Option<ChildStdin>,
    /// The child's stdout, when piped.
    pub stdout: Option<ChildStdout>,
    /// The child's stderr, when piped.
    pub stderr: Option<ChildStderr>,
}

fn io_error(step: &'static str, e: io::Error) -> Error {
    Error::os(step, "", e.raw_os_error().unwrap_or(libc::EIO))
}

impl Child {
    /// An async handle for a child started by the engine (its pipes become async pipes).
    pub fn new(mut inner: crate::Child) -> Result<Child> {
        let stdin = inner.stdin.take().map(|f| pipe::Sender::from_owned_fd(OwnedFd::from(f)));
        let stdout = inner.stdout.take().map(|f| pipe::Receiver::from_owned_fd(OwnedFd::from(f)));
        let stderr = inner.stderr.take().map(|f| pipe::Receiver::from_owned_fd(OwnedFd::from(f)));
        Ok(Child {
            inner,
            stdin: stdin.transpose().map_err(|e| io_error("pipe", e))?,
            stdout: stdout.transpose().map_err(|e| io_error("pipe", e))?,
            stderr: stderr.transpose().map_err(|e| io_error("pipe", e))?,
        })
    }

    /// The process id, or `None` once the child has been waited for (as tokio's).
    pub fn id(&self) -> Option<u32> {
        self.inner.status().is_none().then(|| self.inner.id())
    }

    /// The sync handle (its pidfd, `send_signal`, ...).
    pub fn inner(&self) -> &crate::Child {
        &self.inner
    }

    /// Send `sig` through the pidfd (never a recycled pid).
    pub fn send_signal(&mut self, sig: Signal) -> Result<()> {
        self.inner.send_signal(sig)
    }

    /// Wait for the child to exit: the pidfd's readiness, then one `waitid`. Closes stdin
    /// first, so a child reading it to the end cannot deadlock the wait (as tokio does).
    /// Cancel-safe: dropping the future leaves the child as it was. The pidfd is registered
    /// with the reactor of the runtime that waits (a child spawned in one runtime can be
    /// waited for in another).
    pub async fn wait(&mut self) -> Result<ExitStatus> {
        drop(self.stdin.take());
        if let Some(status) = self.inner.try_wait()? {
            return Ok(status);
        }
        let dup = self.inner.pidfd().try_clone_to_owned().map_err(|e| io_error("dup pidfd", e))?;
        let pidfd: AsyncFd<OwnedFd> = crate::sys::reactor::register(dup, Interest::READABLE)
            .map_err(|e| io_error("register pidfd", e))?;
        loop {
            let mut guard = pidfd.readable().await.map_err(|e| io_error("poll pidfd", e))?;
            if let Some(status) = self.inner.try_wait()? {
                return Ok(status);
            }
            guard.clear_ready();
        }
    }

    /// The exit status if the child has exited (reaping it), else `None`; never blocks.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        self.inner.try_wait()
    }

    /// Send SIGKILL (through the pidfd) without waiting. A child already reaped is not an
    /// error.
    pub fn start_kill(&mut self) -> Result<()> {
        if self.inner.status().is_some() {
            return Ok(());
        }
        self.inner.kill()
    }

    /// SIGKILL the child and wait for it.
    pub async fn kill(&mut self) -> Result<()> {
        self.start_kill()?;
        self.wait().await.map(drop)
    }

    /// Close stdin, read stdout and stderr to the end while waiting, and return all of it.
    pub async fn wait_with_output(mut self) -> Result<Output> {
        drop(self.stdin.take());
        async fn read(pipe: Option<ChildStdout>) -> Result<Vec<u8>> {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                p.read_to_end(&mut buf).await.map_err(|e| io_error("read", e))?;
            }
            Ok(buf)
        }
        let (out, err) = (self.stdout.take(), self.stderr.take());
        let (stdout, stderr, status) = ::tokio::try_join!(read(out), read(err), self.wait())?;
        Ok(Output { status, stdout, stderr })
    }
}

impl Drop for Child {
    /// Never blocks: a child still running is killed first if the command asked for
    /// `kill_on_drop`, and left to the orphan list, which later spawns (and
    /// [`reap_orphans`](crate::reap_orphans)) reap.
    fn drop(&mut self) {
        if self.inner.status().is_some() || matches!(self.inner.try_wait(), Ok(Some(_))) {
            return;
        }
        if self.inner.kills_on_drop() {
            let _ = self.inner.kill();
        }
        self.inner.orphan();
    }
}

/// Spawn every command and return their async children in order, a failed spawn as its own
/// error. The children are cloned ahead ([`Command::start`]: no wait for an exec), at most
/// [`START_WINDOW`] not yet collected at a time, so they exec at the same time on the other
/// CPUs instead of one after the other (and a long list holds no more than that many
/// half-started children, fds and stacks at once).
pub fn spawn_many<'a>(commands: impl IntoIterator<Item = &'a mut Command>) -> Vec<Result<Child>> {
    let collect = |s: Result<crate::Starting>| Child::new(s?.finish()?);
    let mut out = Vec::new();
    let mut window = std::collections::VecDeque::new();
    for c in commands {
        if window.len() == START_WINDOW {
            out.extend(window.pop_front().map(collect));
        }
        let mut started = c.start();
        let failed = match &started {
            Ok(s) => s.failed(),
            Err(e) => Some(e),
        };
        if !window.is_empty() && failed.is_some_and(out_of_fds) {
            // Each start not yet collected holds a pipe besides its pidfd: collect them (a
            // child then holds its pidfd only) and try again, as one spawn after another
            // would have found the fds.
            out.extend(window.drain(..).map(collect));
            started = c.start();
        }
        window.push_back(started);
    }
    out.extend(window.into_iter().map(collect));
    out
}

/// A start that failed for want of fds in this process (not in the child, whose steps, a
/// `pre_exec` hook among them, must not run twice).
fn out_of_fds(e: &Error) -> bool {
    !e.is_in_child() && matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// At most this many children of a [`spawn_many`] are started and not yet collected.
pub const START_WINDOW: usize = 64;
