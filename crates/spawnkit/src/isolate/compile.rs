//! Compile an [`Isolation`] into clone flags, steps, and the fds the spawn needs (the lock
//! file, the cgroup directory). Runs in the parent, before the clone.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Instant;

use super::{Isolation, Lock, Namespaces, UserMap};
use crate::error::{escaped, quoted, Error, ErrorKind, Result};
use crate::spawn::options::Strategy;
use crate::steps::Step;
use crate::sys::parent;

/// What isolation adds to a plan.
#[derive(Default)]
pub(crate) struct Prepared {
    /// `CLONE_NEW*` flags for the clone (clone-vfork).
    pub clone_flags: u64,
    /// Steps that run first in the child, before the usual ones.
    pub early: Vec<Step>,
    /// chroot (then chdir "/" and the /proc mount), run just before the command's chdir.
    pub chroot: Vec<Step>,
    /// The lock file, opened (not yet locked), and how to lock it.
    pub lock: Option<(OwnedFd, Lock)>,
    /// The cgroup v2 directory, for CLONE_INTO_CGROUP, and its path for messages.
    pub cgroup: Option<(OwnedFd, String)>,
    /// The new pid namespace hides the parent: getppid() is 0 inside.
    pub new_pid_ns: bool,
    /// The child is fenced and must lose its capabilities (bounding set before the
    /// credential steps, every other set after them).
    pub drop_caps: bool,
    /// Arbitrary id maps, written by the parent while the child waits.
    pub id_maps: Option<IdMapJob>,
    /// The child's ends of the id-map pipes (closed in the parent after the spawn).
    pub child_ends: Vec<OwnedFd>,
}

/// Arbitrary uid/gid maps: only a process outside the new user namespace, with CAP_SETUID and
/// CAP_SETGID there, may write them (user_namespaces(7)). The spawning thread does it between
/// the clone (made without CLONE_VFORK for this) and the child's exec; see
/// `sys::spawn_clone_vfork`.
pub(crate) struct IdMapJob {
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
    /// Where the child's "ready" byte goes. The parent needs no signal (the namespace exists
    /// once the clone returns), but keeps this end open so the child's write succeeds.
    pub _ready_read: OwnedFd,
    /// The parent answers here: 4 bytes, 0 or the errno of the failed write.
    pub go_write: OwnedFd,
}

fn cpath(step: &'static str, p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::invalid(step, quoted(p), "contains a NUL byte"))
}

fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_default()
}

fn mount(
    source: Option<&str>,
    target: CString,
    fstype: Option<&str>,
    flags: u64,
    data: Option<&str>,
) -> Step {
    Step::Mount {
        source: source.map(cstr),
        target,
        fstype: fstype.map(cstr),
        flags,
        data: data.map(cstr),
    }
}

/// The mount flags the kernel locks on `path`'s mount (a remount in a user namespace must
/// keep them, else EPERM), from statvfs.
fn locked_flags(path: &Path) -> Result<u64> {
    let c = cpath("statvfs", path)?;
    let st = parent::statvfs(&c).map_err(|e| Error::os("statvfs", quoted(path), e))?;
    let mut flags = 0u64;
    for (st_bit, ms_bit) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
        (libc::ST_RDONLY, libc::MS_RDONLY),
    ] {
        if st & st_bit != 0 {
            flags |= ms_bit;
        }
    }
    Ok(flags)
}

fn map_lines(lines: &[super::IdMap]) -> Vec<u8> {
    lines
        .iter()
        .map(|m| format!("{} {} {}\n", m.inside, m.outside, m.count))
        .collect::<String>()
        .into_bytes()
}

/// MOUNT_ATTR_* bits of mount_setattr(2).
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// Make `target` and every mount below it read-only / nosuid / nodev / noexec as asked:
/// mount_setattr(AT_RECURSIVE) (5.12+) changes only those bits, so the flags the kernel locks
/// in a user namespace stay as they are; older kernels get a remount of the top mount that
/// repeats the locked flags read from `source`.
fn restrict(source: &Path, target: CString, set: u64) -> Result<Step> {
    let mut remount = libc::MS_BIND | libc::MS_REMOUNT | locked_flags(source)?;
    for (attr, ms) in [
        (MOUNT_ATTR_RDONLY, libc::MS_RDONLY),
        (MOUNT_ATTR_NOSUID, libc::MS_NOSUID),
        (MOUNT_ATTR_NODEV, libc::MS_NODEV),
        (MOUNT_ATTR_NOEXEC, libc::MS_NOEXEC),
    ] {
        if set & attr != 0 {
            remount |= ms;
        }
    }
    Ok(Step::MountSetattr { target, set, remount })
}

