//! Isolation: namespaces, uid/gid maps, private /tmp and network, read-only binds, hostname,
//! chroot, a lock held for the child's life, cgroup placement.
//!
//! All of it compiles to steps of the same [`Plan`](crate::Plan) the child replays with raw
//! system calls (see `sys/in_child.rs`), plus clone flags: a namespace is created by the clone
//! itself (clone3 with `CLONE_NEW*`) where the strategy allows, so the child starts inside it.
//!
//! Kernel facts this is built on, checked on 6.18 (see the tests):
//! - `unshare(CLONE_NEWUSER)` refuses a caller that shares its memory, as a CLONE_VM child
//!   does; `clone3` accepts `CLONE_NEWUSER | CLONE_VM` (the child is the one that enters the
//!   namespace), so clone-vfork asks for every namespace at clone time. fork-exec calls
//!   `unshare` in the child instead (its memory is its own), which cannot make the program pid
//!   1 of a new pid namespace: that one needs clone-vfork.
//! - Writing a one-line uid_map of your own uid, unprivileged, needs `deny` in
//!   /proc/self/setgroups first; the child writes its own maps from inside the new namespace,
//!   where it holds every capability.
//! - `CLONE_INTO_CGROUP` needs clone3 and a cgroup v2 directory fd; kernels 5.4-5.6 answered
//!   E2BIG for it (systemd#33613): spawnkit reports the step rather than silently spawning
//!   outside the cgroup.

pub(crate) mod compile;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{quoted, Error, Result};

/// A set of namespaces to create for the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Namespaces(u64);

const NS_NAMES: &[(&str, u64)] = &[
    ("user", libc::CLONE_NEWUSER as u64),
    ("mount", libc::CLONE_NEWNS as u64),
    ("net", libc::CLONE_NEWNET as u64),
    ("pid", libc::CLONE_NEWPID as u64),
    ("uts", libc::CLONE_NEWUTS as u64),
    ("ipc", libc::CLONE_NEWIPC as u64),
    ("cgroup", libc::CLONE_NEWCGROUP as u64),
];

impl Namespaces {
    pub const USER: Namespaces = Namespaces(libc::CLONE_NEWUSER as u64);
    pub const MOUNT: Namespaces = Namespaces(libc::CLONE_NEWNS as u64);
    pub const NET: Namespaces = Namespaces(libc::CLONE_NEWNET as u64);
    pub const PID: Namespaces = Namespaces(libc::CLONE_NEWPID as u64);
    pub const UTS: Namespaces = Namespaces(libc::CLONE_NEWUTS as u64);
    pub const IPC: Namespaces = Namespaces(libc::CLONE_NEWIPC as u64);
    pub const CGROUP: Namespaces = Namespaces(libc::CLONE_NEWCGROUP as u64);

    /// No namespace.
    pub const fn empty() -> Namespaces {
        Namespaces(0)
    }

    /// Both sets.
    pub const fn union(self, other: Namespaces) -> Namespaces {
        Namespaces(self.0 | other.0)
    }

    /// Whether every namespace of `other` is in the set.
    pub const fn contains(self, other: Namespaces) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// A set from `CLONE_NEW*` bits (others are dropped).
    pub fn from_bits(bits: u64) -> Namespaces {
        Namespaces(bits & NS_NAMES.iter().fold(0, |a, (_, b)| a | b))
    }

    /// The `CLONE_NEW*` bits.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// The names in the set, as `--unshare` takes them.
    pub fn names(self) -> Vec<&'static str> {
        NS_NAMES.iter().filter(|(_, b)| self.0 & b != 0).map(|(n, _)| *n).collect()
    }
}

impl Serialize for Namespaces {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Namespaces {
    /// `CLONE_NEW*` bits; any other bit is an error (never silently dropped).
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Namespaces, D::Error> {
        let bits = u64::deserialize(d)?;
        let known = Namespaces::from_bits(bits);
        if known.0 != bits {
            return Err(serde::de::Error::custom(format_args!(
                "unknown namespace bits {:#x}",
                bits & !known.0
            )));
        }
        Ok(known)
    }
}

impl fmt::Display for Namespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names().join(","))
    }
}

