//! Isolation, seen from inside the child: namespace ids, private /tmp, loopback-only network,
//! pid 1, uid maps, the lock, the cgroup, hostname, read-only binds, chroot; and the errors
//! naming the step. Every strategy that supports an option is checked; posix-spawn must refuse.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{TempDir, FULL};

/// The probe, from a path a private /tmp does not hide.
fn probe_cmd<I, S>(strategy: Strategy, args: I) -> spawnkit::Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = spawnkit::Command::new(common::probe_outside_tmp());
    cmd.args(args).strategy(strategy);
    cmd
}
use spawnkit::{ErrorKind, IdMap, Lock, Namespaces, Stdio, Strategy, TmpOptions, UserMap};

/// Run the probe in `mode` with `configure`, return its key=value lines.
fn probe_kv(
    strategy: Strategy,
    mode: &str,
    configure: impl FnOnce(&mut spawnkit::Command),
) -> BTreeMap<String, String> {
    let mut cmd = probe_cmd(strategy, [mode]);
    configure(&mut cmd);
    let out = cmd.stdout(Stdio::Pipe).stderr(Stdio::Pipe).output().expect("spawn the probe");
    assert!(
        out.status.success(),
        "{strategy}: {} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn own_ns(name: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{name}")).unwrap().display().to_string()
}

fn skip_unless_root(what: &str) -> bool {
    if !common::is_root() {
        eprintln!("SKIPPED {what}: needs root (the tests run unprivileged)");
        return true;
    }
    false
}

#[test]
fn each_namespace_is_new_inside_and_only_that_one() {
    let all = [
        ("user", Namespaces::USER, "user"),
        ("mount", Namespaces::MOUNT, "mnt"),
        ("net", Namespaces::NET, "net"),
        ("pid", Namespaces::PID, "pid"),
        ("uts", Namespaces::UTS, "uts"),
        ("ipc", Namespaces::IPC, "ipc"),
        ("cgroup", Namespaces::CGROUP, "cgroup"),
    ];
    for strategy in FULL {
        for (name, ns, link) in all {
            if strategy == Strategy::ForkExec && ns == Namespaces::PID {
                continue; // refused, see fork_exec_refuses_a_pid_namespace
            }
            let kv = probe_kv(strategy, "ns", |c| {
                c.unshare(ns);
            });
            assert_ne!(kv[&format!("ns.{link}")], own_ns(link), "{strategy} {name}: not new");
            for (_, _, other) in all {
                // A user namespace is added for unprivileged callers only; as root only the
                // asked namespace may differ.
                if other != link && common::is_root() {
                    assert_eq!(
                        kv[&format!("ns.{other}")],
                        own_ns(other),
                        "{strategy} {name}: {other} changed"
                    );
                }
            }
        }
    }
}

#[test]
fn namespace_lists_name_at_least_one_and_no_empty_item() {
    let parse = |s: &str| s.parse::<Namespaces>();
    assert_eq!(parse("user, net").unwrap(), Namespaces::USER.union(Namespaces::NET));
    assert_eq!(parse("mnt,network").unwrap(), Namespaces::MOUNT.union(Namespaces::NET));
    for empty in ["", " ", " , "] {
        let e = parse(empty).unwrap_err();
        assert_eq!((e.kind(), e.step()), (ErrorKind::InvalidInput, "unshare"), "{empty:?}");
        assert!(e.to_string().contains("no namespace named"), "{empty:?}: {e}");
    }
    for gap in ["user,,net", "user,", ",user", "user, ,net"] {
        let e = parse(gap).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{gap:?}");
        assert_eq!(e.to_string(), format!("unshare \"{gap}\": an empty name in the list"));
    }
    let e = parse("user,bogus").unwrap_err();
    assert!(e.to_string().starts_with("unshare \"bogus\": unknown namespace"), "{e}");
}

