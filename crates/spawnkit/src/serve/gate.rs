//! The server's policy on a decoded [`Command`]: what a client may ask of a process that
//! runs with the server's rights (docs/protocol.md, "Gating"). Refusals are errors of kind
//! `Unsupported` (step `"serve"`), sent back as any spawn error is.

use std::path::Path;

use crate::error::{quoted, Error, ErrorKind, Result};
use crate::spawn::command::Command;
use crate::spawn::options::Stdio;

/// Who is asking, from `SO_PEERCRED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Peer {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

fn refuse(subject: impl Into<String>, why: impl Into<String>) -> Error {
    Error::new(ErrorKind::Unsupported, "serve", subject).with_reason(why)
}

fn absolute(what: &str, p: &Path) -> Result<()> {
    if p.is_absolute() {
        Ok(())
    } else {
        Err(refuse(
            format!("{what} {}", quoted(p)),
            "a relative path would resolve against the server's working directory",
        ))
    }
}

/// Check (and adjust) `cmd` for `peer` on a server running as `server_uid`.
///
/// For every client: each standard stream must be given (the client passes its own fds;
/// `Inherit` would be the server's), the cwd and the environment must be explicit,
/// `close_other_fds(false)` is refused, paths must be absolute, a lock must not wait (the
/// server has one thread), and `kill_on_drop` is cleared (the client's `Child` applies it).
/// For a client of another uid (a root server's `--allow-uid`), the child runs as the peer's
/// uid and gid with no supplementary groups, and whatever would be root for the client is
/// refused: any isolation (namespaces, maps, /tmp, binds, network, hostname, chroot, lock,
/// cgroup, keep_caps), credentials other than its own, negative nice, hard limits above the
/// client's own, a process group other than its own new one. (The server then spawns with
/// the peer's filesystem ids, so the child's chdir is checked as the peer.)
pub(crate) fn gate(cmd: &mut Command, peer: Peer, server_uid: u32) -> Result<()> {
    for (i, s) in cmd.stdio.iter().enumerate() {
        if matches!(s, None | Some(Stdio::Inherit)) {
            return Err(refuse(
                format!("fd {i}"),
                "Inherit would give the child the server's own fd: pass the client's fd",
            ));
        }
    }
    let Some(cwd) = &cmd.cwd else {
        return Err(refuse("cwd", "the working directory must be sent (the client's own)"));
    };
    if !cwd.as_os_str().is_empty() {
        // (An empty one fails at chdir, ENOENT, as it does for a local spawn.)
        absolute("cwd", cwd)?;
    }
    if !cmd.env_clear && cmd.base_env.is_none() {
        return Err(refuse(
            "environment",
            "the environment must be sent (env_clear or base_env): the server's must not leak",
        ));
    }
    if !cmd.close_other_fds {
        return Err(refuse("close_other_fds(false)", "it would hand over the server's fds"));
    }
    let iso = &cmd.isolation;
    for (src, dst) in &iso.ro_binds {
        absolute("ro_bind", src)?;
        absolute("ro_bind", dst)?;
    }
    for (what, p) in [("chroot", &iso.chroot), ("cgroup", &iso.cgroup)] {
        if let Some(p) = p {
            absolute(what, p)?;
        }
    }
    if let Some(dir) = iso.private_tmp.as_ref().and_then(|t| t.dir.as_ref()) {
        absolute("private_tmp", dir)?;
    }
    if let Some(lock) = &iso.lock {
        absolute("lock", &lock.path)?;
        if lock.timeout != Some(std::time::Duration::ZERO) {
            return Err(refuse(
                format!("lock {}", quoted(&lock.path)),
                "a lock that waits would stall the server: take it in the client and pass the fd, \
                 or ask for no wait",
            ));
        }
    }
    cmd.kill_on_drop = false;
    if peer.uid == server_uid {
        return Ok(());
    }
    gate_foreign(cmd, peer)
}