pub(crate) fn prepare(iso: &Isolation, strategy: Strategy) -> Result<Prepared> {
    let mut p = Prepared::default();
    if *iso == Isolation::default() {
        // The common case: no fence, nothing to add, and no system call on the spawn path.
        return Ok(p);
    }
    let privileged = parent::geteuid() == 0;
    let mut ns = iso.unshare;
    let needs_mount = iso.private_tmp.is_some() || !iso.ro_binds.is_empty();
    if needs_mount {
        ns = ns.union(Namespaces::MOUNT);
    }
    if iso.private_net {
        ns = ns.union(Namespaces::NET);
    }
    if iso.hostname.is_some() {
        ns = ns.union(Namespaces::UTS);
    }
    let mut user_map = iso.user_map.clone();
    if user_map.is_some() {
        ns = ns.union(Namespaces::USER);
    }
    // Unprivileged callers get namespaces (and chroot) only inside a user namespace of their
    // own: add one mapping them to themselves, as bubblewrap does, rather than fail with EPERM.
    if (!ns.is_empty() || iso.chroot.is_some()) && !ns.contains(Namespaces::USER) && !privileged {
        ns = ns.union(Namespaces::USER);
        user_map = Some(UserMap::Current);
    }
    if ns.contains(Namespaces::USER) && user_map.is_none() {
        user_map = Some(UserMap::Current);
    }

    if !ns.is_empty() {
        match strategy {
            Strategy::CloneVfork => p.clone_flags = ns.bits(),
            Strategy::ForkExec => {
                if ns.contains(Namespaces::PID) {
                    return Err(Error::unsupported(
                        "unshare",
                        "a pid namespace whose pid 1 is the program needs the clone-vfork strategy \
                         (unshare(CLONE_NEWPID) in a forked child only moves its children)",
                    ));
                }
                p.early.push(Step::Unshare { flags: ns.bits() });
            }
            Strategy::PosixSpawn => {
                return Err(Error::unsupported(
                    "unshare",
                    format!(
                        "the posix-spawn strategy cannot create namespaces ({ns}); use clone-vfork"
                    ),
                ))
            }
        }
    }
    p.new_pid_ns = ns.contains(Namespaces::PID);
    p.drop_caps = iso.fenced(ns) && !iso.keep_caps;

    if let Some(map) = &user_map {
        // The kernel checks a one-line own map against the *effective* ids.
        let (uid, gid) = (parent::geteuid(), parent::getegid());
        let (uids, gids) = match map {
            UserMap::Root => {
                (format!("0 {uid} 1\n").into_bytes(), format!("0 {gid} 1\n").into_bytes())
            }
            UserMap::Current => {
                (format!("{uid} {uid} 1\n").into_bytes(), format!("{gid} {gid} 1\n").into_bytes())
            }
            UserMap::Custom { uid, gid } => {
                if uid.is_empty() && gid.is_empty() {
                    return Err(Error::invalid(
                        "uid_map",
                        "[]",
                        "a custom map needs at least one line",
                    ));
                }
                (map_lines(uid), map_lines(gid))
            }
        };
        let custom = matches!(map, UserMap::Custom { .. });
        if custom && strategy != Strategy::CloneVfork {
            return Err(Error::unsupported(
                "uid_map",
                "arbitrary id maps are written by the parent during the clone: use clone-vfork",
            ));
        }
        if custom || (privileged && strategy == Strategy::CloneVfork) {
            // Written from outside by the parent (between the clone and the child's exec):
            // arbitrary maps need privilege in the parent namespace, and a privileged writer
            // leaves setgroups usable (so --groups works inside).
            let (ready_read, ready_write) =
                parent::pipe().map_err(|e| Error::os("pipe2", "", e))?;
            let (go_read, go_write) = parent::pipe().map_err(|e| Error::os("pipe2", "", e))?;
            p.early.push(Step::AwaitIdMaps {
                ready_fd: ready_write.as_raw_fd(),
                go_fd: go_read.as_raw_fd(),
                parent_fds: [ready_read.as_raw_fd(), go_write.as_raw_fd()],
            });
            p.id_maps =
                Some(IdMapJob { uid_map: uids, gid_map: gids, _ready_read: ready_read, go_write });
            p.child_ends.push(ready_write);
            p.child_ends.push(go_read);
        } else {
            // A one-line map of your own id, written by the child itself from inside, after
            // denying setgroups (required unprivileged).
            let setgroups = cstr("/proc/self/setgroups");
            p.early.push(Step::WriteFile { path: setgroups, data: b"deny".to_vec() });
            p.early.push(Step::WriteFile { path: cstr("/proc/self/uid_map"), data: uids });
            p.early.push(Step::WriteFile { path: cstr("/proc/self/gid_map"), data: gids });
        }
    }

    if ns.contains(Namespaces::MOUNT) {
        // Nothing mounted below may propagate back to the parent's namespace.
        p.early.push(mount(None, cstr("/"), None, libc::MS_REC | libc::MS_PRIVATE, None));
    }
    // Read-only binds first: their sources may live under /tmp, which is replaced next.
    for (src, dst) in &iso.ro_binds {
        if iso.private_tmp.is_some() && under_tmp(dst) {
            return Err(Error::invalid(
                "mount",
                quoted(dst),
                "is under /tmp (or not an absolute path without '..'): the private /tmp, \
                 mounted after the binds (whose sources may be under /tmp), would hide it",
            ));
        }
        let (csrc, cdst) = (cpath("mount", src)?, cpath("mount", dst)?);
        p.early.push(Step::Mount {
            source: Some(csrc),
            target: cdst.clone(),
            fstype: None,
            flags: libc::MS_BIND | libc::MS_REC,
            data: None,
        });
        p.early.push(restrict(src, cdst, MOUNT_ATTR_RDONLY)?);
    }
    if let Some(tmp) = &iso.private_tmp {
        let (mut opts, mut attrs) = (0u64, 0u64);
        for (on, ms, attr) in [
            (tmp.options.nosuid, libc::MS_NOSUID, MOUNT_ATTR_NOSUID),
            (tmp.options.nodev, libc::MS_NODEV, MOUNT_ATTR_NODEV),
            (tmp.options.noexec, libc::MS_NOEXEC, MOUNT_ATTR_NOEXEC),
        ] {
            if on {
                opts |= ms;
                attrs |= attr;
            }
        }
        match &tmp.dir {
            None => p.early.push(mount(
                Some("tmpfs"),
                cstr("/tmp"),
                Some("tmpfs"),
                opts,
                Some("mode=1777"),
            )),
            Some(dir) => {
                p.early.push(Step::Mount {
                    source: Some(cpath("mount", dir)?),
                    target: cstr("/tmp"),
                    fstype: None,
                    flags: libc::MS_BIND | libc::MS_REC,
                    data: None,
                });
                if attrs != 0 {
                    p.early.push(restrict(dir, cstr("/tmp"), attrs)?);
                }
            }
        }
    }
    // /proc of the new pid namespace, so /proc/self is the child (unshare --mount-proc);
    // inside the chroot when there is one.
    let proc_mount = (ns.contains(Namespaces::PID) && ns.contains(Namespaces::MOUNT)).then(|| {
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        mount(Some("proc"), cstr("/proc"), Some("proc"), flags, None)
    });
    // sysfs of the new network namespace, read-only, so /sys/class/net lists its interfaces
    // (only lo), not the host's; inside the chroot when there is one and it has a /sys.
    let new_net_and_mount = ns.contains(Namespaces::NET) && ns.contains(Namespaces::MOUNT);
    let sys_mount =
        new_net_and_mount.then(|| Step::FreshSysfs { target: cstr("/sys") }).filter(|_| match &iso
            .chroot
        {
            Some(root) => root.join("sys").is_dir(),
            None => true,
        });
    // A fenced child of real root is still uid 0 of the host, for which the kernel opens
    // /proc/sys (core_pattern: code run as full root), /proc/sysrq-trigger and sysfs
    // attributes by uid alone, without a capability. Where it has a mount namespace, those
    // are made read-only under it, as bubblewrap does for its /proc.
    let cover = privileged && p.drop_caps && ns.contains(Namespaces::MOUNT);
    if let Some(name) = &iso.hostname {
        if name.len() > 64 || name.is_empty() {
            return Err(Error::invalid(
                "sethostname",
                quoted(name),
                "a hostname has 1 to 64 bytes",
            ));
        }
        p.early.push(Step::Sethostname { name: name.as_bytes().to_vec() });
    }
    if iso.private_net {
        p.early.push(Step::LoopbackUp);
    }
    match &iso.chroot {
        Some(root) => {
            // chroot, then cd / so no relative path (nor --cwd) resolves outside, then /proc.
            p.chroot.push(Step::Chroot { path: cpath("chroot", root)? });
            p.chroot.push(Step::Chdir { path: cstr("/") });
            if cover {
                // The host's view, before the chroot (which may show it: --chroot /).
                cover_kernel_files(&mut p.early, true)?;
            }
            let fresh_proc = proc_mount.is_some();
            p.chroot.extend(proc_mount);
            p.chroot.extend(sys_mount);
            if cover && fresh_proc {
                cover_kernel_files(&mut p.chroot, false)?;
            }
        }
        None => {
            let fresh_sys = sys_mount.is_some();
            p.early.extend(proc_mount);
            p.early.extend(sys_mount);
            if cover {
                cover_kernel_files(&mut p.early, !fresh_sys)?;
            }
        }
    }
    if let Some(lock) = &iso.lock {
        let c = cpath("flock", &lock.path)?;
        let fd = parent::open_lock_file(&c).map_err(|e| {
            let err = Error::os("open", quoted(&lock.path), e);
            if e == libc::ENOTSUP {
                err.with_reason("a lock is a regular file or a directory (this is not)")
            } else {
                err
            }
        })?;
        p.lock = Some((fd, lock.clone()));
    }
    if let Some(cg) = &iso.cgroup {
        let fd = open_cgroup(cg)?;
        match strategy {
            Strategy::CloneVfork => p.cgroup = Some((fd, cg.display().to_string())),
            Strategy::ForkExec => {
                // No CLONE_INTO_CGROUP with fork(): the child moves itself before anything else.
                let procs = cpath("write", &cg.join("cgroup.procs"))?;
                p.early.insert(0, Step::WriteFile { path: procs, data: b"0".to_vec() });
            }
            Strategy::PosixSpawn => return Err(Error::unsupported(
                "cgroup",
                "glibc 2.36's posix_spawn cannot start a child in a cgroup (POSIX_SPAWN_SETCGROUP \
                     came in 2.39); use clone-vfork",
            )),
        }
    }
    Ok(p)
}

