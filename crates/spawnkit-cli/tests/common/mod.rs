//! Shared helpers for the integration tests of the `spawnkit` binary: running it, and (from
//! the libraries' tests) the probe and the fixtures made with it.
//!
//! Every test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::process::{Command, Stdio};

/// `spawnkit-probe`, its process tree and shared-memory fixture, and /proc read
/// independently: the very file the libraries' tests use.
#[path = "../../../spawnkit-observe/tests/common/fixtures.rs"]
pub mod fixtures;

/// The `spawnkit` binary under test.
pub fn spawnkit_bin() -> &'static str {
    env!("CARGO_BIN_EXE_spawnkit")
}

/// `spawnkit ARGS...` (a std Command, to adjust before running).
pub fn spawnkit_cmd<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(spawnkit_bin());
    cmd.args(args);
    cmd
}

/// `spawnkit ARGS...`, run to completion with stdin from /dev/null.
pub fn spawnkit<I, S>(args: I) -> Res
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Res::of(&mut spawnkit_cmd(args))
}

/// What `spawnkit` did: exit code (None if killed by a signal), stdout, stderr.
#[derive(Debug)]
pub struct Res {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Res {
    /// Run `cmd` to completion with stdin from /dev/null; bytes of its output that are not
    /// UTF-8 are kept as U+FFFD.
    pub fn of(cmd: &mut Command) -> Res {
        Res::run(cmd, |bytes| String::from_utf8_lossy(&bytes).into_owned())
    }

    /// [`Res::of`] for a command that promises UTF-8 on stdout (`spawnkit ps`): anything else
    /// fails the test.
    pub fn of_utf8(cmd: &mut Command) -> Res {
        Res::run(cmd, |bytes| String::from_utf8(bytes).expect("UTF-8 output"))
    }

    fn run(cmd: &mut Command, stdout: impl FnOnce(Vec<u8>) -> String) -> Res {
        let out = cmd.stdin(Stdio::null()).output().expect("run spawnkit");
        Res {
            code: out.status.code(),
            stdout: stdout(out.stdout),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    #[track_caller]
    pub fn code(&self, code: i32) -> &Res {
        assert_eq!(self.code, Some(code), "exit code; {self:#?}");
        self
    }

    #[track_caller]
    pub fn stderr_is(&self, expected: &str) -> &Res {
        assert_eq!(self.stderr, expected, "stderr; {self:#?}");
        self
    }

    #[track_caller]
    pub fn stderr_has(&self, part: &str) -> &Res {
        assert!(self.stderr.contains(part), "stderr should contain {part:?}; {self:#?}");
        self
    }

    /// A usage error that the parser of `flag` gave for `value`: exit 125, nothing on stdout,
    /// and stderr opening with clap's one line `error: invalid value 'VALUE' for 'FLAG <..>':
    /// WHY` (not "unexpected argument", a tip and the usage, as when clap takes a negative
    /// number for a flag of its own).
    #[track_caller]
    pub fn bad_value(&self, flag: &str, value: &str) -> &Res {
        assert_eq!(self.code, Some(125), "{flag} {value}: exit code; {self:#?}");
        assert_eq!(self.stdout, "", "{flag} {value}: stdout; {self:#?}");
        let first = self.stderr.lines().next().unwrap_or_default();
        let head = format!("error: invalid value '{value}' for '{flag} <");
        assert!(first.starts_with(&head), "{flag} {value}: first line {first:?}; {self:#?}");
        for noise in ["unexpected argument", "tip:", "Usage:"] {
            assert!(!self.stderr.contains(noise), "{flag} {value}: {noise:?} in {self:#?}");
        }
        self
    }
}

/// The write end of a pipe whose read end is closed: every write fails with EPIPE (spawnkit,
/// a Rust program, ignores SIGPIPE).
pub fn closed_pipe() -> std::process::Stdio {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two fds into the array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds were just created and are owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    std::process::Stdio::from(write)
}

/// Start `cmd`'s process with its fd `fd` closed, as `>&-` (or `<&-`) leaves it: closed in
/// the forked child after std has set up its streams, just before exec. (A Rust program
/// finds /dev/null there once its runtime has started.)
pub fn close_fd_at_exec(cmd: &mut Command, fd: i32) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the forked child before exec and only calls close(2), which is
    // async-signal-safe and touches nothing but an fd number.
    unsafe {
        cmd.pre_exec(move || {
            libc::close(fd);
            Ok(())
        });
    }
}

/// A shell script that writes to the file named by its `$0` which of its fds 0, 1 and 2 are
/// open: "open closed open". Only built-ins, no fork, no pipe or file opened before the
/// answer is known (either could take a closed number).
pub const OPEN_OR_CLOSED: &str = "r=''; for n in 0 1 2; do if [ -e /proc/$$/fd/$n ]; then \
     r=\"$r open\"; else r=\"$r closed\"; fi; done; echo $r > \"$0\"";
