//! The wire form of a [`Command`]: every option in a versioned binary form, its fds passed
//! beside the bytes by index (what the spawn server receives; see docs/wire.md).
//!
//! Layout: a little-endian `u16` format version ([`Command::WIRE_VERSION`]), then one
//! [`WireCommand`] in [postcard](https://docs.rs/postcard)'s format. postcard was chosen over
//! bincode because its format is specified and stable since 1.0 (a document of its own, not
//! "whatever this release writes"), it is `no_std`-friendly and maintained, every sequence and
//! byte string is length-prefixed (varint), and `take_from_bytes` hands back what was not
//! read, so trailing bytes are refused here. Its decoder checks a length against the bytes
//! left before it allocates, so a length prefix of 2^60 is an error, not an allocation:
//! decoding is bounded by the input's size, which matters because the bytes come from a
//! client (every byte is treated as hostile).
//!
//! The option types themselves (`Strategy`, `Resource`, `Signal`, `SigSet`, `Namespaces`,
//! `UserMap`, `IdMap`, `TmpOptions`...) derive or implement serde's traits, checking what they
//! check elsewhere (a signal is 1..=64, namespace bits are known ones). What holds paths or
//! fds is mirrored here, paths and `OsString`s as raw bytes (never lossy UTF-8), and
//! [`Command::to_wire`] destructures `Command` and `Isolation` exhaustively: a new field
//! fails to compile until it has a place in the wire form.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::command::Command;
use super::options::{PathSearch, Resource, SigSet, Signal, Stdio, Strategy};
use crate::error::{Error, ErrorKind, Result};
use crate::isolate::{Isolation, Lock, Namespaces, PrivateTmp, TmpOptions, UserMap};

/// A path or `OsString` as its raw bytes (postcard: a length-prefixed byte string).
#[derive(Debug, PartialEq, Eq)]
struct Bytes<'a>(Cow<'a, [u8]>);

impl<'a> Bytes<'a> {
    fn of(s: &'a OsStr) -> Bytes<'a> {
        Bytes(Cow::Borrowed(s.as_bytes()))
    }
    fn path(p: &'a Path) -> Bytes<'a> {
        Bytes::of(p.as_os_str())
    }
    fn os(self) -> OsString {
        OsString::from_vec(self.0.into_owned())
    }
    fn into_path(self) -> PathBuf {
        PathBuf::from(self.os())
    }
}

impl Serialize for Bytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes<'_> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> std::result::Result<Self::Value, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: de::Error>(
                self,
                v: Vec<u8>,
            ) -> std::result::Result<Self::Value, E> {
                Ok(v)
            }
        }
        Ok(Bytes(Cow::Owned(d.deserialize_byte_buf(V)?)))
    }
}

/// A standard stream on the wire: an fd is an index into the fds passed beside the bytes.
#[derive(Debug, Serialize, Deserialize)]
enum WireStdio {
    Inherit,
    Null,
    Pipe,
    Stdout,
    /// `Stdio::File`, `Stdio::Owned` and `Stdio::Fd`: the fd at this index (decoded as
    /// `Stdio::Owned`: the command owns what it received).
    Fd(u32),
    /// `Stdio::Closed` (last: a variant added at the end leaves every earlier form as it was).
    Closed,
}

#[derive(Debug, Serialize, Deserialize)]
struct WireTmp<'a> {
    dir: Option<Bytes<'a>>,
    options: TmpOptions,
}

#[derive(Debug, Serialize, Deserialize)]
struct WireLock<'a> {
    path: Bytes<'a>,
    shared: bool,
    timeout: Option<Duration>,
}

/// [`Isolation`] on the wire.
#[derive(Debug, Serialize, Deserialize)]
struct WireIsolation<'a> {
    unshare: Namespaces,
    user_map: Option<UserMap>,
    private_tmp: Option<WireTmp<'a>>,
    ro_binds: Vec<(Bytes<'a>, Bytes<'a>)>,
    private_net: bool,
    hostname: Option<Bytes<'a>>,
    chroot: Option<Bytes<'a>>,
    lock: Option<WireLock<'a>>,
    cgroup: Option<Bytes<'a>>,
    keep_caps: bool,
}