/// Make /proc/sys and /proc/sysrq-trigger read-only (each bound on itself, then made
/// read-only) and, with `sys`, every mount at and below /sys (sysfs, and the cgroup file
/// systems under it). Paths this kernel lacks are skipped.
fn cover_kernel_files(steps: &mut Vec<Step>, sys: bool) -> Result<()> {
    // Which of these this kernel has, and the flags a pre-5.12 remount must keep, do not
    // change while the process runs: found once, not on every fenced spawn.
    static COVERS: OnceLock<Result<(Vec<Step>, Option<Step>)>> = OnceLock::new();
    let (proc_steps, sys_step) = COVERS
        .get_or_init(|| {
            let mut proc_steps = Vec::new();
            for path in ["/proc/sys", "/proc/sysrq-trigger"] {
                if !Path::new(path).exists() {
                    continue;
                }
                proc_steps.push(Step::Mount {
                    source: Some(cstr(path)),
                    target: cstr(path),
                    fstype: None,
                    flags: libc::MS_BIND | libc::MS_REC,
                    data: None,
                });
                proc_steps.push(restrict(Path::new(path), cstr(path), MOUNT_ATTR_RDONLY)?);
            }
            let sys_step = if Path::new("/sys/kernel").is_dir() {
                Some(restrict(Path::new("/sys"), cstr("/sys"), MOUNT_ATTR_RDONLY)?)
            } else {
                None
            };
            Ok((proc_steps, sys_step))
        })
        .as_ref()
        .map_err(Clone::clone)?;
    steps.extend(proc_steps.iter().cloned());
    if sys {
        steps.extend(sys_step.iter().cloned());
    }
    Ok(())
}

