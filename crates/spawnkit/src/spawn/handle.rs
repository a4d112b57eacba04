//! [`Child`]: a started process, held by its pidfd.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::sys::pidfd::{self, Ended};
use crate::Signal;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitStatus {
    /// It called exit with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled { signal: i32, core_dumped: bool },
}

impl ExitStatus {
    /// The exit code, if it exited.
    pub fn code(self) -> Option<i32> {
        match self {
            ExitStatus::Exited(c) => Some(c),
            ExitStatus::Signaled { .. } => None,
        }
    }

    /// The signal that killed it, if one did.
    pub fn signal(self) -> Option<i32> {
        match self {
            ExitStatus::Signaled { signal, .. } => Some(signal),
            ExitStatus::Exited(_) => None,
        }
    }

    /// Exited with code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Exited(0)
    }

    /// The status as a shell reports it: the code, or 128 + the signal number.
    pub fn shell_code(self) -> i32 {
        match self {
            ExitStatus::Exited(c) => c,
            ExitStatus::Signaled { signal, .. } => 128 + signal,
        }
    }

    /// The equivalent `std::process::ExitStatus`.
    pub fn to_std(self) -> std::process::ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        match self {
            ExitStatus::Exited(c) => ExitStatusExt::from_raw((c & 0xff) << 8),
            ExitStatus::Signaled { signal, core_dumped } => {
                ExitStatusExt::from_raw(signal | if core_dumped { 0x80 } else { 0 })
            }
        }
    }
}

impl From<Ended> for ExitStatus {
    fn from(e: Ended) -> ExitStatus {
        match e {
            Ended::Exited(c) => ExitStatus::Exited(c),
            Ended::Signaled { signal, core } => ExitStatus::Signaled { signal, core_dumped: core },
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Exited(c) => write!(f, "exit status: {c}"),
            ExitStatus::Signaled { signal, core_dumped } => {
                let name = Signal::new(*signal).map(|s| s.name()).unwrap_or_default();
                write!(
                    f,
                    "signal: {signal} ({name}){}",
                    if *core_dumped { " (core dumped)" } else { "" }
                )
            }
        }
    }
}

/// Everything a finished child wrote, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

#[derive(Default)]
struct Comm {
    started: bool,
    input: Vec<u8>,
    written: usize,
    out: Vec<u8>,
    err: Vec<u8>,
}

/// A started child process, held by a pidfd, so signals and waits can never reach a
/// recycled pid.
///
/// **Dropping** a `Child` that has not been waited for never leaves a zombie unnoticed: if it
/// has exited it is reaped on the spot; if it still runs it is killed and reaped when the
/// command asked for [`kill_on_drop`](crate::Command::kill_on_drop), and otherwise handed to
/// a process-wide orphan list that every later spawn (and [`reap_orphans`](crate::reap_orphans))
/// reaps without blocking once it exits. Pipes are closed on drop.
pub struct Child {
    pid: i32,
    /// Always `Some` (taken only by [`into_pidfd`](Child::into_pidfd), which consumes the
    /// `Child`): read through [`Child::fd`].
    pidfd: Option<OwnedFd>,
    /// The parent's end of the child's stdin, when it is [`Stdio::Pipe`](crate::Stdio::Pipe).
    pub stdin: Option<File>,
    /// The parent's end of the child's stdout, when piped.
    pub stdout: Option<File>,
    /// The parent's end of the child's stderr, when piped.
    pub stderr: Option<File>,
    status: Option<ExitStatus>,
    kill_on_drop: bool,
    /// Handed over with [`into_pidfd`](Child::into_pidfd): Drop leaves the child alone.
    detached: bool,
    /// Started by a spawn server: not our child. Its status comes from the pidfd
    /// (`PIDFD_GET_INFO`) once it has been reaped; we never reap it.
    remote: bool,
    /// For a remote child on a kernel without `PIDFD_INFO_EXIT`: its status comes in an Exit
    /// frame on the client's connection.
    exit_watch: Option<crate::serve::client::ExitWatch>,
    comm: Comm,
}

impl fmt::Debug for Child {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Child").field("pid", &self.pid).field("status", &self.status).finish()
    }
}

fn wait_error(pid: i32, e: i32) -> Error {
    let err = Error::os("waitid", format!("pid {pid}"), e);
    if e == libc::ECHILD {
        err.with_reason(
            "the child was reaped by someone else (a waitpid(-1) or SIGCHLD set to SIG_IGN?)",
        )
    } else {
        err
    }
}

fn timeout_error(step: &'static str, pid: i32, t: Duration) -> Error {
    Error::new(ErrorKind::Timeout, step, format!("pid {pid}"))
        .with_reason(format!("timed out after {:.3} s", t.as_secs_f64()))
}