/// [`Command`] on the wire, field for field (the order is the layout).
#[derive(Debug, Serialize, Deserialize)]
struct WireCommand<'a> {
    program: Bytes<'a>,
    args: Vec<Bytes<'a>>,
    arg0: Option<Bytes<'a>>,
    env_clear: bool,
    env: Vec<(Bytes<'a>, Option<Bytes<'a>>)>,
    base_env: Option<Vec<(Bytes<'a>, Bytes<'a>)>>,
    cwd: Option<Bytes<'a>>,
    stdio: [Option<WireStdio>; 3],
    /// (the child's fd, index of the parent's fd in the list passed beside).
    fds: Vec<(i32, u32)>,
    close_other_fds: bool,
    sigmask: SigSet,
    restore_signals: bool,
    sig_default: SigSet,
    setsid: bool,
    pgid: Option<i32>,
    rlimits: Vec<(Resource, u64, u64)>,
    nice: Option<i32>,
    cpus: Option<Vec<u64>>,
    uid: Option<u32>,
    gid: Option<u32>,
    groups: Option<Vec<u32>>,
    umask: Option<u32>,
    pdeathsig: Option<Signal>,
    no_new_privs: bool,
    strategy: Strategy,
    kill_on_drop: bool,
    path_search: PathSearch,
    isolation: WireIsolation<'a>,
    may_die_before_exec: bool,
}

/// What a spawn server's client fills in for the parts of a command that would otherwise
/// be the spawning process's: its own cwd (where the command sets none, or joined with a
/// relative one) and environment (where the command sets none), and per standard stream
/// what to send instead (see [`Filled`]).
pub(crate) struct Fill<'f> {
    pub cwd: Option<&'f Path>,
    pub base_env: Option<&'f [(OsString, OsString)]>,
    /// The base environment (the command's or `base_env` above) is the one the connection
    /// holds already (an Env frame sent before): written as none, the request flagged
    /// `FLAG_CONN_ENV`.
    pub conn_env: bool,
    pub stdio: [Option<Filled>; 3],
}

/// A standard stream as a spawn server's client fills it in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Filled {
    /// A fd of the client's to pass: its own 0-2 for `Inherit`, the child's end of a pipe it
    /// made for `Pipe`.
    Fd(RawFd),
    /// Closed in the child, for an inherited stream that the client has closed or marked
    /// close-on-exec: what a local child finds there (nothing), never whatever holds that
    /// number in the server.
    Closed,
}

fn decode_error(subject: impl Into<String>, why: &str) -> Error {
    Error::invalid("decode", subject, why)
}

/// The bytes after the format version, if it is this build's.
fn versioned(bytes: &[u8]) -> Result<&[u8]> {
    let (version, body) = match bytes {
        [a, b, body @ ..] => (u16::from_le_bytes([*a, *b]), body),
        _ => return Err(decode_error("", "too short for the format version")),
    };
    if version != Command::WIRE_VERSION {
        // Unsupported, not InvalidInput: a peer of another version, not damaged bytes.
        return Err(decode_error(
            format!("version {version}"),
            &format!("unknown wire format version (this build reads {})", Command::WIRE_VERSION),
        )
        .with_kind(ErrorKind::Unsupported));
    }
    Ok(body)
}

/// An environment on the wire (the body of the spawn server's Env frame, docs/protocol.md):
/// the format version, then the (name, value) pairs as a `base_env` is written in a
/// command, in order.
pub(crate) fn env_to_wire(vars: &[(OsString, OsString)]) -> Result<Vec<u8>> {
    let wire: Vec<(Bytes<'_>, Bytes<'_>)> =
        vars.iter().map(|(k, v)| (Bytes::of(k), Bytes::of(v))).collect();
    postcard::to_extend(&wire, Command::WIRE_VERSION.to_le_bytes().to_vec())
        .map_err(|e| Error::invalid("encode", "environment", &e.to_string()))
}

/// An environment from [`env_to_wire`]'s bytes. As hostile as a command's: nothing here
/// panics, and no length prefix allocates past the bytes left (though a pair decoded takes
/// more memory than its few bytes on the wire: a server bounds what it keeps); too short, another version,
/// bytes that do not decode and trailing bytes are errors (step `"decode"`). What a
/// `base_env` may hold is checked where it is used, as for a command's (a NUL fails the
/// spawn).
pub(crate) fn env_from_wire(bytes: &[u8]) -> Result<Arc<[(OsString, OsString)]>> {
    let body = versioned(bytes)?;
    let (wire, rest) = postcard::take_from_bytes::<Vec<(Bytes<'static>, Bytes<'static>)>>(body)
        .map_err(|e| decode_error("environment", &format!("malformed: {e}")))?;
    if !rest.is_empty() {
        return Err(decode_error("environment", &format!("{} trailing bytes", rest.len())));
    }
    Ok(wire.into_iter().map(|(k, v)| (k.os(), v.os())).collect())
}

