//! The small value types a [`Command`](crate::Command) is made of.

use std::fmt;
use std::fs::File;
use std::os::fd::{OwnedFd, RawFd};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};
pub use crate::steps::Resource;

/// How the child is started. All strategies run the same [`Plan`](crate::Plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Serialize, Deserialize)]
pub enum Strategy {
    /// `clone3`/`clone` with `CLONE_VM | CLONE_VFORK` on a stack of its own, raw syscalls in
    /// the child. Fast from any parent, safe from threaded ones. The default.
    #[default]
    CloneVfork,
    /// glibc's `posix_spawn`, for comparison and as a fallback. Refuses (with an
    /// [`Unsupported`](crate::ErrorKind::Unsupported) error) what posix_spawn cannot do:
    /// rlimits, nice, affinity, credentials, umask, parent-death signal, no_new_privs.
    PosixSpawn,
    /// `fork()` then the same steps. Slow from large parents (page tables are copied) but
    /// the only strategy that can run a [`pre_exec`](crate::Command::pre_exec) hook.
    ForkExec,
}

impl Strategy {
    /// Every strategy, in the order benchmarks show them.
    pub const ALL: [Strategy; 3] = [Strategy::CloneVfork, Strategy::PosixSpawn, Strategy::ForkExec];

    /// The name used on the command line: `clone-vfork`, `posix-spawn`, `fork-exec`.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::CloneVfork => "clone-vfork",
            Strategy::PosixSpawn => "posix-spawn",
            Strategy::ForkExec => "fork-exec",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Strategy> {
        Strategy::ALL
            .into_iter()
            .find(|st| st.name() == s || st.name().replace('-', "_") == s)
            .ok_or_else(|| {
                Error::invalid("strategy", s, "unknown (use clone-vfork, posix-spawn or fork-exec)")
            })
    }
}

/// How the child walks the PATH candidates when execve fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Serialize, Deserialize)]
pub enum PathSearch {
    /// execvp's rules (the default): ENOENT, ENOTDIR, ESTALE, ENODEV, ETIMEDOUT go on to the
    /// next entry; EACCES is remembered and reported if nothing else works; any other error
    /// (ENOEXEC, E2BIG...) stops the search.
    #[default]
    Execvp,
    /// CPython's rules: try every entry; report the first error that is not ENOENT or
    /// ENOTDIR, else the last.
    TryAll,
}

