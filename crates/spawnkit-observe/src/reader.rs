//! Who reads the process table, checked before every BPF listing.
//!
//! The BPF task iterator sees every task of the machine: the kernel runs it over the global
//! task list whatever the credentials of whoever reads its fd, and whatever that reader's
//! /proc would show. Once loaded, reading it needs no privilege at all. So the table asks
//! before each listing (not only when it loads the program) whether the caller may have the
//! BPF view *now*, and serves it only when that view is no wider than the one /proc gives
//! the same caller. The rule:
//!
//! 1. **It could load the program now**: CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON, in the
//!    calling thread's effective set (capget(2)), and that thread in the initial user
//!    namespace (capabilities held in a namespace of its own do not count for BPF). A
//!    process that has dropped to another uid, lowered its capabilities or entered a user
//!    namespace since the load fails this.
//! 2. **Its /proc is the initial pid namespace's**: `/proc/self` names this process by its
//!    global pid, the one the records carry. (The caller's own pid namespace is checked in
//!    every read's header, in `task_iter.rs`.)
//! 3. **Its /proc hides no process from it**: the procfs mounted on its `/proc` has no
//!    `hidepid=` option, or the caller holds CAP_SYS_PTRACE, to which hidepid yields, or
//!    (`hidepid=noaccess` and `invisible`) it is a member of the mount's `gid=` group, which
//!    is root's group 0 when the option is not given.
//!
//! A caller that holds CAP_BPF+CAP_PERFMON could load a program of its own that reads every
//! task, so rule 3 protects no secret from it; it keeps the table's promise that the backend
//! changes how fast a listing is read, not what it lists. A `/proc` mounted `hidepid` (by an
//! administrator, or by systemd's `ProtectProc=` for a service) says what that process is
//! meant to see.
//!
//! Costs per BPF listing: one capget, one readlink, one stat; a caller without
//! CAP_SYS_PTRACE also reads its mountinfo (and, under hidepid, its status). Linux security
//! modules that refuse ptrace reads (SELinux, AppArmor policies) are not consulted: under
//! such a policy and hidepid, a caller with CAP_SYS_PTRACE may see fewer processes in /proc
//! than the BPF backend shows it.

use std::os::unix::fs::MetadataExt;

use super::parse;
use super::shared::Dev;
use crate::sys::creds;

const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The inode number of the initial user namespace's nsfs file, fixed by the kernel
/// (`PROC_USER_INIT_INO` in include/linux/proc_ns.h, the same since Linux 3.8).
const INIT_USER_NS_INO: u64 = 0xEFFF_FFFD;

/// Whether `caps` (an effective set) may load a tracing program: CAP_SYS_ADMIN, or CAP_BPF
/// and CAP_PERFMON.
pub(crate) fn may_load(caps: u64) -> bool {
    let has = |cap: u32| caps & (1 << cap) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

/// Why the BPF iterator must not serve the calling thread now (rules 1-3 above), or `None`
/// when it may.
pub(crate) fn bpf_refusal() -> Option<String> {
    let caps = match creds::effective_caps() {
        Ok(caps) => caps,
        Err(e) => return Some(format!("cannot read the caller's capabilities: capget: {}", os(e))),
    };
    if !may_load(caps) {
        return Some(
            "needs root or CAP_BPF+CAP_PERFMON (not among the caller's effective capabilities)"
                .into(),
        );
    }
    // Rule 2 first: where /proc is another pid namespace's, /proc/thread-self is missing.
    let me = std::process::id().to_string();
    match std::fs::read_link("/proc/self") {
        Ok(link) if link.as_os_str().as_encoded_bytes() == me.as_bytes() => {}
        Ok(link) => {
            return Some(format!(
                "not in the initial pid namespace (/proc/self is {}, getpid() {me}): the task \
                 iterator reports global pids",
                link.display()
            ))
        }
        Err(e) => {
            return Some(format!(
                "/proc is not the initial pid namespace's procfs (/proc/self: {e}): the task \
                 iterator reports global pids, which it does not show"
            ))
        }
    }
    match std::fs::metadata("/proc/thread-self/ns/user") {
        Ok(ns) if ns.ino() == INIT_USER_NS_INO => {}
        Ok(_) => {
            return Some(
                "the caller is in a user namespace of its own: capabilities held there do not \
                 count for BPF"
                    .into(),
            )
        }
        Err(e) => {
            return Some(format!(
                "cannot tell the caller's user namespace: /proc/thread-self/ns/user: {e}"
            ))
        }
    }
    if caps & (1 << CAP_SYS_PTRACE) != 0 {
        return None;
    }
    proc_hides_processes()
}

/// Rule 3 for a caller without CAP_SYS_PTRACE: why its /proc hides processes from it, or
/// `None` when it hides none. As the kernel's `has_pid_permissions` decides: `hidepid=`
/// noaccess (1) and invisible (2) let the members of the mount's `gid=` group (root's
/// group 0 when not given) see everything; ptraceable (4) lets through only what the caller
/// may ptrace.
fn proc_hides_processes() -> Option<String> {
    let cannot = |what: &str, e: &dyn std::fmt::Display| {
        Some(format!("cannot tell which processes /proc shows the caller: {what}: {e}"))
    };
    let dev = match std::fs::metadata("/proc") {
        Ok(m) => Dev::from_dev_t(m.dev()),
        Err(e) => return cannot("/proc", &e),
    };
    let mountinfo = match std::fs::read("/proc/thread-self/mountinfo") {
        Ok(text) => text,
        Err(e) => return cannot("/proc/thread-self/mountinfo", &e),
    };
    let Some(mount) = parse::proc_mount(&mountinfo, dev.major, dev.minor) else {
        return cannot("/proc/thread-self/mountinfo", &format!("no procfs of device {dev}"));
    };
    // No hidepid: /proc hides nothing, so no refusal.
    let hidepid = mount.hidepid?;
    let hidepid = String::from_utf8_lossy(hidepid);
    if !matches!(&*hidepid, "ptraceable" | "4") {
        let status = match std::fs::read("/proc/thread-self/status") {
            Ok(text) => text,
            Err(e) => return cannot("/proc/thread-self/status", &e),
        };
        if parse::status_in_group(&status, mount.gid) == Some(true) {
            return None;
        }
    }
    Some(format!(
        "/proc is mounted hidepid={hidepid}, which hides processes from this caller (not in \
         group {}, no CAP_SYS_PTRACE): the task iterator would show them",
        mount.gid
    ))
}

fn os(errno: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_may_load() {
        let bit = |cap: u32| 1u64 << cap;
        assert!(may_load(bit(CAP_SYS_ADMIN)));
        assert!(may_load(bit(CAP_BPF) | bit(CAP_PERFMON)));
        assert!(!may_load(bit(CAP_BPF)));
        assert!(!may_load(bit(CAP_PERFMON) | bit(CAP_SYS_PTRACE)));
        assert!(!may_load(0));
        assert!(may_load(u64::MAX));
    }

    /// Here (a test process, unchanged since it started): refused without the capabilities
    /// to load; served as root of the initial namespaces (whom no hidepid hides anything
    /// from).
    #[test]
    fn this_process_is_refused_only_without_the_capabilities() {
        let caps = creds::effective_caps().unwrap();
        let refusal = bpf_refusal();
        let init_ns = std::fs::metadata("/proc/self/ns/user").unwrap().ino() == INIT_USER_NS_INO;
        if !may_load(caps) {
            assert!(refusal.unwrap().contains("CAP_BPF"));
        } else if init_ns && caps & (1 << CAP_SYS_PTRACE) != 0 {
            assert_eq!(refusal, None);
        }
    }
}
