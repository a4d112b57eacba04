//! Engine errors to Python exceptions.
//!
//! For `spawnkit.subprocess` the rules are CPython's (`Popen._execute_child`): a failed
//! `execve` is `OSError(errno, strerror, executable)` (so `FileNotFoundError` with `filename`
//! set to the program as given), a failure before the exec step (chdir, setsid, credentials,
//! dup2...) is `OSError(errno, strerror, cwd)`, an exception in `preexec_fn` is
//! `SubprocessError("Exception occurred in preexec_fn.")`; `OSError(...)` picks the subclass
//! from the errno, as `raise OSError(2, ...)` does in Python.
//!
//! For the native API (`spawnkit.Command`) the engine's message is the `strerror`, and `step` /
//! `in_child` say where it failed. A lock held elsewhere is `BlockingIOError` (EWOULDBLOCK) when
//! the caller would not wait, `TimeoutError` (ETIMEDOUT) when the wait timed out; both have the
//! lock path as `filename`. A strategy that cannot do what was asked (posix-spawn and
//! namespaces) is `ValueError`, as other invalid combinations.

use pyo3::exceptions::{PyChildProcessError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use spawnkit::{Error, ErrorKind};

/// The file names CPython puts on a spawn error: the executable as given and the cwd as given
/// (either may be `None`); and, for the native API, the lock path and chroot as given.
pub(crate) struct Names<'py> {
    pub executable: Bound<'py, PyAny>,
    pub cwd: Option<Bound<'py, PyAny>>,
    pub lock: Option<Bound<'py, PyAny>>,
    pub chroot: Option<Bound<'py, PyAny>>,
}

impl<'py> Names<'py> {
    /// The cwd as given, `None` when unset (CPython's filename then).
    fn cwd(&self) -> Bound<'py, PyAny> {
        self.cwd
            .clone()
            .unwrap_or_else(|| self.executable.py().None().into_bound(self.executable.py()))
    }
}

static SUBPROCESS_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn subprocess_error(py: Python<'_>, msg: String) -> PyErr {
    let ty = SUBPROCESS_ERROR.get_or_try_init(py, || -> PyResult<Py<PyType>> {
        Ok(py.import("subprocess")?.getattr("SubprocessError")?.cast_into::<PyType>()?.unbind())
    });
    match ty {
        Ok(ty) => PyErr::from_type(ty.bind(py).clone(), msg),
        Err(e) => e,
    }
}

/// `os.strerror(errno)`: the C library's message without Rust's " (os error N)".
pub(crate) fn strerror(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno).to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// `OSError(errno, strerror(errno))` (an `OSError` subclass chosen by the errno).
pub(crate) fn os_error(errno: i32) -> PyErr {
    PyOSError::new_err((errno, strerror(errno)))
}

/// The engine's message without Rust's " (os error N)".
fn message(e: &Error) -> String {
    let msg = e.to_string();
    match msg.rfind(" (os error ") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    }
}

/// The native API's extra attributes: which step failed, and whether in the child.
fn with_step(py: Python<'_>, err: PyErr, step: &str, in_child: bool) -> PyErr {
    let value = err.value(py);
    let _ = value.setattr("step", step);
    let _ = value.setattr("in_child", in_child);
    err
}

/// `TimeoutError(ETIMEDOUT, "flock PATH: still locked after T s", PATH)`: the lock was still
/// held elsewhere when the timeout the caller gave ran out.
pub(crate) fn lock_timeout_error(
    py: Python<'_>,
    names: &Names<'_>,
    waited: std::time::Duration,
) -> PyErr {
    let shown = names
        .lock
        .as_ref()
        .and_then(|p| py.import("os").ok()?.call_method1("fsdecode", (p,)).ok())
        .and_then(|p| p.extract::<String>().ok())
        .unwrap_or_default();
    let msg = format!("flock {shown}: still locked after {:.3} s", waited.as_secs_f64());
    let err = match &names.lock {
        Some(p) => PyOSError::new_err((libc::ETIMEDOUT, msg, p.clone().unbind())),
        None => PyOSError::new_err((libc::ETIMEDOUT, msg)),
    };
    with_step(py, err, "flock", false)
}

/// The exception for a failed spawn. `compat`: CPython's `subprocess` rules; otherwise the
/// native API's: the engine's message as `strerror`, `filename` for exec, chdir, chroot and
/// lock failures, and `step` / `in_child` attributes saying which step failed where.
pub(crate) fn spawn_error(py: Python<'_>, e: &Error, names: &Names<'_>, compat: bool) -> PyErr {
    if e.step() == "pre_exec" && e.is_in_child() {
        // preexec_fn raised (crate::preexec::RAISED), or the hook panicked.
        return subprocess_error(py, "Exception occurred in preexec_fn.".into());
    }
    let filename = match e.step() {
        "execve" => Some(names.executable.clone()),
        "chdir" => Some(names.cwd()),
        "flock" => names.lock.clone(),
        "chroot" => names.chroot.clone(),
        _ => None,
    };
    let err = match (e.kind(), e.raw_os_error()) {
        (ErrorKind::InvalidInput | ErrorKind::Unsupported, _) => {
            PyValueError::new_err(e.to_string())
        }
        (ErrorKind::Timeout, _) => {
            // Not reached through spawn (the glue waits for locks itself), kept for safety.
            let msg = message(e);
            match filename {
                Some(f) => PyOSError::new_err((libc::ETIMEDOUT, msg, f.clone().unbind())),
                None => PyOSError::new_err((libc::ETIMEDOUT, msg)),
            }
        }
        (_, None) if compat => {
            // The child died before exec without a report (killed while setting up).
            return subprocess_error(py, e.to_string());
        }
        (_, None) => PyChildProcessError::new_err(e.to_string()),
        // A parent-side failure (pipe, clone, /dev/null): like os.pipe() or fork failing.
        (_, Some(errno)) if compat && !e.is_in_child() => os_error(errno),
        (_, Some(errno)) if compat => {
            // CPython: errors up to and including the credential changes are reported with
            // the cwd ("noexec"), errors from the exec step on with the executable.
            let filename = match e.step() {
                "execve" | "sigprocmask" => names.executable.clone(),
                _ => names.cwd(),
            };
            PyOSError::new_err((errno, strerror(errno), filename.clone().unbind()))
        }
        (_, Some(errno)) => match filename {
            Some(f) => PyOSError::new_err((errno, message(e), f.clone().unbind())),
            None => PyOSError::new_err((errno, message(e))),
        },
    };
    if compat {
        err
    } else {
        with_step(py, err, e.step(), e.is_in_child())
    }
}