impl FromStr for Namespaces {
    type Err = Error;
    /// A comma-separated list: `user,mount,net,pid,uts,ipc,cgroup` (`mnt`, `network` too),
    /// spaces around names allowed. It names at least one namespace, and no item is empty
    /// (`user,,net` is a typo, not two namespaces): a list that asks for nothing is an error,
    /// not a silent no-op.
    fn from_str(s: &str) -> Result<Namespaces> {
        const KNOWN: &str = "use user, mount, net, pid, uts, ipc, cgroup";
        let names = s.split(',').map(str::trim);
        if names.clone().all(str::is_empty) {
            return Err(Error::invalid(
                "unshare",
                quoted(s),
                &format!("no namespace named ({KNOWN})"),
            ));
        }
        let mut set = Namespaces::empty();
        for name in names {
            if name.is_empty() {
                return Err(Error::invalid("unshare", quoted(s), "an empty name in the list"));
            }
            let canon = match name {
                "mnt" => "mount",
                "network" => "net",
                other => other,
            };
            let bits =
                NS_NAMES.iter().find(|(n, _)| *n == canon).map(|(_, b)| *b).ok_or_else(|| {
                    Error::invalid("unshare", quoted(name), &format!("unknown namespace ({KNOWN})"))
                })?;
            set.0 |= bits;
        }
        Ok(set)
    }
}

/// One line of a uid_map or gid_map: ids `inside..inside+count` in the namespace are
/// `outside..outside+count` outside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IdMap {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

/// How the user namespace maps ids.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UserMap {
    /// The caller's uid and gid become root inside (`unshare -r`).
    Root,
    /// The caller's uid and gid stay the same inside.
    Current,
    /// Arbitrary lines (needs CAP_SETUID/CAP_SETGID outside for more than your own id).
    Custom { uid: Vec<IdMap>, gid: Vec<IdMap> },
}

/// Mount options of the private /tmp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TmpOptions {
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
}

impl Default for TmpOptions {
    /// nosuid and nodev on, exec allowed (as systemd's PrivateTmp=).
    fn default() -> TmpOptions {
        TmpOptions { nosuid: true, nodev: true, noexec: false }
    }
}

impl FromStr for TmpOptions {
    type Err = Error;
    /// `nosuid,nodev,noexec` in any combination; `none` or an empty string for none.
    fn from_str(s: &str) -> Result<TmpOptions> {
        let mut o = TmpOptions { nosuid: false, nodev: false, noexec: false };
        for opt in s.split(',').map(str::trim).filter(|n| !n.is_empty() && *n != "none") {
            match opt {
                "nosuid" => o.nosuid = true,
                "nodev" => o.nodev = true,
                "noexec" => o.noexec = true,
                _ => {
                    return Err(Error::invalid(
                        "mount",
                        opt,
                        "unknown /tmp option (use nosuid, nodev, noexec)",
                    ))
                }
            }
        }
        Ok(o)
    }
}

/// A private /tmp for the child.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PrivateTmp {
    /// Bind this directory on /tmp instead of mounting a fresh tmpfs.
    pub dir: Option<PathBuf>,
    pub options: TmpOptions,
}

/// An flock(2) lock the child holds for its whole life.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lock {
    /// The file to lock; created (mode 0666 & ~umask) if missing, as flock(1) does.
    pub path: PathBuf,
    /// A shared lock instead of an exclusive one.
    pub shared: bool,
    /// How long to wait: `None` forever, `Some(ZERO)` not at all.
    pub timeout: Option<Duration>,
}

impl Lock {
    /// An exclusive lock, waiting as long as it takes.
    pub fn exclusive(path: impl Into<PathBuf>) -> Lock {
        Lock { path: path.into(), shared: false, timeout: None }
    }
}

/// Everything isolation a [`Command`](crate::Command) asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Isolation {
    pub unshare: Namespaces,
    pub user_map: Option<UserMap>,
    pub private_tmp: Option<PrivateTmp>,
    pub ro_binds: Vec<(PathBuf, PathBuf)>,
    pub private_net: bool,
    pub hostname: Option<OsString>,
    pub chroot: Option<PathBuf>,
    pub lock: Option<Lock>,
    pub cgroup: Option<PathBuf>,
    /// Keep the capabilities a fenced child would otherwise lose (see `fenced`).
    pub keep_caps: bool,
}

impl Isolation {
    /// Whether the child is fenced: a namespace other than a user namespace alone, or a
    /// chroot. A fenced child starts with no capabilities unless `keep_caps` is set: with
    /// them, root inside could undo its own fences (umount the private /tmp, remount a
    /// read-only bind writable, setns back, read /proc/PID/root of the parent).
    pub(crate) fn fenced(&self, ns: Namespaces) -> bool {
        ns.bits() & !Namespaces::USER.bits() != 0 || self.chroot.is_some()
    }
}
