//! `spawnkit._native.Child`: the engine's [`spawnkit::Child`] (a pidfd) for Python.
//!
//! `Popen` keeps one per child and serializes waits with its own `_waitpid_lock`, as CPython
//! does; the mutex here only makes the handle sound from any thread. Waits release the GIL.
//! Signals go through the pidfd without the mutex, so `terminate()` from one thread reaches a
//! child another thread is blocked waiting for.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use crate::errors::{os_error, strerror};

/// A started child process, held by its pidfd. Made by `spawnkit._native.Command.spawn_child`.
#[pyclass(frozen, module = "spawnkit._native")]
pub(crate) struct Child {
    pid: i32,
    pidfd: RawFd,
    kill_on_drop: bool,
    /// Started by a spawn server, which reaps it, and its status read from the pidfd: its end
    /// is known when its pidfd hangs up (the reap), not when it turns readable (the exit).
    /// (`spawnkit::Child::ends_at_hangup`: not a child whose status comes in an Exit frame.)
    ends_at_hangup: bool,
    inner: Mutex<spawnkit::Child>,
}

fn returncode(status: spawnkit::ExitStatus) -> i32 {
    match status {
        spawnkit::ExitStatus::Exited(code) => code,
        spawnkit::ExitStatus::Signaled { signal, .. } => -signal,
    }
}

fn wait_error(e: spawnkit::Error) -> PyErr {
    match e.raw_os_error() {
        Some(errno) => os_error(errno),
        None => PyOSError::new_err(e.to_string()),
    }
}

impl Child {
    pub(crate) fn new(child: spawnkit::Child) -> Child {
        Child {
            pid: child.id() as i32,
            pidfd: child.pidfd().as_raw_fd(),
            kill_on_drop: child.kills_on_drop(),
            ends_at_hangup: child.ends_at_hangup(),
            inner: Mutex::new(child),
        }
    }

    fn lock(&self) -> MutexGuard<'_, spawnkit::Child> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Poll the pidfd until it is readable (the child exited) or `timeout` passes, with the
    /// GIL released; on EINTR run the Python signal handlers (which may raise) and go on.
    fn ready(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<bool> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let ms = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
                }
            };
            let (pidfd, hangup) = (self.pidfd, self.ends_at_hangup);
            // The pidfd is owned by `self.inner` and open while `self` lives. A server's child
            // is waited for until its reap (see `ends_at_hangup`): waiting for its exit would
            // spin from the exit to the server's reap, each turn finding no status yet.
            let r = py.detach(move || {
                let polled = if hangup {
                    spawnkit::process::poll_hung_up([pidfd], ms)
                } else {
                    spawnkit::process::poll_readable([pidfd], ms)
                };
                match polled {
                    Ok([ready]) => Ok(ready),
                    Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
                }
            });
            match r {
                Ok(ready) => return Ok(ready),
                Err(libc::EINTR) => py.check_signals()?,
                Err(errno) => return Err(os_error(errno)),
            }
        }
    }

    /// Reap the child if it has exited (the pidfd said so), taking the handle's lock with the
    /// GIL released.
    fn reap(&self, py: Python<'_>) -> PyResult<Option<i32>> {
        py.detach(|| self.lock().try_wait()).map(|s| s.map(returncode)).map_err(wait_error)
    }
}

#[pymethods]
impl Child {
    /// The child's process id.
    #[getter]
    fn pid(&self) -> i32 {
        self.pid
    }

    /// The pidfd (readable once the child has exited; a server's child may have its status
    /// only once it also hangs up: see `ends_at_hangup`). Owned by this object: valid while
    /// it lives; do not close it.
    #[getter]
    fn pidfd(&self) -> RawFd {
        self.pidfd
    }

    /// Whether the command asked for `kill_on_drop`: `Popen` kills and reaps the child when
    /// it is collected unwaited.
    #[getter]
    fn kill_on_drop(&self) -> bool {
        self.kill_on_drop
    }

    /// Whether its end is known when its pidfd hangs up (`POLLHUP`) rather than when it
    /// turns readable: a child a spawn server started (and reaps) whose status is read from
    /// its pidfd, which is readable from its exit on while the status exists only from the
    /// server's reap. An event loop watching the pidfd waits for the hang-up. False for a
    /// local child, and for a server's child whose status comes in an Exit frame (kernels
    /// before 6.15), whose pidfd may never hang up. (`spawnkit::Child::ends_at_hangup`.)
    #[getter]
    fn ends_at_hangup(&self) -> bool {
        self.ends_at_hangup
    }

    /// The pidfd, so a `Child` can be passed to `select`/`selectors`/`poll`.
    fn fileno(&self) -> RawFd {
        self.pidfd
    }

    /// Block until the child exits and reap it (GIL released). Returns the return code:
    /// the exit code, or `-N` when signal N killed it. Raises `ChildProcessError` when someone
    /// else reaped it. Python signal handlers run while it waits (Ctrl-C raises
    /// `KeyboardInterrupt`, as in CPython's `waitpid`).
    fn wait(&self, py: Python<'_>) -> PyResult<i32> {
        loop {
            self.ready(py, None)?;
            if let Some(rc) = self.reap(py)? {
                return Ok(rc);
            }
        }
    }

    /// Reap the child if it has exited: its return code, or `None` if it still runs (or if
    /// another thread holds the handle in a wait right now).
    fn try_wait(&self) -> PyResult<Option<i32>> {
        let mut guard = match self.inner.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(None),
        };
        guard.try_wait().map(|s| s.map(returncode)).map_err(wait_error)
    }

    /// Wait at most `timeout` seconds (poll on the pidfd, GIL released); the return code, or
    /// `None` if the child still runs then.
    fn wait_timeout(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<i32>> {
        let timeout = Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::MAX);
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if !self.ready(py, left)? {
                return Ok(None);
            }
            if let Some(rc) = self.reap(py)? {
                return Ok(Some(rc));
            }
        }
    }

    /// The return code if the child has been reaped, else `None`. Never blocks, never reaps.
    #[getter]
    fn returncode(&self) -> Option<i32> {
        match self.inner.try_lock() {
            Ok(g) => g.status().map(returncode),
            Err(_) => None,
        }
    }

    /// Send signal `sig` through the pidfd (pidfd_send_signal(2)): it can never reach a
    /// recycled pid. A child that has exited (ESRCH) is not an error. `sig` 0 only checks.
    fn send_signal(&self, sig: i32) -> PyResult<()> {
        // The pidfd is owned by `self.inner`, which keeps it open for as long as `self` lives.
        let Err(e) = spawnkit::process::pidfd_send_signal(self.pidfd, sig) else {
            return Ok(());
        };
        match e.raw_os_error().unwrap_or(libc::EIO) {
            libc::ESRCH => Ok(()),
            errno => Err(PyOSError::new_err((errno, strerror(errno)))),
        }
    }

    fn __repr__(&self) -> String {
        format!("<spawnkit._native.Child pid={} pidfd={}>", self.pid, self.pidfd)
    }
}