/// Open a cgroup v2 directory, or say where cgroup v2 is.
fn open_cgroup(path: &Path) -> Result<OwnedFd> {
    let c = cpath("cgroup", path)?;
    let fd = parent::open_dir_path(&c).map_err(|e| Error::os("open cgroup", quoted(path), e))?;
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    match parent::fstatfs_type(fd.as_raw_fd()) {
        Ok(t) if t == CGROUP2_SUPER_MAGIC => Ok(fd),
        Ok(_) => {
            let where_v2 = cgroup2_mounts();
            let hint = if where_v2.is_empty() {
                "cgroup v2 is not mounted on this machine".to_string()
            } else {
                format!("cgroup v2 is mounted at {}", where_v2.join(", "))
            };
            Err(Error::new(ErrorKind::Unsupported, "cgroup", quoted(path))
                .with_reason(format!("not a cgroup v2 directory ({hint})")))
        }
        Err(e) => Err(Error::os("fstatfs", quoted(path), e)),
    }
}

/// Where cgroup2 is mounted, from /proc/self/mounts.
pub(crate) fn cgroup2_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let (_, dir, kind) = (f.next()?, f.next()?, f.next()?);
            (kind == "cgroup2").then(|| dir.to_string())
        })
        .collect()
}

/// Take the lock on the opened file, as flock(1) would: wait forever, not at all, or until the
/// timeout. Runs in the parent just before the clone; the child inherits the locked fd.
pub(crate) fn acquire(fd: RawFd, lock: &Lock) -> Result<()> {
    let op = if lock.shared { libc::LOCK_SH } else { libc::LOCK_EX };
    let subject = escaped(&lock.path);
    let would_block =
        || Error::os("flock", subject.clone(), libc::EWOULDBLOCK).with_reason("would block");
    match lock.timeout {
        None => parent::flock(fd, op).map_err(|e| Error::os("flock", subject.clone(), e)),
        Some(t) if t.is_zero() => match parent::flock(fd, op | libc::LOCK_NB) {
            Ok(()) => Ok(()),
            Err(libc::EWOULDBLOCK) => Err(would_block()),
            Err(e) => Err(Error::os("flock", subject.clone(), e)),
        },
        Some(t) => {
            // A timeout past what an Instant can hold (Duration::MAX) waits for ever.
            let Some(deadline) = Instant::now().checked_add(t) else {
                return parent::flock(fd, op).map_err(|e| Error::os("flock", subject.clone(), e));
            };
            let attempt = || match parent::flock(fd, op | libc::LOCK_NB) {
                Ok(()) => Ok(true),
                Err(libc::EWOULDBLOCK) => Ok(false),
                Err(e) => Err(Error::os("flock", subject.clone(), e)),
            };
            let nap = |pause| {
                std::thread::sleep(pause);
                Ok(())
            };
            if crate::lock_wait::retry_with_naps(Some(deadline), attempt, nap)? {
                return Ok(());
            }
            Err(would_block()
                .with_kind(ErrorKind::Timeout)
                .with_reason(format!("still locked after {:.3} s", t.as_secs_f64())))
        }
    }
}

/// Whether a bind destination would end up under /tmp: as written, or through a symlink in
/// the part of it that exists now; a relative one, or one with "..", counts too (it cannot
/// be told apart reliably before the mount).
fn under_tmp(dst: &Path) -> bool {
    use std::path::Component;
    if !dst.is_absolute() || dst.components().any(|c| c == Component::ParentDir) {
        return true;
    }
    if dst.starts_with("/tmp") {
        return true;
    }
    let tmp = std::fs::canonicalize("/tmp").unwrap_or_else(|_| "/tmp".into());
    dst.ancestors()
        .find_map(|a| std::fs::canonicalize(a).ok())
        .is_some_and(|real| real.starts_with(&tmp))
}
