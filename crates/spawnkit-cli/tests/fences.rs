//! A child that is root in its namespace cannot undo its fences (issue 11): the escape
//! attempts an adversary tries first — umount the private /tmp, remount a read-only bind
//! writable or take it away, enter the parent's mount namespace, read the parent's /tmp through
//! /proc/PPID/root, see the host's interfaces in /sys — run through the binary, as real root
//! and as root of a user namespace (nobody with --map-root-user), and must all fail; with
//! --keep-caps, the opt-out, root inside gets them back (which shows the attempts are real).

mod common;

use std::path::PathBuf;

use common::{spawnkit, spawnkit_bin, Res};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn skip_unless_root(what: &str) -> bool {
    if !is_root() {
        eprintln!("SKIPPED {what}: needs root (real root, and root to become nobody)");
        return true;
    }
    false
}

/// Who runs the fenced `spawnkit run`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Who {
    /// Real root: every namespace is created with the host's full privilege.
    Root,
    /// nobody, with --map-root-user: root of a user namespace of its own.
    UsernsRoot,
}

/// `spawnkit run FLAGS -- sh -c SCRIPT` as `who`.
fn fenced(who: Who, flags: &[&str], script: &str) -> Res {
    let mut args: Vec<String> = vec!["run".into()];
    if who == Who::UsernsRoot {
        for a in ["--uid", "65534", "--gid", "65534", "--groups", "", "--", spawnkit_bin()] {
            args.push(a.into());
        }
        args.extend(["run".into(), "--map-root-user".into()]);
    }
    args.extend(flags.iter().map(|s| s.to_string()));
    args.extend(["--", "sh", "-c", script].map(String::from));
    spawnkit(&args)
}

/// A file only the parent's /tmp has, readable by everyone (so a failed read means the
/// fence held, not that nobody lacked permission).
struct Secret(PathBuf);

