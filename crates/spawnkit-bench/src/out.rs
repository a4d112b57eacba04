//! Writing that never panics, for the `spawnkit` binary and its benchmark lab alike.
//!
//! A line on stderr ([`note!`]), a report on stdout ([`print_stdout`], or a [`stdout_writer`]
//! whose errors become a [`Failure`]), and how a report stops early ([`Failure`]: a closed
//! stdout is no error).
//!
//! `println!` and `eprintln!` panic (exit 101) when the stream cannot be written: a closed
//! pipe (EPIPE: spawnkit, a Rust program, ignores SIGPIPE) or a full device. Neither the
//! binary's subcommands nor the benchmark use them.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by [`stdout_closed_at_start`].
static CLOSED_AT_START: AtomicBool = AtomicBool::new(false);

/// stdout was closed when this process started (`spawnkit ps >&-`). Rust's runtime put
/// /dev/null on the number and std's stdout takes a write that fails with EBADF as done, so a
/// report would vanish unseen. From this call on, [`print_stdout`] and [`stdout_writer`] fail
/// as writing to a closed fd does (EBADF: one line on stderr, a failing exit code), as
/// `ls >&-` does.
pub fn stdout_closed_at_start() {
    CLOSED_AT_START.store(true, Ordering::Relaxed);
}

/// EBADF if stdout was closed when the process started ([`stdout_closed_at_start`]).
pub fn stdout_open() -> io::Result<()> {
    if CLOSED_AT_START.load(Ordering::Relaxed) {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    Ok(())
}

/// One line on stderr, as `eprintln!` takes it, without its panic: see [`write_note`].
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => { $crate::out::write_note(format_args!($($arg)*)) };
}
pub use crate::note;

/// One line on stderr. Unlike `eprintln!`, a stderr that cannot be written (a closed pipe,
/// /dev/full) is not a panic: the line is dropped, there being nowhere else to say it, and
/// the exit code alone tells the failure.
pub fn write_note(line: fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Write `text` to stdout and flush it.
pub fn print_stdout(text: &str) -> Result<(), Failure> {
    stdout_open()?;
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// stdout, locked and buffered: a report is written in 64 KiB pieces.
pub fn stdout_writer() -> io::BufWriter<Stdout> {
    io::BufWriter::with_capacity(64 * 1024, Stdout(io::stdout().lock()))
}

/// stdout, locked, failing with EBADF when it was closed at start ([`stdout_open`]).
pub struct Stdout(io::StdoutLock<'static>);

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        stdout_open()?;
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        stdout_open()?;
        self.0.flush()
    }
}

/// Why a report stopped before its end.
pub enum Failure {
    /// stdout was closed: stop quietly.
    Pipe,
    Msg(String),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Failure::Pipe
        } else {
            Failure::Msg(format!("write to stdout: {e}"))
        }
    }
}

impl From<spawnkit::Error> for Failure {
    fn from(e: spawnkit::Error) -> Failure {
        Failure::Msg(e.to_string())
    }
}
