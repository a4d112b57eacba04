//! `spawnkit run`, driven through the real binary. Every option is checked from inside the
//! child with `spawnkit-probe`, which prints its own state (cwd, fds, limits, credentials...).
//!
//! The probe is built by `cargo build --workspace --bins`; these tests look for it next to
//! the test binary's directory (target/<profile>/spawnkit-probe).

mod common;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child as StdChild, Command as StdCommand, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::fixtures::{is_root, probe};
use common::{closed_pipe, spawnkit, spawnkit_cmd, Res};

/// Every strategy.
const STRATEGIES: [&str; 3] = ["clone-vfork", "posix-spawn", "fork-exec"];
/// The strategies that support every option (posix-spawn refuses limits, credentials...).
const FULL: [&str; 2] = ["clone-vfork", "fork-exec"];

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn probe_str() -> String {
    probe().display().to_string()
}

impl Res {
    /// The probe's report; the run must have succeeded.
    #[track_caller]
    fn state(&self) -> State {
        self.code(0);
        State::parse(&self.stdout)
    }
}

/// `spawnkit run ARGS...`, run to completion.
fn run<I, S>(args: I) -> Res
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = spawnkit_cmd(["run"]);
    cmd.args(args);
    Res::of(&mut cmd)
}

/// `spawnkit run --strategy STRATEGY FLAGS... -- spawnkit-probe PROBE_ARGS...`.
fn run_probe(strategy: &str, flags: &[&str], probe_args: &[&str]) -> Res {
    let mut args: Vec<String> = vec!["--strategy".into(), strategy.into()];
    args.extend(flags.iter().map(|s| s.to_string()));
    args.push("--".into());
    args.push(probe_str());
    args.extend(probe_args.iter().map(|s| s.to_string()));
    run(args)
}

/// The probe's state (`key=value` lines) with these flags; the run must succeed.
#[track_caller]
fn state(strategy: &str, flags: &[&str]) -> State {
    run_probe(strategy, flags, &[]).state()
}

/// The probe's report.
struct State(BTreeMap<String, String>);