/// The fds passed beside the bytes, each taken at most once and every one taken.
enum Passed<'f> {
    /// The command's own (closed with it, or handed over by its spawn).
    Owned(Vec<Option<OwnedFd>>),
    /// A SpawnMany frame's fds, which its commands share (kept open by each command's hold
    /// on them): this command's are `frame[indices[i]]`.
    Shared { frame: &'f [OwnedFd], indices: &'f [u8], used: Vec<bool> },
}

/// A fd taken from [`Passed`]: the command's own, or one of a frame's that it borrows.
enum Taken {
    Owned(OwnedFd),
    Borrowed(RawFd),
}

impl Taken {
    fn raw(&self) -> RawFd {
        match self {
            Taken::Owned(fd) => fd.as_raw_fd(),
            Taken::Borrowed(raw) => *raw,
        }
    }
}

impl Passed<'_> {
    fn take(&mut self, index: u32) -> Result<Taken> {
        let n = match self {
            Passed::Owned(fds) => fds.len(),
            Passed::Shared { indices, .. } => indices.len(),
        };
        let at = usize::try_from(index).ok().filter(|&i| i < n).ok_or_else(|| {
            decode_error(format!("fd index {index}"), &format!("out of range ({n} fds passed)"))
        })?;
        let twice = || decode_error(format!("fd index {index}"), "used twice");
        match self {
            Passed::Owned(fds) => fds[at].take().map(Taken::Owned).ok_or_else(twice),
            Passed::Shared { frame, indices, used } => {
                if std::mem::replace(&mut used[at], true) {
                    return Err(twice());
                }
                let fd = frame.get(indices[at] as usize).ok_or_else(|| {
                    decode_error(format!("fd index {index}"), "not among the frame's fds")
                })?;
                Ok(Taken::Borrowed(fd.as_raw_fd()))
            }
        }
    }

    fn all_used(&self) -> Result<()> {
        let unused = match self {
            Passed::Owned(fds) => fds.iter().position(Option::is_some),
            Passed::Shared { used, .. } => used.iter().position(|&u| !u),
        };
        match unused {
            Some(i) => Err(decode_error(format!("fd index {i}"), "passed but not used")),
            None => Ok(()),
        }
    }
}

impl Command {
    /// The version of the wire form this build writes and reads.
    pub const WIRE_VERSION: u16 = 2;

    /// The command's versioned binary form, and the fds it refers to by index, to pass
    /// beside the bytes (with `SCM_RIGHTS`). A fd of `Stdio::File`, `Stdio::Owned` or
    /// `Stdio::Fd`, and the parent side of each [`fd`](Command::fd) map, is one entry of the
    /// list (a fd used twice is listed twice); the numbers are this process's and stay
    /// borrowed from the command (or, for `Stdio::Fd` and maps, from the caller): keep them
    /// open until they are sent. `Stdio::Pipe`, `Null`, `Inherit`, `Stdout` and `Closed` are
    /// sent as themselves.
    ///
    /// Errors (kind [`InvalidInput`](ErrorKind::InvalidInput) or, for a hook,
    /// [`Unsupported`](ErrorKind::Unsupported), step `"encode"`): a [`pre_exec`] hook (code
    /// cannot be sent), a negative fd.
    ///
    /// [`pre_exec`]: Command::pre_exec
    pub fn to_wire(&self) -> Result<(Vec<u8>, Vec<RawFd>)> {
        self.encode(None)
    }

    /// [`to_wire`](Command::to_wire) with what a spawn server's client fills in where the
    /// command leaves it to the spawning process (see [`Fill`]).
    pub(crate) fn to_wire_filled(&self, fill: &Fill<'_>) -> Result<(Vec<u8>, Vec<RawFd>)> {
        self.encode(Some(fill))
    }

