//! The record every backend fills: one process (thread-group leader) of the table.

use std::borrow::Cow;
use std::fmt;

/// A process's short name as the kernel keeps it (`comm`: at most 15 bytes, any bytes but
/// NUL: spaces, parentheses and newlines included), stored inline so that listing allocates
/// nothing per process.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Comm {
    len: u8,
    bytes: [u8; 16],
}

impl Comm {
    /// The kernel's limit: TASK_COMM_LEN (16) minus the NUL.
    pub const MAX: usize = 15;

    /// From raw bytes; stops at the first NUL and keeps at most [`Comm::MAX`] bytes.
    pub fn new(raw: &[u8]) -> Comm {
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len()).min(Self::MAX);
        let mut bytes = [0u8; 16];
        bytes[..end].copy_from_slice(&raw[..end]);
        Comm { len: end as u8, bytes }
    }

    /// The raw bytes, without the NUL.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// As text; bytes that are not UTF-8 become U+FFFD.
    pub fn to_string_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.as_bytes())
    }
}

impl fmt::Display for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string_lossy())
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.to_string_lossy(), f)
    }
}

/// The state letter `ps` shows (procps `s`/`state`), from `/proc/PID/stat` field 3 or from the
/// kernel's task state bits (see `fs/proc/array.c`: "RSDTtXZPI").
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum State {
    /// R: running or runnable.
    Running,
    /// S: interruptible sleep.
    Sleeping,
    /// D: uninterruptible sleep.
    DiskSleep,
    /// T: stopped by a signal.
    Stopped,
    /// t: stopped by a tracer.
    TracingStop,
    /// X: dead (never seen in practice).
    Dead,
    /// Z: zombie, exited and not yet reaped.
    Zombie,
    /// P: parked kernel thread.
    Parked,
    /// I: idle kernel thread.
    Idle,
    /// Any other letter a future kernel may report.
    Other(u8),
}

impl State {
    /// From the letter in `/proc/PID/stat`.
    pub fn from_letter(c: u8) -> State {
        match c {
            b'R' => State::Running,
            b'S' => State::Sleeping,
            b'D' => State::DiskSleep,
            b'T' => State::Stopped,
            b't' => State::TracingStop,
            b'X' | b'x' => State::Dead,
            b'Z' => State::Zombie,
            b'P' => State::Parked,
            b'I' => State::Idle,
            other => State::Other(other),
        }
    }

    /// The letter `ps` prints.
    pub fn letter(self) -> char {
        match self {
            State::Running => 'R',
            State::Sleeping => 'S',
            State::DiskSleep => 'D',
            State::Stopped => 'T',
            State::TracingStop => 't',
            State::Dead => 'X',
            State::Zombie => 'Z',
            State::Parked => 'P',
            State::Idle => 'I',
            State::Other(c) => c as char,
        }
    }
}

/// One process (thread-group leader) as a backend saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    /// Process id (tgid), in the caller's pid namespace view of /proc.
    pub pid: i32,
    /// Parent's process id; 0 for init and kthreadd.
    pub ppid: i32,
    /// Short name (`comm`).
    pub comm: Comm,
    /// State letter.
    pub state: State,
    /// Effective uid; `None` when [`Fields::uid`] was not asked for.
    pub uid: Option<u32>,
    /// Number of threads.
    pub threads: u32,
    /// Start time in clock ticks (USER_HZ = 100) after boot, as `/proc/PID/stat` field 22:
    /// the boot of the reader's time namespace. A process that started before it (a negative
    /// boottime offset) gives 0, where /proc's unsigned sum wraps around.
    pub start_ticks: u64,
    /// Resident set size in bytes, from the kernel's mm counters (`/proc/PID/stat` field 24
    /// times the page size); 0 for kernel threads and zombies. Approximate, as both
    /// backends read it: the counters' per-CPU parts are not summed, so it can differ from
    /// the exact `VmRSS` of `/proc/PID/status` (which procps `ps` shows; recent kernels sum
    /// it) by up to a few hundred KiB per CPU. For exact figures, read
    /// [`memory()`](crate::memory()) for the processes that matter.
    pub rss_bytes: u64,
    /// The raw `/proc/PID/cmdline` (arguments separated by NUL); `None` when
    /// [`Fields::cmdline`] was not asked for or the process had vanished by then.
    pub cmdline: Option<Vec<u8>>,
}

