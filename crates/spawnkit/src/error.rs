//! The one error type: which step failed, on what, and why.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;

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

/// An error from building, spawning, waiting for or talking to a child (and, through
/// spawnkit-observe, from reading the process table).
///
/// Displays as `STEP "SUBJECT": REASON`, for example
/// `chdir "/nope": No such file or directory (os error 2)`,
/// `execve "foo": not found in PATH (/usr/bin:/bin)`,
/// `setrlimit NOFILE: Invalid argument (os error 22)`,
/// `dup2 fd 9 -> 3: Bad file descriptor (os error 9)`.
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    step: Cow<'static, str>,
    subject: String,
    errno: Option<i32>,
    reason: Option<String>,
    in_child: bool,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, step: &'static str, subject: impl Into<String>) -> Error {
        Error {
            kind,
            step: Cow::Borrowed(step),
            subject: subject.into(),
            errno: None,
            reason: None,
            in_child: false,
        }
    }

    /// A failed system call: `step` on `subject` (as it prints: a path through [`quoted`])
    /// with `errno`. Public, like [`Error::invalid`] and [`Error::unsupported`], so that
    /// spawnkit's sibling crates (spawnkit-observe) report failures with this same type.
    pub fn os(step: &'static str, subject: impl Into<String>, errno: i32) -> Error {
        let kind = if errno == libc::ENOENT && step == "execve" {
            ErrorKind::NotFound
        } else {
            ErrorKind::Os
        };
        Error { errno: Some(errno), ..Error::new(kind, step, subject) }
    }

    /// Bad input caught before any system call: `step` on `subject`, and why.
    pub fn invalid(step: &'static str, subject: impl Into<String>, why: &str) -> Error {
        Error {
            reason: Some(why.to_string()),
            ..Error::new(ErrorKind::InvalidInput, step, subject)
        }
    }

    /// `step` cannot be done here (kernel, privilege, build), and why.
    pub fn unsupported(step: &'static str, why: impl Into<String>) -> Error {
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
        &self.step
    }

    /// The reason text, when the error carries one beyond its errno.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// An error as a spawn server reported it (its parts decoded from a reply frame).
    pub(crate) fn from_parts(
        kind: ErrorKind,
        step: String,
        subject: String,
        errno: Option<i32>,
        reason: Option<String>,
        in_child: bool,
    ) -> Error {
        Error { kind, step: Cow::Owned(step), subject, errno, reason, in_child }
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
        match (self.kind, &*self.step, self.errno) {
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
        f.write_str(&self.step)?;
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

/// A path, argument or name between double quotes, exactly, as error messages and
/// [`Plan`](crate::Plan)'s text (`--dry-run`) show it: `"/tmp/x"`.
///
/// Escaped as `ls --quoting-style=c` does, so that the text is exact and unambiguous (a
/// backslash always starts an escape): `\\` and `\"` for a backslash and a quote; `\a \b
/// \t \n \v \f \r`, and `\0` for NUL (in the messages that refuse one) unless an octal
/// digit follows; every other control character, every character Rust's `Debug` would
/// not print as it is (a bidi override, a zero-width space...), and every byte that is not
/// UTF-8, as one octal escape per byte, `\377`. Printable UTF-8 stays as it is.
pub fn quoted(s: impl AsRef<OsStr>) -> String {
    let mut out = String::from('"');
    escape_into(&mut out, s.as_ref().as_bytes(), Context::Quoted);
    out.push('"');
    out
}

/// A path written bare, as `ls -b` (`--quoting-style=escape`) shows it: the escapes of
/// [`quoted`] but for the quote, which needs none, and a space as `\ `.
pub(crate) fn escaped(s: impl AsRef<OsStr>) -> String {
    let mut out = String::new();
    escape_into(&mut out, s.as_ref().as_bytes(), Context::Bare);
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    Quoted,
    Bare,
}

fn escape_into(out: &mut String, mut bytes: &[u8], ctx: Context) {
    while !bytes.is_empty() {
        let (valid, bad) = match std::str::from_utf8(bytes) {
            Ok(text) => (text, 0),
            Err(e) => {
                // The prefix up to valid_up_to() is UTF-8 by definition.
                let text = std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default();
                (text, e.error_len().unwrap_or(bytes.len() - e.valid_up_to()))
            }
        };
        let mut chars = valid.chars().peekable();
        while let Some(c) = chars.next() {
            // NUL (in the messages that refuse one) as `\0`, unless an octal digit follows.
            if c == '\0' && !chars.peek().is_some_and(|d| ('0'..='7').contains(d)) {
                out.push_str("\\0");
                continue;
            }
            escape_char(out, c, ctx);
        }
        let rest = &bytes[valid.len()..];
        for &b in &rest[..bad] {
            octal(out, b);
        }
        bytes = &rest[bad..];
    }
}

fn escape_char(out: &mut String, c: char, ctx: Context) {
    let named = match c {
        '\\' => "\\\\",
        '"' if ctx == Context::Quoted => "\\\"",
        ' ' if ctx == Context::Bare => "\\ ",
        '\x07' => "\\a",
        '\x08' => "\\b",
        '\t' => "\\t",
        '\n' => "\\n",
        '\x0b' => "\\v",
        '\x0c' => "\\f",
        '\r' => "\\r",
        c if printable(c) => {
            out.push(c);
            return;
        }
        c => {
            let mut buf = [0u8; 4];
            for &b in c.encode_utf8(&mut buf).as_bytes() {
                octal(out, b);
            }
            return;
        }
    };
    out.push_str(named);
}

/// Whether `c` shows as itself: ASCII but the control characters, and what Rust's `Debug`
/// prints unescaped (its tables of printable characters). A combining mark counts as
/// printable: it is asked after a base character, where `Debug` leaves it alone too.
fn printable(c: char) -> bool {
    if c.is_ascii() {
        return !c.is_ascii_control();
    }
    let mut buf = [b'a'; 5];
    let n = c.encode_utf8(&mut buf[1..]).len();
    std::str::from_utf8(&buf[..=n]).is_ok_and(|s| s.escape_debug().nth(2).is_none())
}

/// `\ooo`: three octal digits, so a digit after it is never read as part of it.
fn octal(out: &mut String, b: u8) {
    out.push('\\');
    for shift in [6, 3, 0] {
        out.push(char::from(b'0' + ((b >> shift) & 7)));
    }
}

/// `Result` with spawnkit's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
