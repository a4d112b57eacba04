//! Writing that never panics: a line on stderr ([`note!`]) and the report on stdout
//! ([`print_stdout`], whose [`Failure`] says whether stdout was merely closed). The same rules
//! as the `spawnkit` binary's own: `println!` and `eprintln!` panic when a stream cannot be
//! written (a closed pipe, a full device); the benchmark uses neither.

use std::fmt;
use std::io::{self, Write};

/// One line on stderr, as `eprintln!` takes it, without its panic: see [`write_note`].
macro_rules! note {
    ($($arg:tt)*) => { $crate::out::write_note(format_args!($($arg)*)) };
}
pub(crate) use note;

/// One line on stderr. Unlike `eprintln!`, a stderr that cannot be written (a closed pipe,
/// /dev/full) is not a panic: the line is dropped, there being nowhere else to say it, and
/// the exit code alone tells the failure.
pub(crate) fn write_note(line: fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Write `text` to stdout and flush it.
pub(crate) fn print_stdout(text: &str) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Why the report stopped before its end.
pub(crate) enum Failure {
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
