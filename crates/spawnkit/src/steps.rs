//! The plan's data: the [`Step`]s the child replays between clone and execve, what they are
//! made of ([`FdRef`], [`Resource`]), and the `pre_exec` [`Hook`] type.
//!
//! A leaf module: it imports nothing from the rest of the crate, so that `sys/` (which
//! replays these steps) imports them downward, and `spawn/` and `isolate/` (which compile a
//! [`Command`](crate::Command) into them) do too. How a step is named in messages and in
//! `--dry-run` (`Step::describe`, `Display`) lives with the [`Plan`](crate::Plan) in
//! `spawn/plan.rs`.

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

use serde::{Deserialize, Serialize};

/// The highest fd number a map may target: no fd table reaches 2^30 (fs.nr_open's ceiling
/// is about 2^31 only in theory), and the engine's own fds go above the highest target.
pub(crate) const MAX_FD: RawFd = 1 << 30;

/// A hook run in a fork()ed child just before execve (see
/// [`Command::pre_exec`](crate::Command::pre_exec)).
pub(crate) type Hook = Box<dyn FnMut() -> io::Result<()> + Send + Sync>;

macro_rules! resources {
    ($($variant:ident = $raw:ident, $name:literal;)*) => {
        /// A resource limit (`RLIMIT_*`, see getrlimit(2)). Serialized (the wire form of a
        /// [`Command`](crate::Command)) as its index in this list: append new ones at the end.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum Resource { $($variant,)* }

        impl Resource {
            /// Every resource, in the order of the kernel's numbering.
            pub const ALL: &'static [Resource] = &[$(Resource::$variant,)*];

            /// The kernel's number for this resource.
            pub fn raw(self) -> u32 {
                match self { $(Resource::$variant => libc::$raw as u32,)* }
            }

            /// The name as prlimit(1) and error messages spell it: `NOFILE`.
            pub fn name(self) -> &'static str {
                match self { $(Resource::$variant => $name,)* }
            }
        }
    };
}

resources! {
    Cpu = RLIMIT_CPU, "CPU";
    Fsize = RLIMIT_FSIZE, "FSIZE";
    Data = RLIMIT_DATA, "DATA";
    Stack = RLIMIT_STACK, "STACK";
    Core = RLIMIT_CORE, "CORE";
    Rss = RLIMIT_RSS, "RSS";
    Nproc = RLIMIT_NPROC, "NPROC";
    Nofile = RLIMIT_NOFILE, "NOFILE";
    Memlock = RLIMIT_MEMLOCK, "MEMLOCK";
    As = RLIMIT_AS, "AS";
    Locks = RLIMIT_LOCKS, "LOCKS";
    Sigpending = RLIMIT_SIGPENDING, "SIGPENDING";
    Msgqueue = RLIMIT_MSGQUEUE, "MSGQUEUE";
    Nice = RLIMIT_NICE, "NICE";
    Rtprio = RLIMIT_RTPRIO, "RTPRIO";
    Rttime = RLIMIT_RTTIME, "RTTIME";
}

/// Where a [`Step::Dup2`] takes its fd from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FdRef {
    /// A parent fd number, untouched so far.
    Fd(RawFd),
    /// A temporary copy made by [`Step::DupAway`] (`fd` is the original number).
    Slot { index: usize, fd: RawFd },
}

