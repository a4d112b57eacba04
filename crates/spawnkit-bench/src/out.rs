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
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// stdout, locked and buffered: a report is written in 64 KiB pieces.
pub fn stdout_writer() -> io::BufWriter<io::StdoutLock<'static>> {
    io::BufWriter::with_capacity(64 * 1024, io::stdout().lock())
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