/// Fields that cost extra per process and are filled only when asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fields {
    /// Fill [`Process::uid`] (the procfs backend then reads `status` as well as `stat`).
    pub uid: bool,
    /// Fill [`Process::cmdline`] (one more read per process, for either backend).
    pub cmdline: bool,
}

/// Which way to read the process table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The BPF task iterator when it may serve the caller (root or CAP_BPF+CAP_PERFMON,
    /// kernel >= 5.8, this build has the BPF program, and a /proc that hides no process from
    /// the caller: see [`ProcessTable`](super::ProcessTable#which-backend-serves-whom)), else
    /// the procfs walker; chosen again at every listing.
    #[default]
    Auto,
    /// One read of a BPF task iterator yields binary records for every task. Every listing
    /// fails while the caller may not be served by it.
    Bpf,
    /// getdents64 over /proc and one read of `stat` per process.
    Procfs,
}

impl Backend {
    /// Every backend, in the order help texts list them.
    pub const ALL: [Backend; 3] = [Backend::Auto, Backend::Bpf, Backend::Procfs];

    /// `auto`, `bpf` or `procfs`: the name `spawnkit ps --backend` and `spawnkit.ps(backend=)`
    /// take.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Bpf => "bpf",
            Backend::Procfs => "procfs",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Backend {
    type Err = spawnkit::ParseValueError;
    fn from_str(s: &str) -> Result<Backend, Self::Err> {
        Backend::ALL.into_iter().find(|b| b.name() == s).ok_or_else(|| {
            spawnkit::ParseValueError::new(format!("'{s}' is not a backend (auto, bpf, procfs)"))
        })
    }
}

/// `start_boottime` is in ns; /proc/PID/stat field 22 is `nsec_to_clock_t` of it (USER_HZ=100).
pub(crate) const NS_PER_TICK: u64 = 1_000_000_000 / 100;

/// A start time read from /proc/PID/stat, as the BPF backend gives it. /proc adds the reader's
/// time-namespace boottime offset to a task's start in unsigned arithmetic, so with a
/// negative offset a task that started before the namespace's boot wraps around to some
/// 5,800 years ahead; the BPF backend clamps such a start at the namespace's boot (0). No
/// real start comes near 2^63 ns (292 years of uptime), so a value past it is such a wrap.
pub(crate) fn unwrap_start_ticks(ticks: u64) -> u64 {
    if ticks >= (1u64 << 63) / NS_PER_TICK {
        0
    } else {
        ticks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_round_trip() {
        for b in Backend::ALL {
            assert_eq!(b.to_string().parse::<Backend>(), Ok(b));
        }
        assert_eq!("procfs".parse::<Backend>(), Ok(Backend::Procfs));
        for bad in ["magic", "", "BPF", " auto"] {
            let err = bad.parse::<Backend>().unwrap_err().to_string();
            assert_eq!(err, format!("'{bad}' is not a backend (auto, bpf, procfs)"));
        }
    }

    #[test]
    fn wrapped_start_times_are_clamped_at_the_namespace_boot() {
        // A task started 3 s after boot, read in a namespace whose boottime is 1000 s behind:
        // /proc shows nsec_to_clock_t(3e9 - 1000e9 mod 2^64).
        let wrapped = 3_000_000_000u64.wrapping_sub(1_000_000_000_000) / NS_PER_TICK;
        assert_eq!(unwrap_start_ticks(wrapped), 0);
        assert_eq!(unwrap_start_ticks(u64::MAX / NS_PER_TICK), 0);
        // Real starts are kept, up to 292 years of uptime.
        assert_eq!(unwrap_start_ticks(0), 0);
        assert_eq!(unwrap_start_ticks(123_456), 123_456);
        let last = (1u64 << 63) / NS_PER_TICK - 1;
        assert_eq!(unwrap_start_ticks(last), last);
    }
}