#[test]
fn pid_namespace_makes_the_program_pid_1_and_its_status_reaches_the_caller() {
    let kv = probe_kv(Strategy::CloneVfork, "ns", |c| {
        c.unshare(Namespaces::PID.union(Namespaces::MOUNT));
    });
    assert_eq!(kv["pid"], "1");
    let status =
        probe_cmd(Strategy::CloneVfork, ["exit", "7"]).unshare(Namespaces::PID).status().unwrap();
    assert_eq!(status.code(), Some(7));
    // pid 1 of a namespace ignores even SIGKILL sent from inside it; from the parent's
    // namespace it dies, and the caller sees the signal.
    let mut child =
        probe_cmd(Strategy::CloneVfork, ["sleep", "30"]).unshare(Namespaces::PID).spawn().unwrap();
    child.kill().unwrap();
    assert_eq!(child.wait().unwrap().signal(), Some(9));
}

#[test]
fn fork_exec_refuses_a_pid_namespace() {
    let err = probe_cmd(Strategy::ForkExec, ["ns"]).unshare(Namespaces::PID).spawn().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.to_string().contains("needs the clone-vfork strategy"), "{err}");
}

#[test]
fn posix_spawn_refuses_namespaces_and_cgroups() {
    let err = probe_cmd(Strategy::PosixSpawn, ["ns"]).unshare(Namespaces::NET).spawn().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert_eq!(
        err.to_string(),
        "unshare: the posix-spawn strategy cannot create namespaces (net); use clone-vfork"
    );
}

#[test]
fn user_maps_read_back_as_asked() {
    for strategy in FULL {
        let kv = probe_kv(strategy, "ns", |c| {
            c.user_map(UserMap::Root);
        });
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        assert_eq!(kv["uid_map"], format!("0 {uid} 1"), "{strategy}");
        assert_eq!(kv["gid_map"], format!("0 {gid} 1"), "{strategy}");
        // As root with clone-vfork the parent writes the maps and setgroups stays usable;
        // otherwise the child maps itself after denying setgroups.
        let want =
            if common::is_root() && strategy == Strategy::CloneVfork { "allow" } else { "deny" };
        assert_eq!(kv["setgroups"], want, "{strategy}");
        let kv = probe_kv(strategy, "ns", |c| {
            c.user_map(UserMap::Current);
        });
        assert_eq!(kv["uid_map"], format!("{uid} {uid} 1"), "{strategy}");
        let st = common::run_state(probe_cmd(strategy, ["state"]).user_map(UserMap::Root));
        assert!(st.get("uid").starts_with("0\t0\t0\t0"), "{strategy}: {}", st.get("uid"));
    }
    if skip_unless_root("arbitrary uid maps") {
        return;
    }
    let map = |inside, outside, count| IdMap { inside, outside, count };
    let kv = probe_kv(Strategy::CloneVfork, "ns", |c| {
        c.user_map(UserMap::Custom {
            uid: vec![map(0, 100_000, 1000), map(1000, 0, 1)],
            gid: vec![map(0, 100_000, 65536)],
        });
    });
    assert_eq!(kv["uid_map"], "0 100000 1000;1000 0 1");
    assert_eq!(kv["gid_map"], "0 100000 65536");
    assert_eq!(kv["setgroups"], "allow", "a privileged custom map keeps setgroups usable");
}

#[test]
fn a_bad_uid_map_names_the_file() {
    let bad = IdMap { inside: 0, outside: 0, count: 10 };
    let overlapping = IdMap { inside: 5, outside: 50, count: 10 };
    let err = probe_cmd(Strategy::CloneVfork, ["ns"])
        .user_map(UserMap::Custom { uid: vec![bad, overlapping], gid: vec![] })
        .spawn()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "write /proc/CHILD/uid_map (by the parent): Invalid argument (os error 22)"
    );
    assert!(err.is_in_child());
    // A one-line map is written by the child itself.
    let err = probe_cmd(Strategy::ForkExec, ["ns"])
        .user_map(UserMap::Custom { uid: vec![bad], gid: vec![] })
        .spawn()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
}