impl Resource {
    /// A limit for this resource given as a signed number, as C code and Python's `resource`
    /// module write it: -1 is [`RLIM_INFINITY`] (`(rlim_t)-1`), as is anything at or above
    /// 2^64-1 (no limit is larger); any other negative number is an error, instead of
    /// wrapping to a huge limit that setrlimit in the child refuses (EPERM) or, as root,
    /// grants.
    pub fn limit_from_signed(self, value: i128) -> Result<u64> {
        match value {
            -1 => Ok(RLIM_INFINITY),
            v if v < 0 => Err(Error::invalid(
                "setrlimit",
                self.name(),
                &format!("{v} is not a limit (0 or more, or -1 for unlimited)"),
            )),
            v => Ok(u64::try_from(v).unwrap_or(RLIM_INFINITY)),
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Resource {
    type Err = Error;
    /// Accepts `nofile`, `NOFILE` and `RLIMIT_NOFILE`.
    fn from_str(s: &str) -> Result<Resource> {
        let up = s.to_ascii_uppercase();
        let up = up.strip_prefix("RLIMIT_").unwrap_or(&up);
        Resource::ALL.iter().copied().find(|r| r.name() == up).ok_or_else(|| {
            Error::invalid("rlimit", s, "unknown resource (try nofile, nproc, core, as, ...)")
        })
    }
}

/// `RLIM_INFINITY`: no limit.
pub const RLIM_INFINITY: u64 = u64::MAX;

/// A signal number, parsed from `TERM`, `SIGTERM` or `15`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Signal(i32);

const SIGNAL_NAMES: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
];

impl Signal {
    pub const HUP: Signal = Signal(libc::SIGHUP);
    pub const INT: Signal = Signal(libc::SIGINT);
    pub const QUIT: Signal = Signal(libc::SIGQUIT);
    pub const KILL: Signal = Signal(libc::SIGKILL);
    pub const USR1: Signal = Signal(libc::SIGUSR1);
    pub const USR2: Signal = Signal(libc::SIGUSR2);
    pub const PIPE: Signal = Signal(libc::SIGPIPE);
    pub const TERM: Signal = Signal(libc::SIGTERM);
    pub const CHLD: Signal = Signal(libc::SIGCHLD);
    pub const STOP: Signal = Signal(libc::SIGSTOP);
    pub const XFSZ: Signal = Signal(libc::SIGXFSZ);

    /// A signal from its number (1..=64).
    pub fn new(n: i32) -> Result<Signal> {
        if (1..=64).contains(&n) {
            Ok(Signal(n))
        } else {
            Err(Error::invalid("signal", n.to_string(), "not a signal number (1..=64)"))
        }
    }

    /// The signal's number.
    pub fn number(self) -> i32 {
        self.0
    }

    /// Whether a signal mask can hold the signal: every one but SIGKILL and SIGSTOP.
    pub fn can_be_blocked(self) -> bool {
        self != Signal::KILL && self != Signal::STOP
    }

    /// `SIGTERM`, or `SIGRTMIN+3` / `SIG40` for the others.
    pub fn name(self) -> String {
        match SIGNAL_NAMES.iter().find(|(_, n)| *n == self.0) {
            Some((name, _)) => format!("SIG{name}"),
            None => format!("SIG{}", self.0),
        }
    }
}

impl Serialize for Signal {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_i32(self.0)
    }
}

impl<'de> Deserialize<'de> for Signal {
    /// A number in 1..=64, checked as [`Signal::new`] does.
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Signal, D::Error> {
        Signal::new(i32::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for Signal {
    type Err = Error;
    fn from_str(s: &str) -> Result<Signal> {
        if let Ok(n) = s.parse::<i32>() {
            return Signal::new(n);
        }
        let up = s.to_ascii_uppercase();
        let up = up.strip_prefix("SIG").unwrap_or(&up);
        SIGNAL_NAMES
            .iter()
            .find(|(name, _)| *name == up)
            .map(|(_, n)| Signal(*n))
            .ok_or_else(|| Error::invalid("signal", s, "unknown signal name"))
    }
}

/// A set of signals (bit N-1 for signal N), as the kernel's 64-bit sigset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Serialize, Deserialize)]
pub struct SigSet(u64);

impl SigSet {
    /// No signals.
    pub const fn empty() -> SigSet {
        SigSet(0)
    }

    /// Every signal.
    pub const fn full() -> SigSet {
        SigSet(u64::MAX)
    }

    /// The set with `sig` added.
    pub fn with(mut self, sig: Signal) -> SigSet {
        self.0 |= 1u64 << (sig.number() - 1);
        self
    }

    /// The set with `sig` added, for a signal mask ([`Command::signal_mask`]): SIGKILL and
    /// SIGSTOP cannot be blocked (the kernel silently leaves them out of every mask), so
    /// asking for them is an error, as `spawnkit run --sigmask KILL` and Python's
    /// `signal_mask(["KILL"])` report it.
    ///
    /// [`Command::signal_mask`]: crate::Command::signal_mask
    pub fn try_with(self, sig: Signal) -> Result<SigSet> {
        if !sig.can_be_blocked() {
            return Err(Error::invalid("sigprocmask", "", &format!("{sig} cannot be blocked")));
        }
        Ok(self.with(sig))
    }

    /// Whether `sig` is in the set.
    pub fn contains(self, sig: Signal) -> bool {
        self.0 & (1u64 << (sig.number() - 1)) != 0
    }

    /// The raw kernel bits.
    pub fn bits(self) -> u64 {
        self.0
    }

    /// A set from raw kernel bits.
    pub fn from_bits(bits: u64) -> SigSet {
        SigSet(bits)
    }
}

impl FromIterator<Signal> for SigSet {
    fn from_iter<I: IntoIterator<Item = Signal>>(iter: I) -> SigSet {
        iter.into_iter().fold(SigSet::empty(), SigSet::with)
    }
}

/// Where a standard stream of the child goes.
#[derive(Debug)]
pub enum Stdio {
    /// The parent's own fd, as it is (the default).
    Inherit,
    /// `/dev/null`.
    Null,
    /// A new pipe; the parent's end is on [`Child`](crate::Child).
    Pipe,
    /// An open file, handed over to the child and closed in the parent by the spawn (a later
    /// spawn of the same command inherits the parent's fd instead).
    File(File),
    /// Any fd the parent owns, handed over and closed in the parent by the spawn (as `File`).
    Owned(OwnedFd),
    /// A raw fd of the parent's, borrowed: it must stay open until `spawn` returns.
    Fd(RawFd),
    /// The same as the child's stdout (for stderr: `2>&1`; closed when stdout is
    /// [`Closed`](Stdio::Closed)).
    Stdout,
    /// Closed in the child, as `>&-` in a shell: the program starts without this fd, and a
    /// write to it fails with EBADF (a later open in the program may take the number). An fd
    /// map or [`keep_fd`](crate::Command::keep_fd) onto the same number wins, as over any
    /// other stream.
    Closed,
}

impl Stdio {
    pub fn inherit() -> Stdio {
        Stdio::Inherit
    }
    pub fn null() -> Stdio {
        Stdio::Null
    }
    pub fn piped() -> Stdio {
        Stdio::Pipe
    }
    pub fn closed() -> Stdio {
        Stdio::Closed
    }
}

impl From<File> for Stdio {
    fn from(f: File) -> Stdio {
        Stdio::File(f)
    }
}

impl From<OwnedFd> for Stdio {
    fn from(f: OwnedFd) -> Stdio {
        Stdio::Owned(f)
    }
}
