//! The one error type: which step failed, on what, and why.

use std::fmt;
use std::io;

/// What went wrong, coarsely; [`Error::step`] and [`Error::raw_os_error`] say exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Bad input caught before anything was spawned (NUL byte, negative fd, bad name...).
    InvalidInput,
    /// A system call failed, in the parent or in the child; `raw_os_error` has the errno.
    Os,
    /// The program was not found (in PATH, or at the path given).
    NotFound,
    /// The chosen strategy cannot do what the command asks.
    Unsupported,
    /// A timeout expired (wait, communicate).
    Timeout,
    /// The child died before it could exec (killed by a signal while setting up).
    ChildDied,
}

/// An error from building, spawning, waiting for or talking to a child.
///
/// Displays as `STEP "SUBJECT": REASON`, for example
/// `chdir "/nope": No such file or directory (os error 2)`,
/// `execve "foo": not found in PATH (/usr/bin:/bin)`,
/// `setrlimit NOFILE: Invalid argument (os error 22)`,
/// `dup2 fd 9 -> 3: Bad file descriptor (os error 9)`.
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    step: &'static str,
    subject: String,
    errno: Option<i32>,
    reason: Option<String>,
    in_child: bool,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, step: &'static str, subject: impl Into<String>) -> Error {
        Error { kind, step, subject: subject.into(), errno: None, reason: None, in_child: false }
    }

    pub(crate) fn os(step: &'static str, subject: impl Into<String>, errno: i32) -> Error {
        let kind = if errno == libc::ENOENT && step == "execve" {
            ErrorKind::NotFound
        } else {
            ErrorKind::Os
        };
        Error { errno: Some(errno), ..Error::new(kind, step, subject) }
    }

    pub(crate) fn invalid(step: &'static str, subject: impl Into<String>, why: &str) -> Error {
        Error {
            reason: Some(why.to_string()),
            ..Error::new(ErrorKind::InvalidInput, step, subject)
        }
    }

    pub(crate) fn unsupported(step: &'static str, why: impl Into<String>) -> Error {
        Error { reason: Some(why.into()), ..Error::new(ErrorKind::Unsupported, step, "") }
    }

    pub(crate) fn with_reason(mut self, reason: impl Into<String>) -> Error {
        self.reason = Some(reason.into());
        self
    }

    pub(crate) fn with_kind(mut self, kind: ErrorKind) -> Error {
        self.kind = kind;
        self
    }

    pub(crate) fn in_child(mut self) -> Error {
        self.in_child = true;
        self
    }

    /// The coarse kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The step that failed: `"chdir"`, `"execve"`, `"setrlimit"`, `"dup2"`, `"wait"`...
    pub fn step(&self) -> &str {
        self.step
    }

    /// What the step worked on: a path, a resource name, `fd 9 -> 3`...
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The errno, when a system call failed.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.errno
    }

    /// Whether the failure happened in the child, between clone and execve.
    pub fn is_in_child(&self) -> bool {
        self.in_child
    }

    /// The exit status a shell or env(1) would use for this failure: 127 when the program was
    /// not found, 126 when it was found but could not be executed, 125 otherwise.
    pub fn exit_code(&self) -> i32 {
        match (self.kind, self.step, self.errno) {
            (ErrorKind::NotFound, _, _) => 127,
            (_, "execve", Some(libc::ENOENT | libc::ENOTDIR)) => 127,
            (_, "execve", Some(_)) => 126,
            (
                _,
                "posix_spawn",
                Some(
                    libc::EACCES
                    | libc::ENOEXEC
                    | libc::EPERM
                    | libc::EISDIR
                    | libc::ETXTBSY
                    | libc::E2BIG
                    | libc::ELOOP
                    | libc::ENAMETOOLONG
                    | libc::ELIBBAD,
                ),
            ) => 126,
            _ => 125,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.step)?;
        if !self.subject.is_empty() {
            write!(f, " {}", self.subject)?;
        }
        f.write_str(": ")?;
        match (&self.reason, self.errno) {
            (Some(r), _) => f.write_str(r),
            (None, Some(e)) => write!(f, "{}", io::Error::from_raw_os_error(e)),
            (None, None) => f.write_str("failed"),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match e.kind {
            ErrorKind::InvalidInput => io::ErrorKind::InvalidInput,
            ErrorKind::NotFound => io::ErrorKind::NotFound,
            ErrorKind::Unsupported => io::ErrorKind::Unsupported,
            ErrorKind::Timeout => io::ErrorKind::TimedOut,
            ErrorKind::Os | ErrorKind::ChildDied => match e.errno {
                Some(n) => io::Error::from_raw_os_error(n).kind(),
                None => io::ErrorKind::Other,
            },
        };
        io::Error::new(kind, e)
    }
}

/// Quote a subject the way the messages show it: `"path"`.
pub(crate) fn quoted(s: impl AsRef<std::ffi::OsStr>) -> String {
    format!("{:?}", s.as_ref().to_string_lossy())
}

/// `Result` with spawnkit's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