/// As root the spawning thread itself writes the maps, between a clone without CLONE_VFORK
/// and the child's exec, then waits for EOF on a close-on-exec pipe. Spawns from several
/// threads at once, fenced and plain interleaved (a plain child may hold a fenced spawn's pipe
/// until its own exec), all start, and every fenced child reads its maps back.
#[test]
fn parent_written_maps_from_many_threads_at_once() {
    if skip_unless_root("maps written by the parent") {
        return;
    }
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..12 {
                    if (t + i) % 2 == 0 {
                        let kv = probe_kv(Strategy::CloneVfork, "ns", |c| {
                            c.user_map(UserMap::Root).private_network(true);
                        });
                        assert_eq!(kv["uid_map"], "0 0 1", "thread {t}, spawn {i}");
                        assert_eq!(kv["setgroups"], "allow", "thread {t}, spawn {i}");
                    } else {
                        let st = spawnkit::Command::new("true").status().expect("spawn true");
                        assert!(st.success(), "thread {t}, spawn {i}: {st}");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a spawning thread panicked");
    }
}

#[test]
fn private_tmp_is_private_and_gone_after() {
    let name = format!("spawnkit-private-{}", std::process::id());
    for strategy in FULL {
        let out = probe_cmd(strategy, ["state"])
            .arg0("probe")
            .private_tmp(None, TmpOptions::default())
            .stdout(Stdio::Pipe)
            .output()
            .unwrap();
        assert!(out.status.success());
        // Inside: write a file to /tmp and list /tmp; outside it must not appear.
        let mut cmd = spawnkit::Command::new("sh");
        cmd.args([
            "-c",
            &format!("echo hi > /tmp/{name} && ls -A /tmp && grep ' /tmp ' /proc/self/mounts"),
        ])
        .strategy(strategy)
        .private_tmp(None, TmpOptions { nosuid: true, nodev: true, noexec: true })
        .stdout(Stdio::Pipe);
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{strategy}: {text}");
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some(name.as_str()),
            "{strategy}: a fresh /tmp holds only our file"
        );
        let mount = lines.next().unwrap_or_default();
        assert!(mount.starts_with("tmpfs /tmp tmpfs"), "{strategy}: {mount}");
        for opt in ["nosuid", "nodev", "noexec"] {
            assert!(mount.contains(opt), "{strategy}: {opt} missing in {mount}");
        }
        assert!(
            !std::path::Path::new("/tmp").join(&name).exists(),
            "{strategy}: leaked to the real /tmp"
        );
    }
}

#[test]
fn private_tmp_can_be_a_given_directory() {
    let dir = TempDir::new("ptmp");
    let out = spawnkit::Command::new("sh")
        .args(["-c", "echo inside > /tmp/marker"])
        .private_tmp(Some(dir.path().to_owned()), TmpOptions::default())
        .status()
        .unwrap();
    assert!(out.success());
    assert_eq!(std::fs::read_to_string(dir.join("marker")).unwrap(), "inside\n");
}

#[test]
fn private_network_has_only_loopback_and_it_is_up() {
    for strategy in FULL {
        let kv = probe_kv(strategy, "loopback", |c| {
            c.private_network(true);
        });
        assert_eq!(kv["loopback"], "ok", "{strategy}");
        let out = probe_cmd(strategy, ["netdevs"])
            .private_network(true)
            .stdout(Stdio::Pipe)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "lo", "{strategy}");
        // A bare network namespace leaves lo down, as unshare -n does.
        let kv = probe_kv(strategy, "loopback", |c| {
            c.unshare(Namespaces::NET);
        });
        assert!(kv["loopback"].starts_with("error"), "{strategy}: {}", kv["loopback"]);
    }
}

#[test]
fn hostname_in_a_new_uts_namespace() {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for strategy in FULL {
        let kv = probe_kv(strategy, "ns", |c| {
            c.hostname("sandbox-1");
        });
        assert_eq!(kv["hostname"], "sandbox-1");
        assert_ne!(kv["ns.uts"], own_ns("uts"));
    }
    assert_eq!(std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(), host);
}