impl Secret {
    fn new(tag: &str) -> Secret {
        let p = PathBuf::from(format!("/tmp/spawnkit-fence-{tag}-{}", std::process::id()));
        std::fs::write(&p, "the-host-secret\n").unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        Secret(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    fn seen_in(&self, r: &Res) -> bool {
        r.stdout.contains("the-host-secret")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A directory outside /tmp holding a file everyone may write, to bind read-only.
struct Bound(PathBuf);

impl Bound {
    fn new(tag: &str) -> Bound {
        use std::os::unix::fs::PermissionsExt;
        let d = PathBuf::from(format!("/var/tmp/spawnkit-fence-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, PermissionsExt::from_mode(0o777)).unwrap();
        std::fs::write(d.join("f"), "orig\n").unwrap();
        std::fs::set_permissions(d.join("f"), PermissionsExt::from_mode(0o666)).unwrap();
        Bound(d)
    }

    fn dir(&self) -> &str {
        self.0.to_str().unwrap()
    }

    fn content(&self) -> String {
        std::fs::read_to_string(self.0.join("f")).unwrap()
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn umounting_the_private_tmp_shows_nothing_of_the_hosts() {
    if skip_unless_root("umount of the private /tmp") {
        return;
    }
    let secret = Secret::new("umount");
    let script = format!("umount /tmp; umount -l /tmp; cat {}", secret.path());
    for who in [Who::Root, Who::UsernsRoot] {
        let r = fenced(who, &["--private-tmp"], &script);
        assert!(!secret.seen_in(&r), "{who:?}: the host's /tmp came back: {r:#?}");
        assert!(r.stderr.contains("umount"), "{who:?}: umount was not even tried: {r:#?}");
        let r = fenced(who, &["--private-tmp", "--keep-caps"], &script);
        assert!(secret.seen_in(&r), "{who:?} --keep-caps: umount should work: {r:#?}");
    }
}

/// Read the secret by `route` (a shell script given its path) from behind a private /tmp, as
/// real root and as root of a user namespace: it must stay out of reach; with --keep-caps
/// real root reaches it (the route is a real one).
fn the_secret_stays_out(tag: &str, route: impl Fn(&str) -> String) {
    let secret = Secret::new(tag);
    let script = route(secret.path());
    for who in [Who::Root, Who::UsernsRoot] {
        let r = fenced(who, &["--private-tmp"], &script);
        assert!(!secret.seen_in(&r), "{who:?}: {script}: {r:#?}");
    }
    let r = fenced(Who::Root, &["--private-tmp", "--keep-caps"], &script);
    assert!(secret.seen_in(&r), "--keep-caps: {script}: {r:#?}");
}

#[test]
fn the_parents_tmp_is_out_of_reach_through_proc() {
    if skip_unless_root("/proc/PPID/root") {
        return;
    }
    // Real root keeping its capabilities may ptrace-read its parent (same uid, more caps).
    the_secret_stays_out("ppid", |path| format!("cat /proc/$PPID/root{path}"));
}

#[test]
fn entering_the_hosts_mount_namespace_fails() {
    if skip_unless_root("setns") {
        return;
    }
    // The parent's mount namespace: pid 1 may be out of reach anyway (a container's init).
    the_secret_stays_out("setns", |path| format!("nsenter --target $PPID --mount cat {path}"));
}

#[test]
fn a_read_only_bind_stays_read_only() {
    if skip_unless_root("remounting a read-only bind") {
        return;
    }
    let b = Bound::new("ro");
    let d = b.dir();
    let remount = format!("mount -o remount,bind,rw {d}; echo remounted >> {d}/f");
    let unmount = format!("umount {d}; umount -l {d}; echo unmounted >> {d}/f");
    for who in [Who::Root, Who::UsernsRoot] {
        for script in [&remount, &unmount] {
            let r = fenced(who, &["--ro-bind", d], script);
            assert_eq!(b.content(), "orig\n", "{who:?}: {script}: {r:#?}");
        }
    }
    // With --keep-caps the same attempts succeed: root inside owns those mounts.
    for who in [Who::Root, Who::UsernsRoot] {
        let r = fenced(who, &["--ro-bind", d, "--keep-caps"], &unmount);
        assert!(b.content().contains("unmounted"), "{who:?} --keep-caps: {r:#?}");
    }
    let r = fenced(Who::Root, &["--ro-bind", d, "--keep-caps"], &remount);
    assert!(b.content().contains("remounted"), "root --keep-caps: {r:#?}");
}

#[test]
fn a_private_network_has_its_own_sysfs() {
    if skip_unless_root("sysfs of the new network namespace") {
        return;
    }
    for who in [Who::Root, Who::UsernsRoot] {
        let r = fenced(who, &["--private-net", "--private-tmp"], "ls /sys/class/net");
        assert_eq!(r.stdout, "lo\n", "{who:?}: {r:#?}");
        // Its umount would bring back the host's /sys (and its interfaces' attributes).
        let r = fenced(who, &["--private-net", "--private-tmp"], "umount /sys; ls /sys/class/net");
        assert_eq!(r.stdout, "lo\n", "{who:?}: {r:#?}");
    }
}

#[test]
fn a_fenced_child_has_no_capability_and_an_unfenced_one_keeps_them() {
    if skip_unless_root("capability sets") {
        return;
    }
    let caps = "grep ^Cap /proc/self/status";
    let zero = "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n\
                CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n";
    for who in [Who::Root, Who::UsernsRoot] {
        for flags in [&["--private-tmp"][..], &["--unshare", "pid,mount"], &["--hostname", "box"]] {
            let r = fenced(who, flags, caps);
            assert_eq!(r.stdout, zero, "{who:?} {flags:?}: {r:#?}");
        }
        let r = fenced(who, &["--private-tmp", "--keep-caps"], caps);
        assert!(r.stdout.contains("CapEff:\t000001ff"), "{who:?} --keep-caps: {r:#?}");
    }
    // No fence (a user namespace alone, as unshare -r): root of it keeps its capabilities,
    // which reach nothing outside it.
    let r = fenced(Who::UsernsRoot, &[], caps);
    assert!(r.stdout.contains("CapEff:\t000001ff"), "user namespace alone: {r:#?}");
    // A chroot is a fence too (with its capabilities root could chroot out again).
    let r = spawnkit(["run", "--chroot", "/", "--", "sh", "-c", caps]);
    assert_eq!(r.stdout, zero, "--chroot: {r:#?}");
}

#[test]
fn real_roots_kernel_files_are_read_only_in_a_mount_fence() {
    if skip_unless_root("writes to /proc/sys and sysfs as uid 0") {
        return;
    }
    // uid 0 writes /proc/sys (core_pattern: a program the kernel runs as full root) and
    // sysfs attributes by its uid alone, capabilities or not. Each write puts back the value
    // it read, so a fence that fails to hold changes nothing on this machine.
    let knobs = ["/proc/sys/kernel/core_pattern", "/sys/kernel/mm/ksm/pages_to_scan"];
    let script = |path: &str| format!("v=$(cat {path}) && echo \"$v\" > {path} && echo wrote");
    for path in knobs.iter().filter(|p| std::path::Path::new(p).exists()) {
        for flags in [&["--private-tmp"][..], &["--unshare", "mount"], &["--unshare", "pid,mount"]]
        {
            let r = fenced(Who::Root, flags, &script(path));
            assert!(!r.stdout.contains("wrote"), "{flags:?}: {path} written: {r:#?}");
            assert!(r.stderr.contains("Read-only file system"), "{flags:?} {path}: {r:#?}");
        }
        let r = fenced(Who::Root, &["--private-tmp", "--keep-caps"], &script(path));
        assert!(r.stdout.contains("wrote"), "--keep-caps: {path}: {r:#?}");
    }
    // A cgroup placement cannot be left by writing the root cgroup's cgroup.procs.
    let Some(root) = cgroup2_root() else {
        eprintln!("SKIPPED the cgroup part: no cgroup v2 mount");
        return;
    };
    let script = format!("echo $$ > {root}/cgroup.procs && echo moved");
    let r = fenced(Who::Root, &["--private-tmp"], &script);
    assert!(!r.stdout.contains("moved"), "{r:#?}");
}

/// Where cgroup v2 is mounted (on hybrid hosts, /sys/fs/cgroup/unified).
fn cgroup2_root() -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(2) == Some(&"cgroup2")).then(|| f[1].to_string())
    })
}

#[test]
fn a_partly_covered_sys_leaves_the_private_network_working() {
    if skip_unless_root("masking /sys/firmware in a mount namespace of the test") {
        return;
    }
    // In a user namespace the kernel refuses a new sysfs while part of the host's /sys is
    // covered (as a container masks /sys/firmware): the fence goes on without it.
    let inner = format!(
        "mount -t tmpfs -o ro masked /sys/firmware && exec setpriv --reuid=65534 \
         --regid=65534 --clear-groups {} run --private-net --private-tmp -- cat /sys/class/net/lo/mtu",
        spawnkit_bin()
    );
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &inner])
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_dry_run_shows_where_capabilities_go() {
    let r = spawnkit(["run", "--dry-run", "--private-tmp", "--uid", "1", "--", "true"]);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let at = |s: &str| {
        lines.iter().position(|l| l.starts_with(s)).unwrap_or_else(|| panic!("{s}: {r:#?}"))
    };
    assert!(at("mount tmpfs on /tmp") < at("prctl PR_CAPBSET_DROP every capability"));
    assert!(at("prctl PR_CAPBSET_DROP") < at("setresuid uid 1"));
    assert!(at("setresuid uid 1") < at("capset no capabilities (ambient cleared)"));
    let r = spawnkit(["run", "--dry-run", "--private-tmp", "--keep-caps", "--", "true"]);
    assert!(!r.stdout.contains("PR_CAPBSET_DROP") && !r.stdout.contains("capset"), "{r:#?}");
}