impl State {
    fn parse(out: &str) -> State {
        State(
            out.lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[track_caller]
    fn get(&self, key: &str) -> &str {
        match self.0.get(key) {
            Some(v) => v,
            None => panic!("the probe printed no {key:?}: {:?}", self.0.keys().collect::<Vec<_>>()),
        }
    }

    fn int(&self, key: &str) -> i64 {
        self.get(key).parse().unwrap_or_else(|_| panic!("{key}={} is not a number", self.get(key)))
    }

    /// `fds=0:/dev/null 1:pipe:[1] 9:/tmp/x` as {fd: "target[:cloexec]"}.
    fn fds(&self) -> BTreeMap<i32, String> {
        self.get("fds")
            .split_whitespace()
            .filter_map(|e| e.split_once(':'))
            .map(|(fd, target)| (fd.parse().expect("fd number"), target.to_string()))
            .collect()
    }

    fn env(&self) -> BTreeMap<&str, &str> {
        self.0.iter().filter_map(|(k, v)| Some((k.strip_prefix("env.")?, v.as_str()))).collect()
    }
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("spawnkit-cli-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        // Canonical, so it compares equal to the child's getcwd.
        TempDir(path.canonicalize().expect("canonicalize"))
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Give `cmd`'s process (spawnkit) `file` as its fd 9, without close-on-exec.
fn give_fd9(cmd: &mut StdCommand, file: &File) {
    let fd = file.as_raw_fd();
    // SAFETY: the hook runs in the forked child before exec and only calls dup2/fcntl, which
    // are async-signal-safe and touch nothing but fd numbers.
    unsafe {
        cmd.pre_exec(move || {
            let r = if fd == 9 { libc::fcntl(9, libc::F_SETFD, 0) } else { libc::dup2(fd, 9) };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// `(pid, comm, state, ppid)` from /proc/PID/stat, if the process exists.
fn proc_stat(pid: u32) -> Option<(String, char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_string();
    let mut rest = stat[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((comm, state, ppid))
}

/// The pid of a child of `parent` that runs spawnkit-probe (after execve), waiting for it.
fn wait_for_probe(parent: &mut StdChild) -> u32 {
    wait_for_child(parent, "spawnkit-probe")
}

/// The pid of a child of `parent` whose comm is `comm` (after execve), waiting for it.
fn wait_for_child(parent: &mut StdChild, comm: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for entry in dir.flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok())
                else {
                    continue;
                };
                if let Some((c, _, ppid)) = proc_stat(pid) {
                    if ppid == parent.id() && c == comm {
                        return pid;
                    }
                }
            }
        }
        if let Ok(Some(status)) = parent.try_wait() {
            panic!("spawnkit exited ({status}) before its child showed up");
        }
        if Instant::now() > deadline {
            let _ = parent.kill();
            panic!("spawnkit's child never ran {comm}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Wait for `child` at most 10 s (a hang guard, not a performance assertion).
fn wait_exit(child: &mut StdChild) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("spawnkit did not exit within 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid`, which ran `comm`, is gone (or a zombie nobody reaped: a process that ended).
fn is_gone(pid: u32, comm: &str) -> bool {
    match proc_stat(pid) {
        None => true,
        Some((c, state, _)) => c != comm || state == 'Z' || state == 'X',
    }
}

fn wait_gone(pid: u32) -> bool {
    wait_gone_named(pid, "spawnkit-probe")
}

fn wait_gone_named(pid: u32, comm: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if is_gone(pid, comm) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

// ---------------------------------------------------------------------------------------
// Help, version, usage errors
// ---------------------------------------------------------------------------------------

#[test]
fn top_level_help_lists_subcommands_with_examples() {
    let r = spawnkit(["--help"]);
    r.code(0).stderr_is("");
    for part in ["Usage: spawnkit <COMMAND>", "run", "bench", "Examples:", "spawnkit run --"] {
        assert!(r.stdout.contains(part), "missing {part:?} in:\n{}", r.stdout);
    }
}

#[test]
fn run_help_describes_every_flag() {
    let r = spawnkit(["run", "--help"]);
    r.code(0).stderr_is("");
    for flag in [
        "--cwd <DIR>",
        "--env <NAME=VALUE>",
        "--env-clear",
        "--unset <NAME>",
        "--arg0 <NAME>",
        "--rlimit <NAME=SOFT[:HARD]>",
        "--nice <N>",
        "--cpus <LIST>",
        "--setsid",
        "--pgid <N>",
        "--uid <USER|UID>",
        "--gid <GROUP|GID>",
        "--groups <LIST>",
        "--umask <OCTAL>",
        "--pdeathsig <SIG>",
        "--no-new-privs",
        "--keep-fd <N>",
        "--fd <CHILD=PARENT>",
        "--no-close-fds",
        "--sigmask <LIST>",
        "--no-restore-signals",
        "--strategy <NAME>",
        "--stdin <FILE>",
        "--stdout <FILE>",
        "--stdout-append <FILE>",
        "--stderr <FILE>",
        "--stderr-append <FILE>",
        "--stderr-to-stdout",
        "--dry-run",
        "Examples:",
        "Exit status:",
        "clone-vfork, posix-spawn, fork-exec",
        "closed when spawnkit started is closed in the program too",
    ] {
        assert!(r.stdout.contains(flag), "missing {flag:?} in:\n{}", r.stdout);
    }
}

#[test]
fn version_prints_to_stdout_and_succeeds() {
    let r = spawnkit(["--version"]);
    r.code(0).stderr_is("");
    assert_eq!(r.stdout, format!("spawnkit {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn usage_errors_exit_125() {
    for args in [
        vec!["run", "--no-such-flag", "--", "true"],
        vec!["run"],
        vec!["run", "--cwd"],
        vec!["no-such-subcommand"],
        vec![],
    ] {
        let r = spawnkit(&args);
        assert_eq!(r.code, Some(125), "spawnkit {args:?}: {r:#?}");
        assert_eq!(r.stdout, "", "spawnkit {args:?}: usage errors go to stderr");
        assert!(!r.stderr.is_empty(), "spawnkit {args:?}: no message");
    }
}

#[test]
fn bad_flag_values_name_the_flag_and_value() {
    let cases: &[(&str, &str, &str)] = &[
        ("--rlimit", "bogus=1", "unknown resource \"bogus\""),
        ("--rlimit", "nofile", "expected NAME=SOFT[:HARD]"),
        ("--rlimit", "nofile=lots", "\"lots\" is not a limit"),
        ("--rlimit", "nofile=10:5", "above the hard limit"),
        ("--nice", "high", "invalid digit"),
        ("--cpus", "3-1", "reversed"),
        ("--cpus", "x", "not a CPU number"),
        ("--pgid", "-1", "-1"),
        ("--umask", "999", "not an octal mode"),
        ("--umask", "1777", "out of range"),
        ("--pdeathsig", "FOO", "\"FOO\" is not a signal"),
        ("--sigmask", "INT,BOGUS", "\"BOGUS\" is not a signal"),
        ("--sigmask", "KILL", "SIGKILL cannot be blocked"),
        ("--strategy", "vfork", "possible values"),
        ("--fd", "3", "expected CHILD=PARENT"),
        ("--fd", "3=x", "\"x\" is not a file descriptor number"),
        ("--keep-fd", "x", "invalid digit"),
        ("--env", "NOEQUALS", "expected NAME=VALUE"),
        ("--env", "=1", "the variable name is empty"),
        ("--uid", "99999999999", "out of range"),
        ("--groups", "1,,2", "empty user or group"),
    ];
    let probe = probe_str();
    for &(flag, value, why) in cases {
        let arg = format!("{flag}={value}");
        let r = run([arg.as_str(), "--", probe.as_str()]);
        assert_eq!(r.code, Some(125), "{arg}: {r:#?}");
        assert_eq!(r.stdout, "", "{arg}: the probe must not run");
        r.stderr_has(&format!("'{value}'")).stderr_has(&format!("'{flag} <")).stderr_has(why);
    }
}

#[test]
fn conflict_exit_code_is_an_exit_status() {
    let dir = TempDir::new("conflict");
    let lock = dir.join("lock");
    let lock = lock.to_str().unwrap();
    for bad in ["256", "300", "-1"] {
        let arg = format!("--conflict-exit-code={bad}");
        let r = run(["--lock", lock, &arg, "--", "true"]);
        assert_eq!(r.code, Some(125), "{arg}: {r:#?}");
        assert_eq!(r.stdout, "", "{arg}");
        // The same usage error as any other bad value (see bad_flag_values_...).
        let first = format!(
            "error: invalid value '{bad}' for '--conflict-exit-code <N>': {bad} is not in 0..=255\n"
        );
        assert!(r.stderr.starts_with(&first), "{arg}: {r:#?}");
    }
    for good in ["0", "255"] {
        run(["--dry-run", "--lock", lock, "--conflict-exit-code", good, "--", "true"]).code(0);
    }
}

#[test]
fn unshare_needs_a_namespace_and_no_empty_item() {
    for (value, why) in [
        ("", "no namespace named"),
        (" ", "no namespace named"),
        ("user,,net", "an empty name in the list"),
        ("net,", "an empty name in the list"),
    ] {
        let r = run(["--unshare", value, "--", "true"]);
        assert_eq!(r.code, Some(125), "--unshare {value:?}: {r:#?}");
        r.stderr_has(&format!("invalid value '{value}' for '--unshare <LIST>'")).stderr_has(why);
    }
}

#[test]
fn unknown_user_and_group_fail_before_spawning() {
    let probe = probe_str();
    run(["--uid", "no-such-user-spawnkit", "--", &probe])
        .code(125)
        .stderr_is("spawnkit: --uid \"no-such-user-spawnkit\": no such user\n");
    run(["--gid", "no-such-group-spawnkit", "--", &probe])
        .code(125)
        .stderr_is("spawnkit: --gid \"no-such-group-spawnkit\": no such group\n");
    run(["--groups", "0,no-such-group-spawnkit", "--", &probe])
        .code(125)
        .stderr_is("spawnkit: --groups \"no-such-group-spawnkit\": no such group\n");
}

// ---------------------------------------------------------------------------------------
// Exit status
// ---------------------------------------------------------------------------------------

#[test]
fn exit_codes_pass_through() {
    for strategy in STRATEGIES {
        for code in [0, 1, 3, 77, 255] {
            let r = run_probe(strategy, &[], &["exit", &code.to_string()]);
            assert_eq!(r.code, Some(code), "{strategy}: {r:#?}");
            assert_eq!(r.stderr, "", "{strategy}");
        }
    }
}

#[test]
fn death_by_signal_is_128_plus_n() {
    for strategy in STRATEGIES {
        run_probe(strategy, &[], &["kill", "9"]).code(137).stderr_is("");
        run_probe(strategy, &[], &["kill", "15"]).code(143).stderr_is("");
        run_probe(strategy, &[], &["kill", "10"]).code(138).stderr_is("");
    }
}

#[test]
fn program_arguments_need_no_double_dash() {
    // Everything after PROGRAM belongs to it, flags included.
    let probe = probe_str();
    run([probe.as_str(), "exit", "4"]).code(4);
    let s = run(["--arg0", "zero", &probe, "state", "--cwd", "-x"]).state();
    assert_eq!(s.get("argv"), "zero\u{1f}state\u{1f}--cwd\u{1f}-x");
}

#[test]
fn program_not_found_is_127() {
    for strategy in STRATEGIES {
        let r = run(["--strategy", strategy, "--", "no-such-program-spawnkit"]);
        r.code(127);
        let step = if strategy == "posix-spawn" { "posix_spawn" } else { "execve" };
        assert!(
            r.stderr.starts_with(&format!(
                "spawnkit: {step} \"no-such-program-spawnkit\": not found in PATH ("
            )),
            "{strategy}: {r:#?}"
        );
        let r = run(["--strategy", strategy, "--", "/no/such/dir/prog"]);
        r.code(127).stderr_is(&format!(
            "spawnkit: {step} \"/no/such/dir/prog\": No such file or directory (os error 2)\n"
        ));
    }
}

#[test]
fn program_not_executable_is_126() {
    let dir = TempDir::new("noexec");
    let file = dir.join("script");
    std::fs::write(&file, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = file.display().to_string();
    for strategy in STRATEGIES {
        let step = if strategy == "posix-spawn" { "posix_spawn" } else { "execve" };
        run(["--strategy", strategy, "--", &path])
            .code(126)
            .stderr_is(&format!("spawnkit: {step} \"{path}\": Permission denied (os error 13)\n"));
    }
}

#[test]
fn bad_cwd_is_125_with_the_step_named() {
    for strategy in FULL {
        run_probe(strategy, &["--cwd", "/nope"], &[])
            .code(125)
            .stderr_is("spawnkit: chdir \"/nope\": No such file or directory (os error 2)\n");
    }
    // glibc reports ENOENT for a failed chdir and a missing program alike; spawnkit checks
    // the directory in the parent to name the step, and says so.
    run_probe("posix-spawn", &["--cwd", "/nope"], &[]).code(125).stderr_is(
        "spawnkit: chdir \"/nope\": No such file or directory (os error 2) \
         (posix_spawn failed; the directory fails in the parent too)\n",
    );
}

// ---------------------------------------------------------------------------------------
// Options, seen from inside the child
// ---------------------------------------------------------------------------------------

#[test]
fn cwd() {
    let dir = TempDir::new("cwd");
    let path = dir.path().display().to_string();
    for strategy in STRATEGIES {
        assert_eq!(state(strategy, &["--cwd", &path]).get("cwd"), path, "{strategy}");
    }
}

#[test]
fn env_set_unset_and_clear() {
    for strategy in STRATEGIES {
        let mut cmd = spawnkit_cmd([
            "run",
            "--strategy",
            strategy,
            "--env",
            "SPAWNKIT_A=1",
            "--env",
            "SPAWNKIT_B=x=y",
            "--env",
            "SPAWNKIT_EMPTY=",
            "--unset",
            "SPAWNKIT_GONE",
            "--",
            &probe_str(),
        ]);
        cmd.env("SPAWNKIT_GONE", "still here").env("SPAWNKIT_KEPT", "kept");
        let s = Res::of(&mut cmd).state();
        let env = s.env();
        assert_eq!(env.get("SPAWNKIT_A"), Some(&"1"), "{strategy}");
        assert_eq!(env.get("SPAWNKIT_B"), Some(&"x=y"), "{strategy}");
        assert_eq!(env.get("SPAWNKIT_EMPTY"), Some(&""), "{strategy}");
        assert_eq!(env.get("SPAWNKIT_KEPT"), Some(&"kept"), "{strategy}");
        assert_eq!(env.get("SPAWNKIT_GONE"), None, "{strategy}");

        let s = state(strategy, &["--env-clear", "--env", "ONLY=1"]);
        assert_eq!(s.env(), BTreeMap::from([("ONLY", "1")]), "{strategy}");
        let s = state(strategy, &["--env-clear"]);
        assert_eq!(s.env(), BTreeMap::new(), "{strategy}");
    }
}

#[test]
fn arg0() {
    for strategy in STRATEGIES {
        let s = run_probe(strategy, &["--arg0", "custom-name"], &["state", "a b", ""]).state();
        assert_eq!(s.get("argv"), "custom-name\u{1f}state\u{1f}a b\u{1f}", "{strategy}");
        let s = state(strategy, &[]);
        assert_eq!(s.get("argv"), probe_str(), "{strategy}: argv[0] defaults to PROGRAM");
    }
}

#[test]
fn rlimits() {
    for strategy in FULL {
        let s = state(
            strategy,
            &[
                "--rlimit",
                "nofile=64:128",
                "--rlimit",
                "RLIMIT_CORE=0",
                "--rlimit",
                "FSIZE=unlimited",
                "--rlimit",
                "msgqueue=4096",
            ],
        );
        assert_eq!(s.get("limit.NOFILE"), "64:128", "{strategy}");
        assert_eq!(s.get("limit.CORE"), "0:0", "{strategy}");
        assert_eq!(s.get("limit.FSIZE"), "unlimited:unlimited", "{strategy}");
        assert_eq!(s.get("limit.MSGQUEUE"), "4096:4096", "{strategy}");
    }
}

#[test]
fn rlimit_the_kernel_refuses_is_125() {
    if is_root() {
        eprintln!("skipped: root may raise any hard limit");
        return;
    }
    let base = state("clone-vfork", &[]);
    let hard = base.get("limit.NOFILE").split(':').nth(1).unwrap().to_string();
    if hard == "unlimited" {
        eprintln!("skipped: the hard NOFILE limit is already unlimited");
        return;
    }
    let raised = format!("nofile={hard}:unlimited");
    for strategy in FULL {
        run_probe(strategy, &["--rlimit", &raised], &[])
            .code(125)
            .stderr_is("spawnkit: setrlimit NOFILE: Operation not permitted (os error 1)\n");
    }
}

#[test]
fn nice_increments() {
    for strategy in FULL {
        let base = state(strategy, &[]).int("nice");
        let s = state(strategy, &["--nice", "5"]);
        assert_eq!(s.int("nice"), (base + 5).min(19), "{strategy}");
        if is_root() {
            let s = state(strategy, &["--nice", "-3"]);
            assert_eq!(s.int("nice"), (base - 3).max(-20), "{strategy}");
        }
    }
}

fn parse_cpus(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

#[test]
fn cpu_affinity() {
    let allowed = parse_cpus(state("clone-vfork", &[]).get("cpus_allowed"));
    assert!(!allowed.is_empty());
    let last = allowed[allowed.len() - 1].to_string();
    for strategy in FULL {
        assert_eq!(state(strategy, &["--cpus", &last]).get("cpus_allowed"), last, "{strategy}");
        if allowed.len() >= 2 {
            let (a, b) = (allowed[0], allowed[1]);
            let expected = if b == a + 1 { format!("{a}-{b}") } else { format!("{a},{b}") };
            let s = state(strategy, &["--cpus", &format!("{a},{b}")]);
            assert_eq!(s.get("cpus_allowed"), expected, "{strategy}");
            let s = state(strategy, &["--cpus", &format!("{a}-{b}")]);
            assert_eq!(
                parse_cpus(s.get("cpus_allowed")),
                (a..=b).filter(|c| allowed.contains(c)).collect::<Vec<_>>(),
                "{strategy}"
            );
        } else {
            eprintln!("only one CPU: the range case is skipped");
        }
    }
}

#[test]
fn setsid_and_process_groups() {
    for strategy in STRATEGIES {
        let s = state(strategy, &[]);
        assert_ne!(s.int("sid"), s.int("pid"), "{strategy}: no new session by default");
        assert_ne!(s.int("pgid"), s.int("pid"), "{strategy}: no new group by default");

        let s = state(strategy, &["--setsid"]);
        assert_eq!(s.int("sid"), s.int("pid"), "{strategy}");
        assert_eq!(s.int("pgid"), s.int("pid"), "{strategy}");

        let s = state(strategy, &["--pgid", "0"]);
        assert_eq!(s.int("pgid"), s.int("pid"), "{strategy}");
        assert_ne!(s.int("sid"), s.int("pid"), "{strategy}");
    }
}

#[test]
fn umask() {
    for strategy in FULL {
        assert_eq!(state(strategy, &["--umask", "027"]).get("umask"), "0027", "{strategy}");
        assert_eq!(state(strategy, &["--umask", "0"]).get("umask"), "0000", "{strategy}");
        assert_eq!(state(strategy, &["--umask", "0777"]).get("umask"), "0777", "{strategy}");
    }
}

#[test]
fn parent_death_signal() {
    for strategy in FULL {
        assert_eq!(state(strategy, &[]).get("pdeathsig"), "0", "{strategy}");
        assert_eq!(state(strategy, &["--pdeathsig", "TERM"]).get("pdeathsig"), "15");
        assert_eq!(state(strategy, &["--pdeathsig", "SIGUSR1"]).get("pdeathsig"), "10");
        assert_eq!(state(strategy, &["--pdeathsig", "9"]).get("pdeathsig"), "9");
    }
}

#[test]
fn parent_death_signal_fires_when_spawnkit_dies() {
    let probe = probe_str();
    let mut sk = spawnkit_cmd(["run", "--pdeathsig", "KILL", "--", &probe, "sleep", "30"])
        .stdin(Stdio::null())
        .spawn()
        .expect("start spawnkit");
    let child = wait_for_probe(&mut sk);
    sk.kill().expect("kill spawnkit");
    sk.wait().expect("reap spawnkit");
    assert!(wait_gone(child), "the probe {child} outlived spawnkit despite --pdeathsig KILL");
}

#[test]
fn no_new_privs() {
    for strategy in FULL {
        assert_eq!(state(strategy, &[]).get("nnp"), "0", "{strategy}");
        assert_eq!(state(strategy, &["--no-new-privs"]).get("nnp"), "1", "{strategy}");
    }
}

#[test]
fn credentials() {
    if !is_root() {
        eprintln!("skipped: changing uid/gid/groups needs root");
        return;
    }
    for strategy in FULL {
        let s = state(strategy, &["--uid", "65534", "--gid", "65534", "--groups", "65534"]);
        assert_eq!(s.get("uid"), "65534\t65534\t65534\t65534", "{strategy}");
        assert_eq!(s.get("gid"), "65534\t65534\t65534\t65534", "{strategy}");
        assert_eq!(s.get("groups"), "65534", "{strategy}");

        // --uid alone drops the supplementary groups and keeps the gid.
        let s = state(strategy, &["--groups", "4"]);
        assert_eq!(s.get("groups"), "4", "{strategy}");
        let s = state(strategy, &["--uid", "65534"]);
        assert_eq!(s.get("uid"), "65534\t65534\t65534\t65534", "{strategy}");
        assert_eq!(s.get("gid"), "0\t0\t0\t0", "{strategy}");
        assert_eq!(s.get("groups"), "", "{strategy}");

        let s = state(strategy, &["--groups", ""]);
        assert_eq!(s.get("groups"), "", "{strategy}");
        assert_eq!(s.get("uid"), "0\t0\t0\t0", "{strategy}");

        // Names, resolved in spawnkit.
        let s = state(strategy, &["--gid", "root", "--groups", "root,65534"]);
        assert_eq!(s.get("gid"), "0\t0\t0\t0", "{strategy}");
        assert_eq!(s.get("groups"), "0 65534", "{strategy}");
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let nobody = passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"nobody")).then(|| f.get(2).unwrap_or(&"").to_string())
        });
        if let Some(uid) = nobody {
            let s = state(strategy, &["--uid", "nobody"]);
            assert_eq!(s.get("uid"), format!("{uid}\t{uid}\t{uid}\t{uid}"), "{strategy}");
        }
    }
}

#[test]
fn posix_spawn_refuses_what_it_cannot_do() {
    let cases: &[&[&str]] = &[
        &["--rlimit", "nofile=64"],
        &["--nice", "1"],
        &["--cpus", "0"],
        &["--uid", "0"],
        &["--gid", "0"],
        &["--groups", "0"],
        &["--umask", "022"],
        &["--pdeathsig", "TERM"],
        &["--no-new-privs"],
    ];
    for flags in cases {
        let r = run_probe("posix-spawn", flags, &[]);
        r.code(125);
        assert_eq!(r.stdout, "", "{flags:?}: the probe must not run");
        assert!(
            r.stderr.starts_with("spawnkit: posix_spawn: the posix-spawn strategy cannot do "),
            "{flags:?}: {r:#?}"
        );
    }
}

#[test]
fn fds_keep_map_and_close() {
    let dir = TempDir::new("fds");
    let path = dir.join("nine");
    let file = File::create(&path).unwrap();
    let target = path.display().to_string();
    let probe = probe_str();
    let with_fd9 = |strategy: &str, flags: &[&str]| -> State {
        let mut args = vec!["run", "--strategy", strategy];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", probe.as_str()]);
        let mut cmd = spawnkit_cmd(&args);
        give_fd9(&mut cmd, &file);
        Res::of(&mut cmd).state()
    };
    for strategy in STRATEGIES {
        let fds = with_fd9(strategy, &[]).fds();
        assert_eq!(fds.keys().copied().collect::<Vec<_>>(), [0, 1, 2], "{strategy}: {fds:?}");

        let fds = with_fd9(strategy, &["--keep-fd", "9"]).fds();
        assert_eq!(fds.get(&9), Some(&target), "{strategy}: {fds:?}");
        assert_eq!(fds.len(), 4, "{strategy}: {fds:?}");

        let fds = with_fd9(strategy, &["--fd", "5=9"]).fds();
        assert_eq!(fds.get(&5), Some(&target), "{strategy}: {fds:?}");
        assert_eq!(fds.get(&9), None, "{strategy}: {fds:?}");

        // Stdout replaced by the file: the report goes there.
        let mut cmd = spawnkit_cmd(["run", "--strategy", strategy, "--fd", "1=9", "--", &probe]);
        give_fd9(&mut cmd, &file);
        let r = Res::of(&mut cmd);
        r.code(0);
        assert_eq!(r.stdout, "", "{strategy}");
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(written.contains("fds=0:"), "{strategy}: {written}");
        assert!(written.contains(&format!("1:{target}")), "{strategy}: {written}");

        let fds = with_fd9(strategy, &["--no-close-fds"]).fds();
        assert_eq!(fds.get(&9), Some(&target), "{strategy}: {fds:?}");
    }
}

#[test]
fn fd_that_is_not_open_is_125() {
    let probe = probe_str();
    run(["--keep-fd", "977", "--", &probe])
        .code(125)
        .stderr_is("spawnkit: --keep-fd 977: fd 977 is not open in spawnkit (Bad file descriptor (os error 9))\n");
    run(["--fd", "3=978", "--", &probe]).code(125).stderr_is(
        "spawnkit: --fd 3=978: fd 978 is not open in spawnkit (Bad file descriptor (os error 9))\n",
    );
}

#[test]
fn stdio_files() {
    let dir = TempDir::new("stdio");
    let probe = probe_str();
    for strategy in STRATEGIES {
        let out = dir.join(&format!("{strategy}.out"));
        let err = dir.join(&format!("{strategy}.err"));
        let input = dir.join("input");
        let (o, e, i) =
            (out.display().to_string(), err.display().to_string(), input.display().to_string());

        // stdout and stderr to files (truncated), the streams of spawnkit stay empty.
        std::fs::write(&out, "old contents that must go away").unwrap();
        let r = run([
            "--strategy",
            strategy,
            "--stdout",
            &o,
            "--stderr",
            &e,
            "--",
            &probe,
            "spew",
            "5",
        ]);
        r.code(0).stderr_is("");
        assert_eq!(r.stdout, "", "{strategy}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "ooooo", "{strategy}");
        assert_eq!(std::fs::read_to_string(&err).unwrap(), "eeeee", "{strategy}");

        // Append.
        let args = [
            "--strategy",
            strategy,
            "--stdout-append",
            &o,
            "--stderr-append",
            &e,
            "--",
            &probe,
            "spew",
            "2",
        ];
        run(args).code(0);
        run(args).code(0);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "ooooooooo", "{strategy}");
        assert_eq!(std::fs::read_to_string(&err).unwrap(), "eeeeeeeee", "{strategy}");

        // stderr where stdout goes.
        let r = run([
            "--strategy",
            strategy,
            "--stdout",
            &o,
            "--stderr-to-stdout",
            "--",
            &probe,
            "spew",
            "3",
        ]);
        r.code(0).stderr_is("");
        let both = std::fs::read_to_string(&out).unwrap();
        assert_eq!(both.len(), 6, "{strategy}: {both:?}");
        assert_eq!(both.matches('o').count(), 3, "{strategy}: {both:?}");

        // stdin from a file.
        std::fs::write(&input, "line one\nline two\n").unwrap();
        let r = run(["--strategy", strategy, "--stdin", &i, "--", &probe, "cat"]);
        r.code(0);
        assert_eq!(r.stdout, "line one\nline two\n", "{strategy}");

        // '-' inherits.
        let r = run([
            "--strategy",
            strategy,
            "--stdout",
            "-",
            "--stdin",
            "-",
            "--",
            &probe,
            "spew",
            "1",
        ]);
        r.code(0);
        assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("o", "e"), "{strategy}");
    }
}

#[test]
fn stdout_file_is_created_with_mode_0666_minus_umask() {
    let dir = TempDir::new("mode");
    let out = dir.join("created");
    let o = out.display().to_string();
    let r = run(["--stdout", &o, "--", &probe_str()]);
    r.code(0);
    // The probe inherited spawnkit's umask: it says what the mode should be.
    let s = State::parse(&std::fs::read_to_string(&out).unwrap());
    let umask = u32::from_str_radix(s.get("umask"), 8).unwrap();
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666 & !umask);
}

#[test]
fn stdio_file_that_cannot_be_opened_is_125() {
    let probe = probe_str();
    run(["--stdout", "/nope/dir/out", "--", &probe]).code(125).stderr_is(
        "spawnkit: open \"/nope/dir/out\" (--stdout): No such file or directory (os error 2)\n",
    );
    run(["--stdin", "/nope/in", "--", &probe]).code(125).stderr_is(
        "spawnkit: open \"/nope/in\" (--stdin): No such file or directory (os error 2)\n",
    );
}

#[test]
fn signal_mask() {
    for strategy in STRATEGIES {
        // spawnkit blocks the signals it forwards; the child must not inherit that.
        assert_eq!(state(strategy, &[]).get("sigblk"), "0000000000000000", "{strategy}");
        let s = state(strategy, &["--sigmask", "INT,SIGTERM,10"]);
        assert_eq!(s.get("sigblk"), "0000000000004202", "{strategy}");
    }
}

#[test]
fn restore_signals() {
    // The probe, a Rust program, ignores SIGPIPE itself, so SIGXFSZ shows the reset: spawnkit
    // is started with it ignored, which execve passes on unless the child resets it.
    const SIGXFSZ_BIT: u64 = 1 << (libc::SIGXFSZ - 1);
    let ignored = |flags: &[&str]| -> u64 {
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        let probe = probe_str();
        args.extend_from_slice(&["--", &probe]);
        let mut cmd = spawnkit_cmd(&args);
        // SAFETY: the hook runs in the forked child before exec and only calls signal(2),
        // which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
        let s = Res::of(&mut cmd).state();
        u64::from_str_radix(s.get("sigign"), 16).unwrap() & SIGXFSZ_BIT
    };
    for strategy in STRATEGIES {
        assert_eq!(ignored(&["--strategy", strategy]), 0, "{strategy}");
        let kept = ignored(&["--strategy", strategy, "--no-restore-signals"]);
        assert_eq!(kept, SIGXFSZ_BIT, "{strategy}");
    }
}

// ---------------------------------------------------------------------------------------
// Isolation flags take any bytes, as --cwd and --chroot do
// ---------------------------------------------------------------------------------------

#[test]
fn hostname_takes_any_bytes() {
    use std::os::unix::ffi::OsStrExt;
    let name = OsStr::from_bytes(b"h\xff-box");
    let out = spawnkit_cmd(["run", "--hostname"])
        .arg(name)
        .args(["--", "cat", "/proc/sys/kernel/hostname"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"h\xff-box\n");
}

#[test]
fn ro_bind_takes_any_bytes() {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let dir = TempDir::new("robind-bytes");
    let src = dir.path().join(OsStr::from_bytes(b"src-\xff"));
    let dst = dir.path().join(OsStr::from_bytes(b"dst-\xfe"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&dst).unwrap();
    std::fs::write(src.join("f"), "x").unwrap();
    // `sh -c SCRIPT sh DIR`: write into DIR, then read it.
    let script = "echo y > \"$1/f\" 2>/dev/null; echo \"write $?\"; cat \"$1/f\"";
    let mut spec = src.clone().into_os_string().into_vec();
    spec.push(b':');
    spec.extend_from_slice(dst.as_os_str().as_bytes());
    for (bind, seen) in [(src.clone().into_os_string(), &src), (OsString::from_vec(spec), &dst)] {
        let out = spawnkit_cmd(["run", "--ro-bind"])
            .arg(&bind)
            .args(["--", "sh", "-c", script, "sh"])
            .arg(seen)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.starts_with("write ") && !stdout.starts_with("write 0"), "{stdout}");
        assert!(stdout.ends_with("\nx"), "the bound file: {stdout}");
    }
    assert_eq!(std::fs::read_to_string(src.join("f")).unwrap(), "x");
}

// ---------------------------------------------------------------------------------------
// Dry run
// ---------------------------------------------------------------------------------------

#[test]
fn dry_run_prints_the_steps_and_spawns_nothing() {
    let dir = TempDir::new("dry");
    let out = dir.join("out");
    let marker = dir.join("marker");
    let (o, m) = (out.display().to_string(), marker.display().to_string());
    let r = run([
        "--dry-run",
        "--cwd",
        "/tmp",
        "--rlimit",
        "nofile=64",
        "--umask",
        "077",
        "--stdout",
        &o,
        "--",
        "touch",
        &m,
    ]);
    r.code(0).stderr_is("");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines[0].starts_with(&format!("open \"{o}\" O_WRONLY|O_CREAT|O_TRUNC 0666 -> fd ")),
        "{lines:#?}"
    );
    assert!(lines.contains(&"strategy clone-vfork"), "{lines:#?}");
    assert!(lines.contains(&"setrlimit NOFILE 64:64"), "{lines:#?}");
    assert!(lines.contains(&"umask 0077"), "{lines:#?}");
    assert!(lines.contains(&"chdir \"/tmp\""), "{lines:#?}");
    assert!(lines.contains(&"sigprocmask SETMASK 0x0"), "{lines:#?}");
    let last = lines.last().unwrap();
    assert!(
        last.starts_with("execve ") && last.ends_with(&format!("argv [\"touch\", \"{m}\"]")),
        "{last}"
    );
    assert!(!marker.exists(), "the program ran in a dry run");
    assert!(!out.exists(), "the stdout file was created in a dry run");

    let r = run(["--dry-run", "--strategy", "fork-exec", "--", "true"]);
    r.code(0);
    assert!(r.stdout.starts_with("strategy fork-exec\n"), "{}", r.stdout);
}

#[test]
fn dry_run_shows_bytes_exactly() {
    use std::os::unix::ffi::OsStrExt;
    // Not UTF-8, a space and a backslash: quoted with C escapes ("d\377 \\"), or escaped as
    // ls -b where a path stands bare (d\377\ \\). No U+FFFD: the output is exact.
    let dir = TempDir::new("dry-bytes");
    let odd = dir.path().join(OsStr::from_bytes(b"d\xff \\"));
    std::fs::create_dir(&odd).unwrap();
    let quoted = format!(r"{}/d\377 \\", dir.path().display());
    let bare = format!(r"{}/d\377\ \\", dir.path().display());
    let out = spawnkit_cmd(["run", "--dry-run", "--cwd"])
        .arg(&odd)
        .arg("--stdout")
        .arg(odd.join("out"))
        .arg("--ro-bind")
        .arg(&odd)
        .arg("--lock")
        .arg(odd.join("lock"))
        .arg("--hostname")
        .arg(OsStr::from_bytes(b"h\xff"))
        .args(["--", "/bin/echo"])
        .arg(OsStr::from_bytes(b"a\xff\n"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("the dry run prints ASCII here");
    let lines: Vec<&str> = text.lines().collect();
    let open = format!(r#"open "{quoted}/out" O_WRONLY|O_CREAT|O_TRUNC 0666 -> fd "#);
    assert!(lines[0].starts_with(&open), "{text}");
    for line in [
        format!(r#"chdir "{quoted}""#),
        r#"sethostname "h\377""#.to_string(),
        format!("mount bind {bare} on {bare}"),
        r#"execve "/bin/echo" argv ["/bin/echo", "a\377\n"]"#.to_string(),
    ] {
        assert!(lines.contains(&line.as_str()), "missing {line}\nin:\n{text}");
    }
    let flock = format!(r"flock {bare}/lock LOCK_EX (fd ");
    assert!(lines.iter().any(|l| l.starts_with(&flock)), "missing {flock}\nin:\n{text}");
    // The CLI's own messages quote the same way.
    let missing = dir.path().join(OsStr::from_bytes(b"no\xff/out"));
    run([OsStr::new("--stdout"), missing.as_os_str(), OsStr::new("--"), OsStr::new("true")])
        .code(125)
        .stderr_has(&format!(
            r#"spawnkit: open "{}/no\377/out" (--stdout): "#,
            dir.path().display()
        ));
}

#[test]
fn dry_run_reports_invalid_commands() {
    run(["--dry-run", "--unset", "A=B", "--", "true"]).code(125).stderr_is(
        "spawnkit: environment \"A=B\": a variable name must be non-empty and have no '='\n",
    );
}

// ---------------------------------------------------------------------------------------
// Output that cannot be written: a full device, a closed pipe
// ---------------------------------------------------------------------------------------

/// /dev/full, opened for writing: every write fails with ENOSPC.
fn dev_full() -> Stdio {
    Stdio::from(std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full"))
}

/// `spawnkit ARGS` with stdout and stderr as given; (exit code, stderr if captured).
fn with_outputs(args: &[&str], stdout: Stdio, stderr: Stdio) -> (Option<i32>, String) {
    let out = spawnkit_cmd(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .output()
        .expect("run spawnkit");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn launch_errors_keep_their_exit_code_when_stderr_cannot_be_written() {
    for (args, code) in [
        (&["run", "--cwd", "/nope", "--", "true"][..], 125),
        (&["run", "--", "no-such-program-spawnkit"][..], 127),
        (&["run", "--uid", "no-such-user-spawnkit", "--", "true"][..], 125),
        (&["run", "--no-such-flag", "--", "true"][..], 125),
    ] {
        let (full, _) = with_outputs(args, Stdio::null(), dev_full());
        assert_eq!(full, Some(code), "{args:?} 2>/dev/full");
        let (closed, _) = with_outputs(args, Stdio::null(), closed_pipe());
        assert_eq!(closed, Some(code), "{args:?} 2>&- (closed pipe)");
    }
}

#[test]
fn dry_run_into_a_full_or_closed_stdout() {
    let args = ["run", "--dry-run", "--", "true"];
    let (code, stderr) = with_outputs(&args, dev_full(), Stdio::piped());
    assert_eq!(code, Some(125), "{stderr}");
    assert_eq!(stderr, "spawnkit: write to stdout: No space left on device (os error 28)\n");
    // A reader that went away had all it wanted, as for `spawnkit ps | head -1`.
    let (code, stderr) = with_outputs(&args, closed_pipe(), Stdio::piped());
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
    // Neither stream works: the exit code still says so.
    let (code, _) = with_outputs(&args, dev_full(), closed_pipe());
    assert_eq!(code, Some(125));
}

#[test]
fn help_and_version_into_a_full_or_closed_stdout() {
    for args in [
        &["--help"][..],
        &["-h"][..],
        &["--version"][..],
        &["help"][..],
        &["help", "run"][..],
        &["run", "--help"][..],
        &["bench", "--help"][..],
        &["ps", "--help"][..],
        &["mem", "--help"][..],
    ] {
        let (code, stderr) = with_outputs(args, dev_full(), Stdio::piped());
        assert_eq!(code, Some(125), "{args:?} >/dev/full: {stderr}");
        assert_eq!(
            stderr, "spawnkit: write to stdout: No space left on device (os error 28)\n",
            "{args:?} >/dev/full"
        );
        let (code, stderr) = with_outputs(args, closed_pipe(), Stdio::piped());
        assert_eq!((code, stderr.as_str()), (Some(0), ""), "{args:?} >&- (closed pipe)");
        let (code, _) = with_outputs(args, dev_full(), dev_full());
        assert_eq!(code, Some(125), "{args:?} >/dev/full 2>/dev/full");
    }
}

/// stdout closed from the start (`>&-`): a report with nowhere to go fails as `ls >&-` does
/// (EBADF on stderr, a failing exit code: 125 where a usage error's is, ps, mem and bench's
/// 1), not taken silently by the /dev/null Rust's runtime puts on the number.
#[test]
fn reports_into_a_stdout_closed_from_the_start() {
    let ebadf = "write to stdout: Bad file descriptor (os error 9)\n";
    for (args, code, who) in [
        (&["--help"][..], 125, "spawnkit"),
        (&["--version"][..], 125, "spawnkit"),
        (&["ps", "--help"][..], 125, "spawnkit"),
        (&["run", "--dry-run", "--", "true"][..], 125, "spawnkit"),
        (&["ps"][..], 1, "spawnkit ps"),
        (&["mem"][..], 1, "spawnkit mem"),
        // With no --json or --plot file, before it measures anything (a run of every method
        // would take minutes).
        (&["bench", "all"][..], 1, "spawnkit bench"),
    ] {
        let mut cmd = spawnkit_cmd(args);
        cmd.stdin(Stdio::null());
        common::close_fd_at_exec(&mut cmd, 1);
        let out = cmd.stderr(Stdio::piped()).output().expect("run spawnkit");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?} >&-: {stderr}");
        assert_eq!(stderr, format!("{who}: {ebadf}"), "{args:?} >&-");
    }
}

#[test]
fn ps_and_mem_with_nowhere_to_write() {
    // stdout full and stderr closed: the failure cannot be told, but the exit code says it.
    for args in [&["ps"][..], &["ps", "--verbose"][..], &["mem"][..], &["mem", "--shared"][..]] {
        let (code, _) = with_outputs(args, dev_full(), closed_pipe());
        assert_eq!(code, Some(1), "{args:?} >/dev/full 2>&-");
        let (code, _) = with_outputs(args, Stdio::null(), closed_pipe());
        assert_eq!(code, Some(0), "{args:?} 2>&-");
    }
}

#[test]
fn bench_report_into_a_full_or_closed_stdout() {
    let dir = TempDir::new("bench-out");
    let json = dir.join("out.json");
    let json = json.to_str().unwrap();
    let args =
        ["bench", "latency", "--sizes", "0", "--rows", "vfork_exec", "--runs", "1", "--json", json];
    let (code, stderr) = with_outputs(&args, dev_full(), Stdio::piped());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr
            .ends_with("spawnkit bench: write to stdout: No space left on device (os error 28)\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(Path::new(json).exists(), "the JSON file is written all the same");
    std::fs::remove_file(json).unwrap();
    let (code, stderr) = with_outputs(&args, closed_pipe(), closed_pipe());
    assert_eq!(code, Some(0), "{stderr}");
    assert!(Path::new(json).exists(), "the JSON file is written all the same");
}

// ---------------------------------------------------------------------------------------
// Signal forwarding
// ---------------------------------------------------------------------------------------

/// Every catchable signal back at its default action, in a forked child before exec: the
/// tests may run with some ignored (SIGINT and SIGQUIT in the background, SIGHUP under
/// nohup, glibc's 32 always), and an ignored signal is inherited by spawnkit and its program,
/// which then survives what it is sent. sigaction(3) refuses 32 and 33, hence raw
/// rt_sigaction. Async-signal-safe: raw syscalls on a zeroed struct that outlives them.
fn default_signals() {
    let dfl = [0u64; 4]; // handler SIG_DFL, no flags, no restorer, empty mask
    for sig in (1..=64).filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP) {
        // SAFETY: rt_sigaction reads one kernel sigaction (4 words) from a live buffer.
        unsafe { libc::syscall(libc::SYS_rt_sigaction, sig, dfl.as_ptr(), 0usize, 8usize) };
    }
}

/// Start `spawnkit run FLAGS -- probe sleep 30`, send `sig` to spawnkit once the probe runs,
/// and return spawnkit's exit code.
fn forward(flags: &[&str], sig: i32) -> Option<i32> {
    let probe = probe_str();
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", &probe, "sleep", "30"]);
    let mut cmd = spawnkit_cmd(&args);
    cmd.stdin(Stdio::null());
    // SAFETY: the hook runs in the forked child before exec and is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            default_signals();
            Ok(())
        });
    }
    let mut sk = cmd.spawn().expect("start spawnkit");
    let child = wait_for_probe(&mut sk);
    // SAFETY: kill takes integers; the pid is our own unreaped child.
    assert_eq!(unsafe { libc::kill(sk.id() as i32, sig) }, 0);
    let code = wait_exit(&mut sk);
    assert!(wait_gone(child), "the probe {child} still runs after spawnkit exited");
    code
}

#[test]
fn sigterm_is_forwarded() {
    for strategy in STRATEGIES {
        assert_eq!(forward(&["--strategy", strategy], libc::SIGTERM), Some(143), "{strategy}");
    }
}

#[test]
fn other_signals_are_forwarded() {
    assert_eq!(forward(&[], libc::SIGINT), Some(130));
    assert_eq!(forward(&[], libc::SIGHUP), Some(129));
    assert_eq!(forward(&[], libc::SIGUSR1), Some(138));
    assert_eq!(forward(&[], libc::SIGUSR2), Some(140));
    // SIGQUIT's default action dumps core: still 128 + 3.
    assert_eq!(forward(&["--rlimit", "core=0"], libc::SIGQUIT), Some(131));
}

/// Start `spawnkit run --rlimit core=0 -- sleep 30` (coreutils' sleep: no handler of its own,
/// unlike the probe, whose Rust runtime ignores SIGPIPE and catches SIGSEGV and SIGBUS), send
/// `sig` to spawnkit once sleep runs, and return spawnkit's exit code. The sleep must be gone
/// by then: not orphaned.
fn forward_to_sleep(sig: i32) -> Option<i32> {
    let mut cmd = spawnkit_cmd(["run", "--rlimit", "core=0", "--", "sleep", "30"]);
    cmd.stdin(Stdio::null());
    // Every signal at its default action, as from a shell ([`default_signals`]).
    // SAFETY: the hook runs in the forked child before exec and is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            default_signals();
            Ok(())
        });
    }
    let mut sk = cmd.spawn().expect("start spawnkit");
    let child = wait_for_child(&mut sk, "sleep");
    // SAFETY: kill takes integers; the pid is our own unreaped child.
    assert_eq!(unsafe { libc::kill(sk.id() as i32, sig) }, 0);
    let code = wait_exit(&mut sk);
    let gone = wait_gone_named(child, "sleep");
    if !gone {
        // SAFETY: as above, for the orphaned sleep, which the test then reports.
        unsafe { libc::kill(child as i32, libc::SIGKILL) };
    }
    assert!(gone, "signal {sig}: sleep {child} was orphaned (spawnkit exited {code:?})");
    code
}

#[test]
fn every_signal_that_would_end_spawnkit_is_forwarded() {
    let mut sigs = vec![
        libc::SIGALRM,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGIO,
        libc::SIGPWR,
        libc::SIGSTKFLT,
        libc::SIGABRT,
        // Not spawnkit's own write to a closed pipe: another process's kill.
        libc::SIGPIPE,
        // Fault signals sent with kill(1), not faults.
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGTRAP,
        libc::SIGSYS,
    ];
    // The real-time signals, glibc's own 32 and 33 included (its sigprocmask will not block
    // them, and without a handler they end a process).
    sigs.extend([32, 33, 34, 35, 50, 63, 64]);
    for sig in sigs {
        assert_eq!(forward_to_sleep(sig), Some(128 + sig), "signal {sig}");
    }
}

#[test]
fn signals_are_forwarded_to_a_child_in_its_own_session_or_group() {
    assert_eq!(forward(&["--setsid"], libc::SIGTERM), Some(143));
    assert_eq!(forward(&["--pgid", "0"], libc::SIGINT), Some(130));
}

/// A new pseudo-terminal: (master, slave), both close-on-exec.
fn open_pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two fds; the name, termios and winsize arguments may be NULL.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", io::Error::last_os_error());
    for fd in [master, slave] {
        // SAFETY: F_SETFD on an fd we just opened.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    unsafe { (std::os::fd::OwnedFd::from_raw_fd(master), std::os::fd::OwnedFd::from_raw_fd(slave)) }
}

/// Run `spawnkit run FLAGS -- probe sleep 30` as the session leader of a new terminal, type
/// Ctrl-C on it once the probe runs, and return spawnkit's exit code. The terminal sends
/// SIGINT (si_code SI_KERNEL) to its foreground process group: spawnkit's.
fn ctrl_c(flags: &[&str]) -> Option<i32> {
    let (master, slave) = open_pty();
    let probe = probe_str();
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", &probe, "sleep", "30"]);
    let mut cmd = spawnkit_cmd(&args);
    cmd.stdin(Stdio::from(slave)).stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: the hook runs in the forked child before exec and only makes async-signal-safe
    // calls (rt_sigaction, setsid, ioctl) on integers: a new session whose controlling
    // terminal is the pty on stdin, with every signal at its default action.
    unsafe {
        cmd.pre_exec(|| {
            default_signals();
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut sk = cmd.spawn().expect("start spawnkit");
    let child = wait_for_probe(&mut sk);
    // SAFETY: writes one byte from a live buffer to the pty master we own.
    let n = unsafe { libc::write(master.as_raw_fd(), b"\x03".as_ptr().cast(), 1) };
    assert_eq!(n, 1, "write ^C: {}", io::Error::last_os_error());
    let code = wait_exit(&mut sk);
    assert!(wait_gone(child), "the probe {child} still runs after spawnkit exited");
    drop(master);
    code
}

#[test]
fn terminal_ctrl_c_reaches_the_child_once() {
    // Same process group: the kernel signals the child itself; spawnkit survives (the signal
    // is blocked) and reports the child's death.
    assert_eq!(ctrl_c(&[]), Some(130));
    // A group or session of its own is not the terminal's foreground group: spawnkit must
    // forward the kernel's signal or the child never hears of it.
    assert_eq!(ctrl_c(&["--pgid", "0"]), Some(130));
    assert_eq!(ctrl_c(&["--setsid"]), Some(130));
}

// ---------------------------------------------------------------------------------------
// Flags that contradict each other or that nothing uses; values out of range
// ---------------------------------------------------------------------------------------

#[test]
fn fd_maps_may_not_override_the_stream_flags() {
    let dir = TempDir::new("stdio-vs-fd");
    let out = dir.join("out.txt");
    let o = out.to_str().unwrap();
    // (flags, the --fd or --keep-fd given, the stream flag it contradicts, the fd)
    let cases: &[(&[&str], &str, &str, i32)] = &[
        (&["--stdout", o, "--fd", "1=2"], "--fd 1=2", "--stdout", 1),
        (&["--stdout-append", o, "--fd", "1=2"], "--fd 1=2", "--stdout-append", 1),
        (&["--stdout", o, "--keep-fd", "1"], "--keep-fd 1", "--stdout", 1),
        (&["--stderr", o, "--fd", "2=1"], "--fd 2=1", "--stderr", 2),
        (&["--stderr-append", o, "--fd", "2=1"], "--fd 2=1", "--stderr-append", 2),
        (&["--stderr-to-stdout", "--fd", "2=1"], "--fd 2=1", "--stderr-to-stdout", 2),
        (&["--stdin", "/dev/null", "--fd", "0=2"], "--fd 0=2", "--stdin", 0),
        (&["--stdin", "/dev/null", "--keep-fd", "0"], "--keep-fd 0", "--stdin", 0),
    ];
    for &(flags, given, stream, fd) in cases {
        for dry in [false, true] {
            let mut args: Vec<&str> = flags.to_vec();
            if dry {
                args.push("--dry-run");
            }
            args.extend(["--", "echo", "hello"]);
            let r = run(&args);
            r.code(125).stderr_is(&format!(
                "spawnkit: {given} and {stream} both set the program's fd {fd}: give only one\n"
            ));
            assert_eq!(r.stdout, "", "{args:?}");
            assert!(!out.exists(), "{args:?}: the file was opened for nothing");
        }
    }
    // Different fds do not collide.
    run(["--stdout", o, "--fd", "3=2", "--dry-run", "--", "true"]).code(0);
    // Nor may two of --fd/--keep-fd set one fd two ways (the same one twice is the same).
    for (flags, first, second) in [
        (&["--fd", "5=1", "--keep-fd", "5"][..], "--fd 5=1", "--keep-fd 5"),
        (&["--fd", "5=1", "--fd", "5=2"][..], "--fd 5=1", "--fd 5=2"),
    ] {
        let mut args = flags.to_vec();
        args.extend(["--dry-run", "--", "true"]);
        run(&args).code(125).stderr_is(&format!(
            "spawnkit: {first} and {second} both set the program's fd 5: give only one\n"
        ));
    }
    run(["--fd", "5=1", "--fd", "5=1", "--dry-run", "--", "true"]).code(0);
}

#[test]
fn key_file_without_a_server_is_refused() {
    let local = |args: &[&str]| {
        let mut cmd = spawnkit_cmd(["run"]);
        cmd.args(args).env_remove("SPAWNKIT_SERVER");
        Res::of(&mut cmd)
    };
    for args in [
        &["--key-file", "/etc/passwd", "--", "echo", "x"][..],
        &["--key-file", "/etc/passwd", "--dry-run", "--", "echo", "x"][..],
    ] {
        let r = local(args);
        r.code(125).stderr_is(
            "spawnkit: --key-file is a spawn server's key: give --via SOCKET (or set \
             $SPAWNKIT_SERVER) too, or drop it\n",
        );
        assert_eq!(r.stdout, "", "{args:?}: echo must not run");
    }
    // With a server named (a dry run connects to nothing) it is taken.
    local(&["--via", "/nonexistent.sock", "--key-file", "/etc/passwd", "--dry-run", "--", "true"])
        .code(0);
    let mut cmd = spawnkit_cmd(["run", "--key-file", "/etc/passwd", "--dry-run", "--", "true"]);
    Res::of(cmd.env("SPAWNKIT_SERVER", "/nonexistent.sock")).code(0);
}

#[test]
fn seconds_too_large_say_so_and_name_the_maximum() {
    let dir = TempDir::new("secs");
    let lock = dir.join("lock");
    let lock = lock.to_str().unwrap();
    for big in ["1e30", "1000000001", "inf"] {
        run(["--lock", lock, "--lock-timeout", big, "--", "true"])
            .bad_value("--lock-timeout", big)
            .stderr_has(&format!("\"{big}\" is too large: at most 1000000000 seconds"));
    }
    run(["--lock", lock, "--lock-timeout", "1000000000", "--dry-run", "--", "true"]).code(0);
    run(["--lock", lock, "--lock-timeout", "nan", "--", "true"])
        .bad_value("--lock-timeout", "nan")
        .stderr_has("\"nan\" is not a number of seconds");
}

#[test]
fn negative_numbers_reach_the_flags_parser() {
    let dir = TempDir::new("negative");
    let lock = dir.join("lock");
    let lock = lock.to_str().unwrap();
    let cases: &[(&str, &str, &str)] = &[
        ("--lock-timeout", "-1", "\"-1\" is negative: a number of seconds is 0 or more"),
        ("--lock-timeout", "-0.5", "is negative"),
        ("--uid", "-1", "-1 is negative: a user id is 0 to 4294967295"),
        ("--gid", "-1", "-1 is negative: a group id is 0 to 4294967295"),
        ("--pgid", "-1", "-1 is not in 0..=2147483647"),
        ("--keep-fd", "-1", "-1 is not in 0..=2147483647"),
        ("--conflict-exit-code", "-1", "-1 is not in 0..=255"),
    ];
    for &(flag, value, why) in cases {
        // The value as a word of its own, where clap took it for an unknown flag.
        run(["--lock", lock, flag, value, "--", "true"]).bad_value(flag, value).stderr_has(why);
    }
    // --nice takes negative numbers as it did.
    run(["--nice", "-1", "--dry-run", "--", "true"]).code(0);
}

#[test]
fn dry_run_shows_the_environment_changes() {
    let r = run([
        "--dry-run",
        "--env-clear",
        "--unset",
        "B",
        "--env",
        "A=1",
        "--env",
        "C=x y",
        "--",
        "/usr/bin/env",
    ]);
    r.code(0).stderr_is("");
    let lines: Vec<&str> = r.stdout.lines().collect();
    let n = lines.len();
    assert!(n >= 5, "{lines:#?}");
    assert_eq!(
        lines[n - 5..],
        [
            "env clear",
            "env unset \"B\"",
            "env set \"A=1\"",
            "env set \"C=x y\"",
            "execve \"/usr/bin/env\" argv [\"/usr/bin/env\"]",
        ],
        "{lines:#?}"
    );
    // No environment flag: no env line.
    let r = run(["--dry-run", "--", "/usr/bin/env"]);
    assert!(!r.stdout.lines().any(|l| l.starts_with("env ")), "{}", r.stdout);
}

#[test]
fn dry_run_refuses_what_the_strategy_would_refuse() {
    for flags in [
        &["--rlimit", "nofile=5"][..],
        &["--uid", "1"][..],
        &["--nice", "1"][..],
        &["--umask", "077"][..],
        &["--cpus", "0"][..],
        &["--pdeathsig", "TERM"][..],
        &["--no-new-privs"][..],
    ] {
        let with = |dry: bool| {
            let mut args = vec!["--strategy", "posix-spawn"];
            args.extend_from_slice(flags);
            if dry {
                args.push("--dry-run");
            }
            args.extend(["--", "true"]);
            run(&args)
        };
        let real = with(false);
        real.code(125).stderr_has("posix-spawn strategy cannot do");
        let dry = with(true);
        assert_eq!(dry.code, Some(125), "{flags:?}: {dry:#?}");
        assert_eq!(dry.stdout, "", "{flags:?}: no plan is printed");
        assert_eq!(dry.stderr, real.stderr, "{flags:?}: the dry run fails as the run does");
    }
    // What posix_spawn can do still prints its plan.
    let r = run(["--strategy", "posix-spawn", "--setsid", "--cwd", "/", "--dry-run", "--", "true"]);
    r.code(0);
    assert!(r.stdout.starts_with("strategy posix-spawn\n"), "{}", r.stdout);
}

/// A dry run creates nothing: not the --stdout file, and not the lock file that the plan
/// opens to show its fd (one that was there already stays).
#[test]
fn a_dry_run_leaves_no_lock_file() {
    let dir = TempDir::new("dry-lock");
    let lock = dir.join("new.lock");
    let l = lock.to_str().unwrap();
    let shown = run(["--lock", l, "--dry-run", "--", "true"]);
    shown.code(0);
    assert!(shown.stdout.contains("flock"), "{}", shown.stdout);
    assert!(!lock.exists(), "the dry run created the lock file");
    std::fs::write(&lock, b"").unwrap();
    run(["--lock", l, "--dry-run", "--", "true"]).code(0);
    assert!(lock.exists(), "the dry run removed a lock file that was there");
}

/// `spawnkit run ARGS...` started with its fd `fd` closed (`>&-`), run to completion.
fn run_with_fd_closed(fd: i32, args: &[&str]) -> Res {
    let mut cmd = spawnkit_cmd(["run"]);
    cmd.args(args);
    common::close_fd_at_exec(&mut cmd, fd);
    Res::of(&mut cmd)
}

/// "open"/"closed" for each of fds 0-2, in a string like the script's.
fn open_closed(closed: &[i32]) -> String {
    let words: Vec<&str> =
        (0..3).map(|n| if closed.contains(&n) { "closed" } else { "open" }).collect();
    words.join(" ")
}

#[test]
fn a_stream_closed_when_spawnkit_starts_is_closed_in_the_program() {
    let dir = TempDir::new("closed-at-start");
    let report = dir.join("report");
    let r = report.to_str().unwrap();
    let script = common::OPEN_OR_CLOSED;
    for strategy in STRATEGIES {
        for fd in 0..3 {
            let what = format!("{strategy}, fd {fd} closed");
            let _ = std::fs::remove_file(&report);
            run_with_fd_closed(fd, &["--strategy", strategy, "--", "sh", "-c", script, r]).code(0);
            let seen = std::fs::read_to_string(&report).unwrap();
            assert_eq!(seen.trim_end(), open_closed(&[fd]), "{what}");
        }
        // What a program that writes there gets: EBADF, exit 1, as `/bin/echo hi >&-`.
        let r = run_with_fd_closed(1, &["--strategy", strategy, "--", "/bin/echo", "hi"]);
        r.code(1).stderr_has("Bad file descriptor");
    }
    // spawnkit itself keeps the /dev/null Rust's runtime put there (no file of its own may
    // take the number); the program, its child, reports its parent's fd 1.
    let parents = "readlink /proc/$PPID/fd/1 > \"$0\"";
    run_with_fd_closed(1, &["--", "sh", "-c", parents, r]).code(0);
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "/dev/null\n");
}

#[test]
fn a_stream_flag_sets_a_stream_closed_when_spawnkit_starts() {
    let dir = TempDir::new("closed-at-start-flags");
    let report = dir.join("report");
    let r = report.to_str().unwrap();
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    let script = common::OPEN_OR_CLOSED;
    // (fd closed at start, flags, the fds the program finds closed)
    let cases: &[(i32, &[&str], &[i32])] = &[
        (1, &["--stdout", o], &[]),
        (1, &["--stdout-append", o], &[]),
        (1, &["--stdout", "-"], &[1]),
        (1, &["--fd", "1=2"], &[]),
        (1, &["--stderr-to-stdout"], &[1, 2]),
        (2, &["--stderr-to-stdout"], &[]),
        (2, &["--stderr", o], &[]),
        (0, &["--stdin", "/dev/null"], &[]),
        (0, &["--stdin", "-"], &[0]),
    ];
    for &(fd, flags, closed) in cases {
        let _ = std::fs::remove_file(&report);
        let mut args = flags.to_vec();
        args.extend(["--", "sh", "-c", script, r]);
        run_with_fd_closed(fd, &args).code(0);
        let seen = std::fs::read_to_string(&report).unwrap();
        assert_eq!(seen.trim_end(), open_closed(closed), "fd {fd} closed, {flags:?}");
    }
    // A closed fd cannot be kept or mapped: the same error as for any fd that is not open.
    for (fd, flags) in [(1, ["--keep-fd", "1"]), (0, ["--fd", "5=0"])] {
        let mut args = flags.to_vec();
        args.extend(["--", "true"]);
        let given = flags.join(" ");
        run_with_fd_closed(fd, &args).code(125).stderr_is(&format!(
            "spawnkit: {given}: fd {fd} is not open in spawnkit (it was closed when spawnkit \
             started)\n"
        ));
    }
    // The dry run shows the step.
    let r = run_with_fd_closed(0, &["--dry-run", "--", "true"]);
    r.code(0);
    assert!(r.stdout.contains("\nclose_range fds 0..=0\n"), "{r:#?}");
}