#[test]
fn a_hostname_is_bytes() {
    use std::ffi::{OsStr, OsString};
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    // sethostname(2) takes bytes: one that is not UTF-8 reaches the child as it is.
    let name = OsStr::from_bytes(b"box-\xff\xfe");
    for strategy in FULL {
        let out = spawnkit::Command::new("cat")
            .arg("/proc/sys/kernel/hostname")
            .strategy(strategy)
            .hostname(name)
            .stdout(Stdio::Pipe)
            .output()
            .unwrap();
        assert!(out.status.success(), "{strategy}: {}", out.status);
        assert_eq!(out.stdout, b"box-\xff\xfe\n", "{strategy}");
    }
    // 1 to 64 bytes, counted in bytes.
    let max = OsString::from_vec(vec![0xff; 64]);
    spawnkit::Command::new("true").hostname(&max).plan().expect("64 bytes are a hostname");
    for bad in [OsString::from_vec(vec![0xff; 65]), OsString::new()] {
        let e = spawnkit::Command::new("true").hostname(&bad).plan().unwrap_err();
        assert_eq!((e.kind(), e.step()), (ErrorKind::InvalidInput, "sethostname"), "{e}");
        assert!(e.to_string().ends_with(": a hostname has 1 to 64 bytes"), "{e}");
    }
    // A String still does.
    spawnkit::Command::new("true").hostname(String::from("box")).plan().unwrap();
}

#[test]
fn read_only_binds_refuse_writes_inside_only() {
    let dir = TempDir::new("robind");
    std::fs::write(dir.join("f"), "x").unwrap();
    for strategy in FULL {
        let script = format!("echo y > {}/f; echo $?", dir.path().display());
        let out = spawnkit::Command::new("sh")
            .args(["-c", &script])
            .strategy(strategy)
            .ro_bind(dir.path(), dir.path())
            .stdout(Stdio::Pipe)
            .stderr(Stdio::Null)
            .output()
            .unwrap();
        assert_ne!(String::from_utf8_lossy(&out.stdout).trim(), "0", "{strategy}: write succeeded");
        assert_eq!(std::fs::read_to_string(dir.join("f")).unwrap(), "x");
    }
    std::fs::write(dir.join("f"), "z").expect("still writable outside");
}

#[test]
fn a_failed_mount_names_the_step() {
    let err = probe_cmd(Strategy::CloneVfork, ["ns"])
        .ro_bind("/nope-src", "/nope-dst")
        .spawn()
        .unwrap_err();
    assert_eq!(err.to_string(), "statvfs \"/nope-src\": No such file or directory (os error 2)");
    let dir = TempDir::new("mnt");
    let err = probe_cmd(Strategy::CloneVfork, ["ns"])
        .ro_bind(dir.path(), "/nope-dst")
        .spawn()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "mount bind {} on /nope-dst: No such file or directory (os error 2)",
            dir.path().display()
        )
    );
    assert!(err.is_in_child());
}

#[test]
fn chroot_changes_the_root_and_the_cwd_is_inside() {
    let out = spawnkit::Command::new("/bin/ls")
        .arg("/")
        .chroot("/usr")
        .stdout(Stdio::Pipe)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        listing.lines().any(|l| l == "bin") && !listing.lines().any(|l| l == "usr"),
        "{listing}"
    );
    let err = probe_cmd(Strategy::CloneVfork, ["ns"]).chroot("/nope").spawn().unwrap_err();
    assert_eq!(err.to_string(), "chroot \"/nope\": No such file or directory (os error 2)");
}

#[test]
fn the_lock_blocks_a_second_locker_until_the_first_child_exits() {
    let dir = TempDir::new("lock");
    let path = dir.join("lockfile");
    for strategy in Strategy::ALL {
        let marker = dir.join(&format!("marker-{strategy}"));
        let script = format!("sleep 0.5; echo done > {}", marker.display());
        let mut first = spawnkit::Command::new("sh")
            .args(["-c", &script])
            .strategy(strategy)
            .lock(Lock::exclusive(&path))
            .spawn()
            .unwrap();
        // The child holds the lock (the parent kept no fd of it).
        let nb = Lock { path: path.clone(), shared: false, timeout: Some(Duration::ZERO) };
        let err = probe_cmd(strategy, ["exit", "0"]).lock(nb.clone()).spawn().unwrap_err();
        assert_eq!(err.to_string(), format!("flock {}: would block", path.display()));
        assert_eq!(err.raw_os_error(), Some(libc::EWOULDBLOCK));
        // A waiting locker runs only once the first child is done: it sees the marker the
        // first wrote at its very end.
        let out = spawnkit::Command::new("cat")
            .arg(&marker)
            .strategy(strategy)
            .lock(Lock::exclusive(&path))
            .stdout(Stdio::Pipe)
            .stderr(Stdio::Pipe)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "done\n",
            "{strategy}: ran under the first's lock"
        );
        assert!(first.wait().unwrap().success());
        // Shared locks coexist.
        let shared = Lock { path: path.clone(), shared: true, timeout: Some(Duration::ZERO) };
        let mut a = probe_cmd(strategy, ["sleep", "0.3"]).lock(shared.clone()).spawn().unwrap();
        let mut b =
            probe_cmd(strategy, ["exit", "0"]).lock(shared).spawn().expect("a second shared lock");
        assert!(b.wait().unwrap().success());
        a.kill().unwrap();
        a.wait().unwrap();
    }
}