    fn encode(&self, fill: Option<&Fill<'_>>) -> Result<(Vec<u8>, Vec<RawFd>)> {
        // Exhaustive on purpose: a new option fails to compile here until it is on the wire.
        let Command {
            program,
            args,
            arg0,
            env_clear,
            env,
            base_env,
            cwd,
            stdio,
            fds,
            held_fds: _,   // owned copies of fds named in `fds`, sent through those
            shared_fds: _, // what keeps borrowed fds of `stdio` and `fds` open
            close_other_fds,
            sigmask,
            restore_signals,
            sig_default,
            setsid,
            pgid,
            rlimits,
            nice,
            cpus,
            uid,
            gid,
            groups,
            umask,
            pdeathsig,
            no_new_privs,
            strategy,
            pre_exec,
            pre_exec_may_exit: _, // about a pre_exec hook, which is never serialized
            may_die_before_exec,
            kill_on_drop,
            isolation,
            path_search,
        } = self;
        if !pre_exec.is_empty() {
            return Err(Error::new(ErrorKind::Unsupported, "encode", "pre_exec").with_reason(
                "a pre_exec hook is code in this process: a command with one cannot be serialized",
            ));
        }
        let mut passed: Vec<RawFd> = Vec::new();
        // `what` names the fd in an error only (formatted then, not per request).
        let mut pass = |fd: RawFd, what: &dyn Fn() -> String| -> Result<u32> {
            if fd < 0 {
                return Err(Error::invalid("encode", what(), "negative fd"));
            }
            passed.push(fd);
            u32::try_from(passed.len() - 1)
                .map_err(|_| Error::invalid("encode", what(), "too many fds"))
        };
        let mut wire_stdio: [Option<WireStdio>; 3] = [None, None, None];
        for (i, (slot, spec)) in wire_stdio.iter_mut().zip(stdio).enumerate() {
            match fill.and_then(|f| f.stdio[i]) {
                Some(Filled::Fd(fd)) => {
                    *slot = Some(WireStdio::Fd(pass(fd, &|| format!("fd {fd} -> {i}"))?));
                    continue;
                }
                Some(Filled::Closed) => {
                    *slot = Some(WireStdio::Closed);
                    continue;
                }
                None => {}
            }
            *slot = match spec {
                None => None,
                Some(Stdio::Inherit) => Some(WireStdio::Inherit),
                Some(Stdio::Null) => Some(WireStdio::Null),
                Some(Stdio::Pipe) => Some(WireStdio::Pipe),
                Some(Stdio::Stdout) => Some(WireStdio::Stdout),
                Some(Stdio::Closed) => Some(WireStdio::Closed),
                Some(Stdio::File(f)) => {
                    Some(WireStdio::Fd(pass(f.as_raw_fd(), &|| format!("fd {i}"))?))
                }
                Some(Stdio::Owned(f)) => {
                    Some(WireStdio::Fd(pass(f.as_raw_fd(), &|| format!("fd {i}"))?))
                }
                Some(Stdio::Fd(fd)) => {
                    Some(WireStdio::Fd(pass(*fd, &|| format!("fd {fd} -> {i}"))?))
                }
            };
        }
        let mut wire_fds = Vec::with_capacity(fds.len());
        for &(child, parent) in fds {
            wire_fds.push((child, pass(parent, &|| format!("fd {parent} -> {child}"))?));
        }
        let wire = WireCommand {
            program: Bytes::of(program),
            args: args.iter().map(|a| Bytes::of(a)).collect(),
            arg0: arg0.as_deref().map(Bytes::of),
            env_clear: *env_clear,
            env: env.iter().map(|(k, v)| (Bytes::of(k), v.as_deref().map(Bytes::of))).collect(),
            base_env: if fill.is_some_and(|f| f.conn_env) {
                None
            } else {
                base_env
                    .as_deref()
                    .or(fill.and_then(|f| if *env_clear { None } else { f.base_env }))
                    .map(|b| b.iter().map(|(k, v)| (Bytes::of(k), Bytes::of(v))).collect())
            },
            // The fill's cwd replaces the command's (a relative one, resolved by the client).
            cwd: fill.and_then(|f| f.cwd).or(cwd.as_deref()).map(Bytes::path),
            stdio: wire_stdio,
            fds: wire_fds,
            close_other_fds: *close_other_fds,
            sigmask: *sigmask,
            restore_signals: *restore_signals,
            sig_default: *sig_default,
            setsid: *setsid,
            pgid: *pgid,
            rlimits: rlimits.clone(),
            nice: *nice,
            cpus: cpus.as_ref().map(|c| c.iter().map(|&n| n as u64).collect()),
            uid: *uid,
            gid: *gid,
            groups: groups.clone(),
            umask: *umask,
            pdeathsig: *pdeathsig,
            no_new_privs: *no_new_privs,
            strategy: *strategy,
            kill_on_drop: *kill_on_drop,
            may_die_before_exec: *may_die_before_exec,
            path_search: *path_search,
            isolation: isolation_to_wire(isolation),
        };
        let bytes = postcard::to_extend(&wire, Command::WIRE_VERSION.to_le_bytes().to_vec())
            .map_err(|e| Error::invalid("encode", "", &e.to_string()))?;
        Ok((bytes, passed))
    }