/// One thing the child does before execve, in order. Each is one raw system call or a few.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// unshare(flags): the namespaces fork-exec cannot get from the clone.
    Unshare { flags: u64 },
    /// open(path, O_WRONLY), one write(data), close: uid_map, gid_map, setgroups,
    /// cgroup.procs.
    WriteFile { path: CString, data: Vec<u8> },
    /// mount(source, target, fstype, flags, data).
    Mount {
        source: Option<CString>,
        target: CString,
        fstype: Option<CString>,
        flags: u64,
        data: Option<CString>,
    },
    /// sethostname(name).
    Sethostname { name: Vec<u8> },
    /// Tell the parent (a byte on `ready_fd`) that the new user namespace exists, and wait
    /// (4 bytes on `go_fd`: 0 or an errno) while it writes the uid and gid maps, which only a
    /// process outside the namespace may do for arbitrary maps.
    /// The child first closes its copies of the parent's ends (`parent_fds`), so a dead parent
    /// means EOF rather than a wait for ever.
    AwaitIdMaps { ready_fd: RawFd, go_fd: RawFd, parent_fds: [RawFd; 2] },
    /// mount_setattr(target, AT_RECURSIVE, set) (5.12+), or on older kernels
    /// mount(target, MS_BIND|MS_REMOUNT|remount): read-only binds and /tmp options that reach
    /// every mount below `target`.
    MountSetattr { target: CString, set: u64, remount: u64 },
    /// Bring the loopback interface up (SIOCGIFFLAGS / SIOCSIFFLAGS on "lo").
    LoopbackUp,
    /// mount a fresh sysfs on `target`, read-only, nosuid, nodev, noexec. EPERM is no error:
    /// in a user namespace the kernel refuses a new sysfs when the host's /sys is partly
    /// covered (a container's masks), and that host /sys is then read-only to the child.
    FreshSysfs { target: CString },
    /// chroot(path).
    Chroot { path: CString },
    /// Reset these ignored signals to SIG_DFL (bit N-1 = signal N).
    SignalDefault { set: u64 },
    /// setsid().
    Setsid,
    /// setpgid(0, pgid).
    Setpgid { pgid: i32 },
    /// Copy `fd` to a close-on-exec fd above every target, before a map overwrites it.
    DupAway { fd: RawFd, above: RawFd, slot: usize, target: RawFd },
    /// dup3(from, to, 0).
    Dup2 { from: FdRef, to: RawFd },
    /// Clear FD_CLOEXEC on an fd the child keeps under its own number.
    ClearCloexec { fd: RawFd },
    /// close_range(first, last).
    CloseRange { first: u32, last: u32 },
    /// umask(mask).
    Umask { mask: u32 },
    /// prlimit64(0, resource, {soft, hard}).
    Setrlimit { resource: Resource, soft: u64, hard: u64 },
    /// If this process's `RLIMIT_NOFILE` is still `hard:hard` (what a server that raised its
    /// soft limit to its hard one left), prlimit64 it to `soft:hard` (the limit the server was
    /// given); otherwise leave it. Never fails: a limit changed since is the child's to keep.
    RestoreFdLimit { soft: u64, hard: u64 },
    /// setpriority(PRIO_PROCESS, 0, value).
    Nice { value: i32 },
    /// sched_setaffinity(0, mask); `cpus` is the list it came from, for messages.
    Affinity { mask: Vec<u64>, cpus: Vec<usize> },
    /// chdir(path).
    Chdir { path: CString },
    /// setgroups(groups); EPERM ignored when groups are only dropped implicitly.
    Setgroups { groups: Vec<u32>, ignore_eperm: bool },
    /// setresgid(gid, gid, gid).
    Setgid { gid: u32 },
    /// setresuid(uid, uid, uid).
    Setuid { uid: u32 },
    /// prctl(PR_SET_PDEATHSIG) and a getppid() check against `parent`.
    ParentDeathSignal { signal: i32, parent: i32 },
    /// prctl(PR_SET_NO_NEW_PRIVS, 1).
    NoNewPrivs,
    /// prctl(PR_CAPBSET_DROP) of every capability in the bounding set, so that no execve
    /// (of a setuid-root or file-capability program, or by uid 0) can gain one back.
    DropBoundingCaps,
    /// Clear the ambient set (PR_CAP_AMBIENT_CLEAR_ALL), capset the effective, permitted
    /// and inheritable sets to empty, and join a new session keyring.
    ClearCaps,
}