#[test]
fn a_lock_timeout_gives_up() {
    let dir = TempDir::new("locktime");
    let path = dir.join("l");
    let mut holder = probe_cmd(Strategy::CloneVfork, ["sleep", "5"])
        .lock(Lock::exclusive(&path))
        .spawn()
        .unwrap();
    let lock =
        Lock { path: path.clone(), shared: false, timeout: Some(Duration::from_millis(100)) };
    let err = probe_cmd(Strategy::CloneVfork, ["exit", "0"]).lock(lock).spawn().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert_eq!(err.to_string(), format!("flock {}: still locked after 0.100 s", path.display()));
    holder.kill().unwrap();
    holder.wait().unwrap();
}

/// A fresh cgroup v2 directory, or None (with the reason printed) where there is none.
fn test_cgroup(tag: &str) -> Option<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let root = mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(2) == Some(&"cgroup2")).then(|| f[1].to_string())
    });
    let Some(root) = root else {
        eprintln!("SKIPPED cgroup test: cgroup v2 is not mounted");
        return None;
    };
    let dir =
        std::path::Path::new(&root).join(format!("spawnkit-test-{}-{tag}", std::process::id()));
    match std::fs::create_dir(&dir) {
        Ok(()) => Some(dir),
        Err(e) => {
            eprintln!("SKIPPED cgroup test: cannot create {}: {e}", dir.display());
            None
        }
    }
}

#[test]
fn the_child_starts_in_the_asked_cgroup() {
    for strategy in FULL {
        let Some(dir) = test_cgroup(strategy.name()) else { return };
        let kv = probe_kv(strategy, "ns", |c| {
            c.cgroup(&dir);
        });
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let v2 =
            kv["cgroup"].split(';').find(|l| l.starts_with("0::")).unwrap_or_default().to_string();
        assert_eq!(v2, format!("0::/{name}"), "{strategy}");
        // The probe exited: the cgroup is empty again and can go.
        std::fs::remove_dir(&dir).unwrap();
    }
}

#[test]
fn a_cgroup_v1_directory_is_refused_with_the_v2_location() {
    let err = probe_cmd(Strategy::CloneVfork, ["ns"]).cgroup("/proc").spawn().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.to_string().starts_with("cgroup \"/proc\": not a cgroup v2 directory ("), "{err}");
}

#[test]
fn a_fence_of_everything_at_once() {
    let kv = probe_kv(Strategy::CloneVfork, "ns", |c| {
        c.user_map(UserMap::Root)
            .unshare(Namespaces::PID.union(Namespaces::IPC))
            .private_tmp(None, TmpOptions::default())
            .private_network(true)
            .hostname("fenced");
    });
    assert_eq!(kv["pid"], "1");
    assert_eq!(kv["hostname"], "fenced");
    for ns in ["user", "mnt", "net", "pid", "uts", "ipc"] {
        assert_ne!(kv[&format!("ns.{ns}")], own_ns(ns), "{ns}");
    }
}

#[test]
fn a_relative_cwd_resolves_inside_the_chroot() {
    let out = spawnkit::Command::new("/bin/pwd")
        .chroot("/usr")
        .current_dir("bin")
        .stdout(Stdio::Pipe)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/bin\n");
}