    /// A command from its wire form ([`to_wire`](Command::to_wire)'s bytes) and the fds
    /// passed beside them, which the command takes over: a stdio fd becomes
    /// [`Stdio::Owned`], a map's parent fd is held by the command until it is dropped.
    ///
    /// Every byte is treated as hostile: nothing here panics, and nothing is allocated
    /// beyond what the bytes' own size pays for. Errors (kind
    /// [`InvalidInput`](ErrorKind::InvalidInput), step `"decode"`): too short for the
    /// version, an unknown version, bytes that do not decode (a bad tag, a signal outside
    /// 1..=64, unknown namespace bits, a length past the end), trailing bytes, a fd index out
    /// of range, used twice or never used, a child fd mapped twice. On error every fd passed
    /// is closed.
    pub fn from_wire(bytes: &[u8], fds: Vec<OwnedFd>) -> Result<Command> {
        Command::decode(bytes, Passed::Owned(fds.into_iter().map(Some).collect()), None)
    }

    /// [`from_wire`](Command::from_wire) for a command of a SpawnMany frame whose commands
    /// share the frame's fds (`FLAG_FD_INDEX`): its fd `i` is `frame[indices[i]]`, borrowed;
    /// the command holds the frame's fds open until it is dropped.
    pub(crate) fn from_wire_shared(
        bytes: &[u8],
        frame: &Arc<[OwnedFd]>,
        indices: &[u8],
    ) -> Result<Command> {
        let used = vec![false; indices.len()];
        let passed = Passed::Shared { frame, indices, used };
        Command::decode(bytes, passed, Some(Arc::clone(frame)))
    }