fn remaining_ms(deadline: Option<Instant>) -> Option<i32> {
    deadline.map(|d| {
        let left = d.saturating_duration_since(Instant::now());
        // Round up so a short remaining time still waits instead of spinning.
        left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
    })
}

impl Child {
    /// Whether dropping this handle unwaited kills and reaps the child
    /// ([`Command::kill_on_drop`](crate::Command::kill_on_drop)).
    pub fn kills_on_drop(&self) -> bool {
        self.kill_on_drop
    }

    pub(crate) fn new(
        pid: i32,
        pidfd: OwnedFd,
        stdin: Option<OwnedFd>,
        stdout: Option<OwnedFd>,
        stderr: Option<OwnedFd>,
        kill_on_drop: bool,
    ) -> Child {
        Child {
            pid,
            pidfd: Some(pidfd),
            stdin: stdin.map(File::from),
            stdout: stdout.map(File::from),
            stderr: stderr.map(File::from),
            status: None,
            kill_on_drop,
            detached: false,
            remote: false,
            exit_watch: None,
            comm: Comm::default(),
        }
    }

    /// A child a spawn server started for us: same API, but waits read its exit status from
    /// the pidfd after the server reaped it (see [`Client`](crate::Client)).
    /// A handle for a child of another process (a spawn server, the Python zygote), known
    /// by its pid and a pidfd for it: waits and signals go through the pidfd, the exit
    /// status comes from the pidfd's exit info (Linux 6.15+) once its parent has reaped it.
    pub fn from_remote_pidfd(pid: u32, pidfd: OwnedFd) -> Child {
        Child::new_remote(pid as i32, pidfd, [None, None, None], false)
    }

    pub(crate) fn new_remote(
        pid: i32,
        pidfd: OwnedFd,
        pipes: [Option<OwnedFd>; 3],
        kill_on_drop: bool,
    ) -> Child {
        let [stdin, stdout, stderr] = pipes;
        let mut child = Child::new(pid, pidfd, stdin, stdout, stderr, kill_on_drop);
        child.remote = true;
        child
    }

    /// Whether a spawn server started this child (its parent is the server, not us).
    pub fn is_remote(&self) -> bool {
        self.remote
    }

    /// Whether this child's end is known when its pidfd hangs up (`POLLHUP`) rather than
    /// when it turns readable (`POLLIN`): a remote child whose status comes from the pidfd
    /// (`PIDFD_INFO_EXIT`, recorded at the server's reap, Linux 6.15+), which is readable
    /// from its exit on, before that reap. Not one whose status comes in an Exit frame (a
    /// kernel without `PIDFD_INFO_EXIT`, where a pidfd may never hang up): wait for it as
    /// for a local child. An event loop watching the pidfd of such a child waits for the
    /// hang-up (poll with no event asked).
    pub fn ends_at_hangup(&self) -> bool {
        self.remote && self.exit_watch.is_none()
    }

    /// Take the exit status from the client's Exit frames instead of the pidfd.
    pub(crate) fn set_exit_watch(&mut self, watch: crate::serve::client::ExitWatch) {
        self.exit_watch = Some(watch);
    }

    /// A remote child's status: `Ok(None)` while it runs or the server has not reaped it yet.
    fn remote_status(&mut self) -> Result<Option<ExitStatus>> {
        if let Some(watch) = &self.exit_watch {
            // Only what has arrived: a deadline already past.
            self.status = watch.wait(self.pid, Some(Instant::now()))?;
            return Ok(self.status);
        }
        match pidfd::exit_info_settled(self.fd()) {
            Ok(ended) => {
                self.status = ended.map(ExitStatus::from);
                Ok(self.status)
            }
            Err(e) => Err(Error::os("ioctl", format!("PIDFD_GET_INFO of pid {}", self.pid), e)
                .with_kind(ErrorKind::Unsupported)
                .with_reason(format!(
                    "the exit status of a child started by a spawn server is read from its \
                     pidfd (PIDFD_INFO_EXIT, Linux 6.15+): {}",
                    io::Error::from_raw_os_error(e)
                ))),
        }
    }

    /// Wait for a remote child until `deadline`: poll its pidfd for POLLHUP, which the kernel
    /// raises once the process is reaped (by the server), when its exit status is recorded.
    fn remote_wait(&mut self, deadline: Option<Instant>) -> Result<Option<ExitStatus>> {
        if let Some(watch) = &self.exit_watch {
            self.status = watch.wait(self.pid, deadline)?;
            return Ok(self.status);
        }
        loop {
            if let Some(s) = self.remote_status()? {
                return Ok(Some(s));
            }
            let ms = remaining_ms(deadline).unwrap_or(-1);
            if ms == 0 {
                return Ok(None);
            }
            // events 0: POLLHUP is always reported; POLLIN (exited, not reaped) is not wanted.
            let mut fds = [libc::pollfd { fd: self.fd().as_raw_fd(), events: 0, revents: 0 }];
            match pidfd::poll(&mut fds, ms) {
                Ok(0) => return self.remote_status(),
                Ok(_) => {
                    if let Some(s) = self.remote_status()? {
                        return Ok(Some(s));
                    }
                    // POLLHUP without an exit record: a kernel before 6.15.
                    return Err(Error::unsupported(
                        "wait",
                        "the remote child was reaped but the kernel recorded no exit status \
                         (PIDFD_INFO_EXIT needs Linux 6.15+)",
                    ));
                }
                Err(libc::EINTR) => continue,
                Err(e) => return Err(Error::os("poll", format!("pidfd of pid {}", self.pid), e)),
            }
        }
    }