#[test]
fn the_lock_survives_a_map_onto_its_number() {
    let dir = TempDir::new("lockmap");
    let path = dir.join("l");
    for target in 3..8 {
        let mut holder = probe_cmd(Strategy::CloneVfork, ["sleep", "5"])
            .lock(Lock::exclusive(&path))
            .fd(target, 1)
            .spawn()
            .unwrap();
        let nb = Lock { path: path.clone(), shared: false, timeout: Some(Duration::ZERO) };
        let err = probe_cmd(Strategy::CloneVfork, ["exit", "0"]).lock(nb).spawn().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EWOULDBLOCK), "map onto {target}: {err}");
        holder.kill().unwrap();
        holder.wait().unwrap();
    }
}

#[test]
fn root_in_a_user_namespace_can_still_set_groups() {
    if skip_unless_root("groups inside a user namespace") {
        return;
    }
    let st = common::run_state(
        probe_cmd(Strategy::CloneVfork, ["state"]).user_map(UserMap::Root).groups([0]),
    );
    // Only mapped gids exist inside: the map is "0 0 1".
    assert_eq!(st.get("groups").trim(), "0");
}

#[test]
fn read_only_binds_cover_mounts_below_them() {
    if skip_unless_root("mounting a tmpfs below a bind source") {
        return;
    }
    let dir = TempDir::new("rorec");
    std::fs::create_dir(dir.join("sub")).unwrap();
    let sub = dir.join("sub");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&sub)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !mounted {
        eprintln!("SKIPPED: mount(8) could not mount a tmpfs here");
        return;
    }
    let script = format!("touch {}/y 2>/dev/null; echo $?", sub.display());
    let out = spawnkit::Command::new("sh")
        .args(["-c", &script])
        .ro_bind(dir.path(), dir.path())
        .stdout(Stdio::Pipe)
        .output()
        .unwrap();
    let _ = std::process::Command::new("umount").arg(&sub).status();
    assert_ne!(String::from_utf8_lossy(&out.stdout).trim(), "0", "a submount stayed writable");
    assert!(!sub.join("y").exists());
}

#[test]
fn a_bind_source_under_tmp_survives_the_private_tmp() {
    let dir = TempDir::new("bindtmp");
    std::fs::write(dir.join("f"), "from the host").unwrap();
    let out = spawnkit::Command::new("cat")
        .arg("/mnt/f")
        .ro_bind(dir.path(), "/mnt")
        .private_tmp(None, TmpOptions::default())
        .stdout(Stdio::Pipe)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from the host");
}

/// A read-only bind whose destination is under /tmp, with a private /tmp: the tmpfs mounted
/// after the binds (so their sources may be under /tmp) would hide it, and the child would
/// silently miss it. Refused at plan time, naming the destination.
#[test]
fn a_bind_into_the_private_tmp_is_refused_not_hidden() {
    let mut cmd = spawnkit::Command::new("true");
    cmd.private_tmp(None, TmpOptions::default()).ro_bind("/usr", "/tmp/usr");
    let e = cmd.plan().unwrap_err();
    assert_eq!(e.step(), "mount", "{e}");
    assert!(e.to_string().contains("\"/tmp/usr\": is under /tmp"), "{e}");
    // Nor through "..", a relative path, or a symlink that leads into /tmp.
    for dst in ["/var/../tmp/usr", "tmp/usr"] {
        let mut c = spawnkit::Command::new("true");
        c.private_tmp(None, TmpOptions::default()).ro_bind("/usr", dst);
        assert!(c.plan().unwrap_err().to_string().contains("is under /tmp"), "{dst}");
    }
    let link =
        std::path::PathBuf::from(format!("/var/tmp/spawnkit-tmp-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("/tmp", &link).unwrap();
    let mut c = spawnkit::Command::new("true");
    c.private_tmp(None, TmpOptions::default()).ro_bind("/usr", link.join("usr"));
    let refused = c.plan().unwrap_err().to_string();
    std::fs::remove_file(&link).unwrap();
    assert!(refused.contains("is under /tmp"), "{refused}");
    // Elsewhere, or without the private /tmp, it plans.
    let mut ok = spawnkit::Command::new("true");
    ok.private_tmp(None, TmpOptions::default()).ro_bind("/tmp", "/mnt");
    ok.plan().unwrap();
}