/// A client of another uid, let into a root server with `--allow-uid`.
fn gate_foreign(cmd: &mut Command, peer: Peer) -> Result<()> {
    let iso = &cmd.isolation;
    let isolated = !iso.unshare.is_empty()
        || iso.user_map.is_some()
        || iso.private_tmp.is_some()
        || !iso.ro_binds.is_empty()
        || iso.private_net
        || iso.hostname.is_some()
        || iso.chroot.is_some()
        || iso.lock.is_some()
        || iso.cgroup.is_some()
        || iso.keep_caps;
    if isolated {
        return Err(refuse(
            "isolation",
            "a client of another uid may not ask a root server for namespaces, maps, mounts, \
             chroot, locks, cgroups or capabilities (spawn locally instead)",
        ));
    }
    if cmd.uid.is_some_and(|u| u != peer.uid)
        || cmd.gid.is_some_and(|g| g != peer.gid)
        || cmd.groups.as_ref().is_some_and(|g| g.iter().any(|&g| g != peer.gid))
    {
        return Err(refuse("credentials", "a client of another uid runs as itself only"));
    }
    if cmd.nice.is_some_and(|n| n < 0) {
        return Err(refuse("nice", "a negative nice needs privilege"));
    }
    if cmd.pgid.is_some_and(|p| p != 0) {
        return Err(refuse("pgid", "only a new process group (0)"));
    }
    for &(res, _soft, hard) in &cmd.rlimits {
        // The peer's own hard limit (from /proc/PID/limits of its SO_PEERCRED pid; prlimit
        // would need CAP_SYS_RESOURCE): raising it is what root may do and the peer may not.
        let peer_hard = peer_hard_limit(peer.pid, res.raw()).ok_or_else(|| {
            refuse(format!("rlimit {}", res.name()), "the client's own limit cannot be read")
        })?;
        if hard > peer_hard {
            return Err(refuse(
                format!("rlimit {}", res.name()),
                "above the client's own hard limit",
            ));
        }
    }
    // What the command leaves unset must be the peer's, not the root server's: every
    // resource limit it does not set is the peer's own, and the child is at least as nice
    // as the peer (nice is an increment on the server's niceness).
    for res in crate::Resource::ALL.iter().copied() {
        if cmd.rlimits.iter().any(|(r, _, _)| *r == res) {
            continue;
        }
        let (soft, hard) = peer_limits(peer.pid, res.raw()).ok_or_else(|| {
            refuse(format!("rlimit {}", res.name()), "the client's own limit cannot be read")
        })?;
        cmd.rlimits.push((res, soft, hard));
    }
    let peer_stat = format!("/proc/{}/stat", peer.pid);
    let (Some(peer_nice), Some(own_nice)) = (nice_of(&peer_stat), nice_of("/proc/self/stat"))
    else {
        return Err(refuse("nice", "the client's niceness cannot be read"));
    };
    let need = peer_nice - own_nice;
    if cmd.nice.unwrap_or(0) < need {
        cmd.nice = Some(need);
    }
    cmd.uid = Some(peer.uid);
    cmd.gid = Some(peer.gid);
    cmd.groups = Some(Vec::new());
    Ok(())
}

/// The niceness in a /proc/PID/stat (field 19).
fn nice_of(path: &str) -> Option<i32> {
    let text = std::fs::read_to_string(path).ok()?;
    text.rsplit_once(')')?.1.split_whitespace().nth(16)?.parse().ok()
}

/// The soft and hard limit of resource number `raw` of process `pid`, from /proc/PID/limits.
fn peer_limits(pid: i32, raw: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = text.lines().nth(1 + raw as usize)?;
    let mut values = line.get(26..)?.split_whitespace();
    let parse = |v: &str| match v {
        "unlimited" => Some(crate::RLIM_INFINITY),
        n => n.parse().ok(),
    };
    Some((parse(values.next()?)?, parse(values.next()?)?))
}

/// The hard limit of resource number `raw` of process `pid`, from /proc/PID/limits (its rows
/// are in the kernel's resource order after one header line; a value is a number or
/// "unlimited").
fn peer_hard_limit(pid: i32, raw: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = text.lines().nth(1 + raw as usize)?;
    let hard = line.get(26..)?.split_whitespace().nth(1)?;
    match hard {
        "unlimited" => Some(crate::RLIM_INFINITY),
        n => n.parse().ok(),
    }
}