    fn decode(
        bytes: &[u8],
        mut passed: Passed<'_>,
        shared_fds: Option<Arc<[OwnedFd]>>,
    ) -> Result<Command> {
        let body = versioned(bytes)?;
        let (wire, rest) = postcard::take_from_bytes::<WireCommand<'static>>(body)
            .map_err(|e| decode_error("", &format!("malformed command: {e}")))?;
        if !rest.is_empty() {
            return Err(decode_error("", &format!("{} trailing bytes", rest.len())));
        }
        let WireCommand {
            program,
            args,
            arg0,
            env_clear,
            env,
            base_env,
            cwd,
            stdio,
            fds,
            close_other_fds,
            sigmask,
            restore_signals,
            sig_default,
            setsid,
            pgid,
            rlimits,
            nice,
            cpus,
            uid,
            gid,
            groups,
            umask,
            pdeathsig,
            no_new_privs,
            strategy,
            kill_on_drop,
            path_search,
            isolation,
            may_die_before_exec,
        } = wire;
        // The builder keeps each environment name once; so must a decoded command (a list
        // of repeated names would make planning quadratic).
        let mut names = std::collections::HashSet::with_capacity(env.len());
        for (k, _) in &env {
            if !names.insert(k.0.as_ref()) {
                return Err(decode_error("", "an environment name appears twice in the changes"));
            }
        }
        drop(names);
        let mut cmd_stdio: [Option<Stdio>; 3] = [None, None, None];
        for (slot, spec) in cmd_stdio.iter_mut().zip(stdio) {
            *slot = match spec {
                None => None,
                Some(WireStdio::Inherit) => Some(Stdio::Inherit),
                Some(WireStdio::Null) => Some(Stdio::Null),
                Some(WireStdio::Pipe) => Some(Stdio::Pipe),
                Some(WireStdio::Stdout) => Some(Stdio::Stdout),
                Some(WireStdio::Closed) => Some(Stdio::Closed),
                Some(WireStdio::Fd(index)) => Some(match passed.take(index)? {
                    Taken::Owned(fd) => Stdio::Owned(fd),
                    Taken::Borrowed(raw) => Stdio::Fd(raw),
                }),
            };
        }
        let mut maps = Vec::with_capacity(fds.len());
        let mut held = Vec::with_capacity(fds.len());
        for (child, index) in fds {
            if maps.iter().any(|&(c, _)| c == child) {
                return Err(decode_error(format!("child fd {child}"), "mapped twice"));
            }
            let fd = passed.take(index)?;
            maps.push((child, fd.raw()));
            if let Taken::Owned(fd) = fd {
                held.push(fd);
            }
        }
        passed.all_used()?;
        let cpus = match cpus {
            None => None,
            Some(list) => Some(
                list.into_iter()
                    .map(|n| {
                        usize::try_from(n)
                            .map_err(|_| decode_error(format!("cpu {n}"), "not a CPU number"))
                    })
                    .collect::<Result<Vec<usize>>>()?,
            ),
        };
        // Built field by field (no `..`): a new field fails to compile until it is decoded.
        Ok(Command {
            program: program.os(),
            args: args.into_iter().map(Bytes::os).collect(),
            arg0: arg0.map(Bytes::os),
            env_clear,
            env: env.into_iter().map(|(k, v)| (k.os(), v.map(Bytes::os))).collect(),
            base_env: base_env.map(|b| b.into_iter().map(|(k, v)| (k.os(), v.os())).collect()),
            cwd: cwd.map(Bytes::into_path),
            stdio: cmd_stdio,
            fds: maps,
            held_fds: held,
            shared_fds,
            close_other_fds,
            sigmask,
            restore_signals,
            sig_default,
            setsid,
            pgid,
            rlimits,
            nice,
            cpus,
            uid,
            gid,
            groups,
            umask,
            pdeathsig,
            no_new_privs,
            strategy,
            pre_exec: Vec::new(),
            pre_exec_may_exit: false,
            may_die_before_exec,
            kill_on_drop,
            isolation: isolation_from_wire(isolation),
            path_search,
        })
    }
}

fn isolation_to_wire(iso: &Isolation) -> WireIsolation<'_> {
    let Isolation {
        unshare,
        user_map,
        private_tmp,
        ro_binds,
        private_net,
        hostname,
        chroot,
        lock,
        cgroup,
        keep_caps,
    } = iso;
    WireIsolation {
        unshare: *unshare,
        user_map: user_map.clone(),
        private_tmp: private_tmp.as_ref().map(|PrivateTmp { dir, options }| WireTmp {
            dir: dir.as_deref().map(Bytes::path),
            options: *options,
        }),
        ro_binds: ro_binds.iter().map(|(s, d)| (Bytes::path(s), Bytes::path(d))).collect(),
        private_net: *private_net,
        hostname: hostname.as_deref().map(Bytes::of),
        chroot: chroot.as_deref().map(Bytes::path),
        lock: lock.as_ref().map(|Lock { path, shared, timeout }| WireLock {
            path: Bytes::path(path),
            shared: *shared,
            timeout: *timeout,
        }),
        cgroup: cgroup.as_deref().map(Bytes::path),
        keep_caps: *keep_caps,
    }
}

