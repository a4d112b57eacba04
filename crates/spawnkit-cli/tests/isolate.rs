//! `spawnkit run`'s isolation and locking flags, through the binary, seen from inside the
//! child (the probe's `ns`, `loopback` and `netdevs` modes).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn spawnkit() -> &'static str {
    env!("CARGO_BIN_EXE_spawnkit")
}

/// The probe, at a path a private /tmp does not hide (a copy under /var/tmp, made by cp(1),
/// when the build lives under /tmp, as in a clone there).
fn probe() -> PathBuf {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let p = exe.parent().and_then(|d| d.parent()).unwrap().join("spawnkit-probe");
        assert!(p.is_file(), "{} missing: run `cargo build --workspace --bins` first", p.display());
        if !p.starts_with("/tmp") {
            return p;
        }
        let dir = PathBuf::from(format!("/var/tmp/spawnkit-cli-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join("spawnkit-probe");
        assert!(Command::new("cp").arg(&p).arg(&copy).status().unwrap().success());
        copy
    })
    .clone()
}

fn run(args: &[&str]) -> Output {
    Command::new(spawnkit()).args(args).stdin(Stdio::null()).output().unwrap()
}

fn kv(out: &Output) -> std::collections::BTreeMap<String, String> {
    assert!(out.status.success(), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn own_ns(name: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{name}")).unwrap().display().to_string()
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spawnkit-cli-iso-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn unshare_list_and_map_root_user() {
    let p = probe();
    let out = run(&[
        "run",
        "--unshare",
        "user,pid,mount,uts,ipc,net,cgroup",
        "--map-root-user",
        "--",
        p.to_str().unwrap(),
        "ns",
    ]);
    let v = kv(&out);
    assert_eq!(v["pid"], "1");
    assert_eq!(v["uid_map"], format!("0 {} 1", uid()));
    for ns in ["user", "pid", "mnt", "uts", "ipc", "net", "cgroup"] {
        assert_ne!(v[&format!("ns.{ns}")], own_ns(ns), "{ns}");
    }
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

#[test]
fn unprivileged_user_gets_a_user_namespace_of_its_own() {
    if uid() != 0 {
        eprintln!("SKIPPED: needs root to become an unprivileged user first");
        return;
    }
    // spawnkit drops to nobody, then an inner spawnkit (unprivileged now) asks for a private
    // /tmp and network: it gets a user namespace mapping nobody to itself (as bubblewrap does),
    // and with --map-root-user nobody becomes root inside.
    let p = probe();
    let inner =
        [spawnkit(), "run", "--private-net", "--private-tmp", "--", p.to_str().unwrap(), "ns"];
    let mut args = vec!["run", "--uid", "65534", "--gid", "65534", "--groups", "", "--"];
    args.extend(inner);
    let v = kv(&run(&args));
    assert_eq!(v["uid_map"], "65534 65534 1");
    assert_eq!(v["setgroups"], "deny");
    assert_ne!(v["ns.net"], own_ns("net"));
    let mut args = vec!["run", "--uid", "65534", "--gid", "65534", "--groups", "", "--"];
    args.extend([spawnkit(), "run", "--map-root-user", "--", p.to_str().unwrap(), "ns"]);
    let v = kv(&run(&args));
    assert_eq!(v["uid_map"], "0 65534 1");
    assert_eq!(v["gid_map"], "0 65534 1");
}

#[test]
fn private_tmp_private_net_hostname() {
    let p = probe();
    let v = kv(&run(&["run", "--private-net", "--", p.to_str().unwrap(), "loopback"]));
    assert_eq!(v["loopback"], "ok");
    let out = run(&["run", "--private-net", "--", p.to_str().unwrap(), "netdevs"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "lo");
    let v = kv(&run(&["run", "--hostname", "cli-box", "--", p.to_str().unwrap(), "ns"]));
    assert_eq!(v["hostname"], "cli-box");
    let out = run(&[
        "run",
        "--private-tmp",
        "--tmp-options",
        "noexec",
        "--",
        "sh",
        "-c",
        "ls -A /tmp | wc -l; grep ' /tmp ' /proc/self/mounts",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("0"), "{text}");
    let mount = lines.next().unwrap_or_default();
    assert!(
        mount.starts_with("tmpfs /tmp tmpfs")
            && mount.contains("noexec")
            && !mount.contains("nosuid"),
        "{mount}"
    );
    let dir = tmpdir("ptmp");
    let flag = format!("--private-tmp={}", dir.display());
    let out = run(&["run", &flag, "--", "sh", "-c", "echo x > /tmp/seen"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Without '=' the next word is the program, not the directory.
    let out = run(&["run", "--private-tmp", "sh", "-c", "ls -A /tmp | wc -l"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(dir.join("seen")).unwrap(), "x\n");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn ro_bind_and_chroot() {
    let dir = tmpdir("ro");
    let d = dir.to_str().unwrap();
    let out = run(&[
        "run",
        "--ro-bind",
        d,
        "--",
        "sh",
        "-c",
        &format!("touch {d}/f 2>/dev/null; echo $?"),
    ]);
    assert_ne!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    assert!(!dir.join("f").exists());
    let out = run(&[
        "run",
        "--ro-bind",
        &format!("{d}:/mnt"),
        "--",
        "sh",
        "-c",
        "touch /mnt/f 2>/dev/null; echo $?",
    ]);
    assert_ne!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    let out = run(&["run", "--chroot", "/usr", "--", "/bin/ls", "/"]);
    assert!(String::from_utf8_lossy(&out.stdout).lines().any(|l| l == "bin"));
    let out = run(&["run", "--chroot", "/nope", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "spawnkit: chroot \"/nope\": No such file or directory (os error 2)\n"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn lock_conflict_codes_follow_flock() {
    let dir = tmpdir("lock");
    let lock = dir.join("l");
    let l = lock.to_str().unwrap();
    let mut holder =
        Command::new(spawnkit()).args(["run", "--lock", l, "--", "sleep", "3"]).spawn().unwrap();
    // Wait until the holder has the lock (a non-blocking attempt fails).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = run(&["run", "--lock", l, "--lock-nonblock", "--", "true"]);
        if out.status.code() == Some(1) {
            assert_eq!(
                String::from_utf8_lossy(&out.stderr),
                format!("spawnkit: flock {l}: would block\n")
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the holder never took the lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run(&[
        "run",
        "--lock",
        l,
        "--lock-timeout",
        "0.1",
        "--conflict-exit-code",
        "42",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(42));
    let out = run(&["run", "--lock", l, "--lock-shared", "--lock-nonblock", "--", "true"]);
    assert_eq!(out.status.code(), Some(1), "a shared lock conflicts with the exclusive one");
    // A waiting locker runs after the holder and passes the command's status through.
    let out = run(&["run", "--lock", l, "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    assert!(holder.wait().unwrap().success());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn cgroup_v1_is_refused_with_where_v2_is() {
    let out = run(&["run", "--cgroup", "/proc", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("spawnkit: cgroup \"/proc\": not a cgroup v2 directory ("), "{err}");
}

#[test]
fn dry_run_shows_the_fence() {
    let out = run(&[
        "run",
        "--dry-run",
        "--map-root-user",
        "--private-tmp",
        "--private-net",
        "--hostname",
        "h",
        "--",
        "true",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for line in [
        "clone with new namespaces: user,mount,net,uts",
        "write uid_map, gid_map (from the parent)",
        "mount private propagation on /",
        "mount tmpfs on /tmp",
        "sethostname \"h\"",
        "ioctl SIOCSIFFLAGS lo up",
    ] {
        assert!(text.lines().any(|l| l.starts_with(line)), "missing {line:?} in:\n{text}");
    }
}

#[test]
fn bad_isolation_values_are_usage_errors() {
    for args in [
        &["run", "--unshare", "bogus", "--", "true"][..],
        &["run", "--tmp-options", "nosetuid", "--private-tmp", "--", "true"][..],
        &["run", "--lock-timeout", "-1", "--lock", "/tmp/x", "--", "true"][..],
        &["run", "--lock-shared", "--", "true"][..],
    ] {
        let out = run(args);
        assert_eq!(
            out.status.code(),
            Some(125),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