    /// The child's pid (in the caller's pid namespace).
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// The pidfd: poll it for POLLIN to learn the child exited.
    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.fd()
    }

    /// The exit status, if the child has been reaped already.
    pub fn status(&self) -> Option<ExitStatus> {
        self.status
    }

    /// Send `sig` through the pidfd. A no-op once the child has been reaped.
    pub fn send_signal(&mut self, sig: Signal) -> Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        match pidfd::send_signal(self.fd(), sig.number()) {
            Ok(()) | Err(libc::ESRCH) => Ok(()),
            Err(e) => {
                Err(Error::os("pidfd_send_signal", format!("{} to pid {}", sig, self.pid), e))
            }
        }
    }

    /// SIGKILL.
    pub fn kill(&mut self) -> Result<()> {
        self.send_signal(Signal::KILL)
    }

    /// Close stdin (so the child sees EOF) and wait for the child to exit.
    pub fn wait(&mut self) -> Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        drop(self.stdin.take());
        if self.remote {
            return self.remote_wait(None)?.ok_or_else(|| wait_error(self.pid, libc::ECHILD));
        }
        let ended = pidfd::wait(self.fd(), false).map_err(|e| wait_error(self.pid, e))?;
        let status = ExitStatus::from(ended.ok_or_else(|| wait_error(self.pid, libc::ECHILD))?);
        self.status = Some(status);
        Ok(status)
    }

    /// Reap the child if it has exited; `None` if it still runs.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        if self.remote {
            return self.remote_status();
        }
        let ended = pidfd::wait(self.fd(), true).map_err(|e| wait_error(self.pid, e))?;
        self.status = ended.map(ExitStatus::from);
        Ok(self.status)
    }

    /// Wait at most `timeout` (polling the pidfd); `None` if it still runs then.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        self.wait_deadline(Some(Instant::now() + timeout))
    }

    fn wait_deadline(&mut self, deadline: Option<Instant>) -> Result<Option<ExitStatus>> {
        if self.status.is_some() {
            return Ok(self.status);
        }
        if self.remote {
            return self.remote_wait(deadline);
        }
        loop {
            let ms = remaining_ms(deadline).unwrap_or(-1);
            let mut fds =
                [libc::pollfd { fd: self.fd().as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            match pidfd::poll(&mut fds, ms) {
                Ok(0) => return self.try_wait(),
                Ok(_) => return self.try_wait(),
                Err(libc::EINTR) => continue,
                Err(e) => return Err(Error::os("poll", format!("pidfd of pid {}", self.pid), e)),
            }
        }
    }

    /// What [`communicate`](Child::communicate) has read so far (stdout, stderr): after a
    /// timeout this is the partial output; a later `communicate` call continues from it.
    pub fn partial_output(&self) -> (&[u8], &[u8]) {
        (&self.comm.out, &self.comm.err)
    }

    /// Write `input` to stdin (then close it), read stdout and stderr to EOF, and wait, all
    /// in one poll(2) loop: no threads, no deadlock however large the data either way.
    ///
    /// On timeout it returns an error of kind [`Timeout`](ErrorKind::Timeout) and keeps
    /// everything read so far ([`partial_output`](Child::partial_output)); call it again
    /// (the input is remembered from the first call) to go on.
    pub fn communicate(
        &mut self,
        input: Option<&[u8]>,
        timeout: Option<Duration>,
    ) -> Result<Output> {
        let deadline = timeout.map(|t| Instant::now() + t);
        if !self.comm.started {
            self.comm.started = true;
            self.comm.input = input.unwrap_or_default().to_vec();
            if self.comm.input.is_empty() {
                drop(self.stdin.take());
            }
            for f in [&self.stdin, &self.stdout, &self.stderr].into_iter().flatten() {
                crate::sys::parent::set_nonblocking(f)
                    .map_err(|e| Error::os("fcntl", "O_NONBLOCK", e))?;
            }
        }
        let mut buf = vec![0u8; 64 * 1024];
        while self.stdin.is_some() || self.stdout.is_some() || self.stderr.is_some() {
            // A chatty child keeps poll() from ever timing out: check the deadline each round.
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(timeout_error("communicate", self.pid, timeout.unwrap_or_default()));
            }
            let mut fds: Vec<libc::pollfd> = Vec::with_capacity(3);
            let slots = [
                (self.stdin.as_ref(), libc::POLLOUT),
                (self.stdout.as_ref(), libc::POLLIN),
                (self.stderr.as_ref(), libc::POLLIN),
            ];
            let mut which = Vec::with_capacity(3);
            for (i, (f, ev)) in slots.into_iter().enumerate() {
                if let Some(f) = f {
                    fds.push(libc::pollfd { fd: f.as_raw_fd(), events: ev, revents: 0 });
                    which.push(i);
                }
            }
            let ms = remaining_ms(deadline).unwrap_or(-1);
            match pidfd::poll(&mut fds, ms) {
                Ok(0) => {
                    return Err(timeout_error("communicate", self.pid, timeout.unwrap_or_default()))
                }
                Ok(_) => {}
                Err(libc::EINTR) => continue,
                Err(e) => return Err(Error::os("poll", "pipes", e)),
            }
            for (pfd, &i) in fds.iter().zip(&which) {
                if pfd.revents == 0 {
                    continue;
                }
                if i == 0 {
                    self.write_input()?;
                } else {
                    self.read_output(i, &mut buf)?;
                }
            }
        }
        match self.wait_deadline(deadline)? {
            Some(status) => Ok(Output {
                status,
                stdout: std::mem::take(&mut self.comm.out),
                stderr: std::mem::take(&mut self.comm.err),
            }),
            None => Err(timeout_error("communicate", self.pid, timeout.unwrap_or_default())),
        }
    }

    /// Give up the handle without reaping: the caller takes over the child, its pid and its
    /// pidfd (the pipes are closed). Dropping the returned fd without reaping leaves a zombie
    /// until this process exits: that is now the caller's business.
    pub fn into_pidfd(mut self) -> Result<(u32, OwnedFd)> {
        self.detached = true;
        // Moved out, not duplicated (the spawn server hands one over per spawn).
        let fd = self
            .pidfd
            .take()
            .ok_or_else(|| Error::os("into_pidfd", "pidfd already taken", libc::EBADF))?;
        Ok((self.pid as u32, fd))
    }

    /// The pidfd.
    fn fd(&self) -> BorrowedFd<'_> {
        match &self.pidfd {
            Some(fd) => fd.as_fd(),
            // Only `into_pidfd` takes it, and it consumes the Child.
            None => unreachable!("a Child without its pidfd"),
        }
    }

    /// Leave the child to the orphan list (reaped by a later spawn or `reap_orphans`)
    /// without waiting here: for async handles, whose drop must not block.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn orphan(&mut self) {
        if self.status.is_some() || self.detached {
            return;
        }
        if let Ok(fd) = self.fd().try_clone_to_owned() {
            crate::orphans::adopt(fd);
        }
        self.detached = true;
    }

    fn write_input(&mut self) -> Result<()> {
        let Some(stdin) = self.stdin.as_mut() else { return Ok(()) };
        let rest = &self.comm.input[self.comm.written..];
        let chunk = &rest[..rest.len().min(64 * 1024)];
        match stdin.write(chunk) {
            Ok(n) => {
                self.comm.written += n;
                if self.comm.written >= self.comm.input.len() {
                    drop(self.stdin.take());
                }
                Ok(())
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(())
            }
            // The child closed its stdin: the rest of the input is not wanted (as CPython).
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                drop(self.stdin.take());
                Ok(())
            }
            Err(e) => Err(Error::os("write", "stdin", e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }

    fn read_output(&mut self, i: usize, buf: &mut [u8]) -> Result<()> {
        let (pipe, out) = if i == 1 {
            (&mut self.stdout, &mut self.comm.out)
        } else {
            (&mut self.stderr, &mut self.comm.err)
        };
        let Some(f) = pipe.as_mut() else { return Ok(()) };
        match f.read(buf) {
            Ok(0) => {
                drop(pipe.take());
                Ok(())
            }
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                Ok(())
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(())
            }
            Err(e) => Err(Error::os(
                "read",
                if i == 1 { "stdout" } else { "stderr" },
                e.raw_os_error().unwrap_or(libc::EIO),
            )),
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_some() || self.detached {
            return;
        }
        if self.remote {
            // Not ours to reap (the server does); kill_on_drop still holds.
            if self.kill_on_drop {
                let _ = self.kill();
            }
            return;
        }
        if let Ok(Some(_)) = self.try_wait() {
            return;
        }
        if self.kill_on_drop {
            let _ = self.kill();
            let _ = self.wait();
            return;
        }
        if let Some(fd) = self.pidfd.take() {
            crate::orphans::adopt(fd);
        }
    }
}