fn isolation_from_wire(w: WireIsolation<'static>) -> Isolation {
    let WireIsolation {
        unshare,
        user_map,
        private_tmp,
        ro_binds,
        private_net,
        hostname,
        chroot,
        lock,
        cgroup,
        keep_caps,
    } = w;
    Isolation {
        unshare,
        user_map,
        private_tmp: private_tmp
            .map(|WireTmp { dir, options }| PrivateTmp { dir: dir.map(Bytes::into_path), options }),
        ro_binds: ro_binds.into_iter().map(|(s, d)| (s.into_path(), d.into_path())).collect(),
        private_net,
        hostname: hostname.map(Bytes::os),
        chroot: chroot.map(Bytes::into_path),
        lock: lock.map(|WireLock { path, shared, timeout }| Lock {
            path: path.into_path(),
            shared,
            timeout,
        }),
        cgroup: cgroup.map(Bytes::into_path),
        keep_caps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn os(b: &[u8]) -> OsString {
        OsString::from_vec(b.to_vec())
    }

    #[test]
    fn an_environment_round_trips_and_damage_is_refused() {
        let env = [(os(b"A"), os(b"1")), (os(b"=odd"), os(b"")), (os(b"\xff"), os(b"a=b"))];
        let bytes = env_to_wire(&env).unwrap();
        assert_eq!(&*env_from_wire(&bytes).unwrap(), &env);
        let short = env_from_wire(&bytes[..1]).unwrap_err();
        assert_eq!(short.step(), "decode", "{short}");
        let other = env_from_wire(&[9, 0, 0]).unwrap_err();
        assert_eq!(other.kind(), ErrorKind::Unsupported, "{other}");
        let trailing = env_from_wire(&[bytes.as_slice(), b"x"].concat()).unwrap_err();
        assert!(trailing.to_string().contains("trailing"), "{trailing}");
        // A count far past the bytes: an error, not an allocation.
        let huge = [&Command::WIRE_VERSION.to_le_bytes()[..], &[0xff, 0xff, 0xff, 0xff, 0x0f]];
        let huge = env_from_wire(&huge.concat()).unwrap_err();
        assert_eq!((huge.step(), huge.kind()), ("decode", ErrorKind::InvalidInput), "{huge}");
    }

    /// A command of a frame whose commands share its fds: its fd `i` is the frame's
    /// `indices[i]`, borrowed (the command holds the frame's fds open); an index out of
    /// range, used twice or not used is refused as for a command's own fds.
    #[test]
    fn a_command_decoded_with_a_frames_shared_fds_borrows_them() {
        let devnull = || -> OwnedFd { std::fs::File::open("/dev/null").unwrap().into() };
        let mut cmd = Command::new("/bin/true");
        let (a, b) = (devnull(), devnull());
        cmd.stdout(Stdio::Fd(a.as_raw_fd())).stderr(Stdio::Fd(a.as_raw_fd()));
        cmd.fd(7, b.as_raw_fd());
        let (bytes, fds) = cmd.to_wire().unwrap();
        assert_eq!(fds, [a.as_raw_fd(), a.as_raw_fd(), b.as_raw_fd()]);
        let frame: Arc<[OwnedFd]> = vec![devnull(), devnull()].into();
        let raw = |i: usize| frame[i].as_raw_fd();
        let got = Command::from_wire_shared(&bytes, &frame, &[1, 1, 0]).unwrap();
        assert!(matches!(got.stdio[1], Some(Stdio::Fd(fd)) if fd == raw(1)));
        assert!(matches!(got.stdio[2], Some(Stdio::Fd(fd)) if fd == raw(1)));
        assert_eq!(got.fds, [(7, raw(0))]);
        assert!(got.held_fds.is_empty());
        assert_eq!(Arc::strong_count(&frame), 2, "held by the command");
        drop(got);
        assert_eq!(Arc::strong_count(&frame), 1);
        for (indices, why) in [
            (&[1u8, 1][..], "out of range"),
            (&[1, 1, 0, 0][..], "passed but not used"),
            (&[1, 1, 9][..], "not among the frame's fds"),
        ] {
            let e = Command::from_wire_shared(&bytes, &frame, indices).unwrap_err();
            assert!(e.to_string().contains(why), "{indices:?}: {e}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Arbitrary bytes (after a valid version, or not): the decoder never panics.
        #[test]
        fn arbitrary_bytes_to_the_environment_decoder(
            bytes in proptest::collection::vec(any::<u8>(), 0..400),
            versioned in any::<bool>(),
        ) {
            let mut input = if versioned { Command::WIRE_VERSION.to_le_bytes().to_vec() } else { vec![] };
            input.extend_from_slice(&bytes);
            let _ = env_from_wire(&input);
        }

        /// Any environment round trips, in order.
        #[test]
        fn any_environment_round_trips(
            vars in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..20),
                 proptest::collection::vec(any::<u8>(), 0..40)),
                0..20),
        ) {
            let env: Vec<(OsString, OsString)> = vars.iter().map(|(k, v)| (os(k), os(v))).collect();
            let back = env_from_wire(&env_to_wire(&env).unwrap()).unwrap();
            prop_assert_eq!(&*back, env.as_slice());
        }
    }
}
