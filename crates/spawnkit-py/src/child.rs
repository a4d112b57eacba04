//! `spawnkit._native.Child`: the engine's [`spawnkit::Child`] (a pidfd) for Python.
//!
//! `Popen` keeps one per child and serializes waits with its own `_waitpid_lock`, as CPython
//! does; the mutex here only makes the handle sound from any thread. Waits release the GIL.
//! Signals go through the pidfd without the mutex, so `terminate()` from one thread reaches a
//! child another thread is blocked waiting for.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use crate::errors::{os_error, strerror};

/// A started child process, held by its pidfd. Made by `spawnkit._native.spawn`.
#[pyclass(frozen, module = "spawnkit._native")]
pub(crate) struct Child {
    pid: i32,
    pidfd: RawFd,
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
        Child { pid: child.id() as i32, pidfd: child.pidfd().as_raw_fd(), inner: Mutex::new(child) }
    }

    fn lock(&self) -> MutexGuard<'_, spawnkit::Child> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl Child {
    /// The child's process id.
    #[getter]
    fn pid(&self) -> i32 {
        self.pid
    }

    /// The pidfd (readable once the child has exited). Owned by this object: valid while it
    /// lives; do not close it.
    #[getter]
    fn pidfd(&self) -> RawFd {
        self.pidfd
    }

    /// The pidfd, so a `Child` can be passed to `select`/`selectors`/`poll`.
    fn fileno(&self) -> RawFd {
        self.pidfd
    }

    /// Block until the child exits and reap it (GIL released). Returns the return code:
    /// the exit code, or `-N` when signal N killed it. Raises `ChildProcessError` when someone
    /// else reaped it.
    fn wait(&self, py: Python<'_>) -> PyResult<i32> {
        py.detach(|| self.lock().wait()).map(returncode).map_err(wait_error)
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
        py.detach(|| self.lock().wait_timeout(timeout))
            .map(|s| s.map(returncode))
            .map_err(wait_error)
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
        // SAFETY: pidfd_send_signal(2) on the pidfd owned by `self.inner`, which is open for as
        // long as `self` lives; no siginfo is passed (NULL) and flags are 0.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd,
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if r == 0 {
            return Ok(());
        }
        match std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO) {
            libc::ESRCH => Ok(()),
            errno => Err(PyOSError::new_err((errno, strerror(errno)))),
        }
    }

    fn __repr__(&self) -> String {
        format!("<spawnkit._native.Child pid={} pidfd={}>", self.pid, self.pidfd)
    }
}
