//! What `spawnkit ps` and `spawnkit mem` share: the PID argument, the buffered stdout their
//! reports go to, and how a report stops early ([`Failure`]: a closed stdout is no error).

use std::io;

/// A PID argument: a number above 0.
pub fn parse_pid(s: &str) -> Result<i32, String> {
    match s.trim().parse::<i32>() {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(format!("'{s}' is not a pid (a number above 0)")),
    }
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
