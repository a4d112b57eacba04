//! Shared helpers for spawnkit's integration tests.
//!
//! The tests look at the child from inside: they run `spawnkit-probe` (built by
//! `cargo build --workspace --bins`), which prints its own state as `key=value` lines, and
//! compare that with what the [`Command`] asked for.
//!
//! Every test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use spawnkit::{Command, Stdio, Strategy};

/// The probe, the process tree and shared-memory fixtures, /proc read independently: one
/// file, kept with the observation tests that use most of it, that the `spawnkit` binary's
/// tests include too.
#[path = "../../../spawnkit-observe/tests/common/fixtures.rs"]
pub mod fixtures;

// Kept here under their old names for every test binary; like the rest of this module, each
// binary uses only some of them (hence the allow, as for dead_code above).
#[allow(unused_imports)]
pub use fixtures::{is_root, probe};

/// Strategies that can do everything (posix-spawn refuses rlimits, credentials, ...).
pub const FULL: [Strategy; 2] = [Strategy::CloneVfork, Strategy::ForkExec];

/// glibc's posix_spawn leaves its internal signals 32 and 33 ignored in the child.
pub const GLIBC_INTERNAL_SIGNALS: u64 = (1 << 31) | (1 << 32);

/// The bit of signal `n` in a /proc/PID/status signal mask.
pub fn sigbit(n: i32) -> u64 {
    1u64 << (n - 1)
}

/// The probe at a path a private /tmp does not hide: a copy under /var/tmp when the build
/// lives under /tmp (a clone in /tmp, as CI may use). Copied by cp(1), so no fd of this
/// (multi-threaded, forking) test process ever holds the file open for writing.
pub fn probe_outside_tmp() -> PathBuf {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        let probe = probe();
        if !probe.starts_with("/tmp") {
            return probe;
        }
        let dir = PathBuf::from(format!("/var/tmp/spawnkit-test-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("create /var/tmp dir");
        let copy = dir.join("spawnkit-probe");
        let ok = std::process::Command::new("cp").arg(&probe).arg(&copy).status();
        assert!(ok.map(|s| s.success()).unwrap_or(false), "cp the probe to {}", copy.display());
        copy
    })
    .clone()
}

/// A command running the probe with `args`, under `strategy`.
pub fn probe_cmd<I, S>(strategy: Strategy, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(probe());
    cmd.args(args).strategy(strategy);
    cmd
}

/// What the probe printed about itself.
#[derive(Debug, Clone)]
pub struct State {
    pub map: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub raw: String,
}

/// One open fd of the probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdInfo {
    pub fd: RawFd,
    pub target: String,
    pub cloexec: bool,
}

impl State {
    pub fn parse(text: &str) -> State {
        let mut map = BTreeMap::new();
        let mut env = BTreeMap::new();
        for line in text.lines() {
            let Some((k, v)) = line.split_once('=') else { continue };
            match k.strip_prefix("env.") {
                Some(name) => env.insert(name.to_string(), v.to_string()),
                None => map.insert(k.to_string(), v.to_string()),
            };
        }
        State { map, env, raw: text.to_string() }
    }

    pub fn get(&self, key: &str) -> &str {
        match self.map.get(key) {
            Some(v) => v,
            None => panic!("probe output has no {key:?}:\n{}", self.raw),
        }
    }

    pub fn int(&self, key: &str) -> i64 {
        self.get(key)
            .parse()
            .unwrap_or_else(|_| panic!("{key} is not a number: {:?}", self.get(key)))
    }

    /// A hex signal mask (sigblk, sigign, sigcgt).
    pub fn hex(&self, key: &str) -> u64 {
        u64::from_str_radix(self.get(key), 16)
            .unwrap_or_else(|_| panic!("{key} is not hex: {:?}", self.get(key)))
    }

    pub fn fds(&self) -> Vec<FdInfo> {
        parse_fds(self.get("fds"))
    }

    pub fn fd_numbers(&self) -> Vec<RawFd> {
        self.fds().iter().map(|f| f.fd).collect()
    }

    pub fn fd(&self, fd: RawFd) -> Option<FdInfo> {
        self.fds().into_iter().find(|f| f.fd == fd)
    }

    pub fn argv(&self) -> Vec<String> {
        self.get("argv").split('\u{1f}').map(str::to_string).collect()
    }

    /// `limit.NAME` as (soft, hard) strings.
    pub fn limit(&self, name: &str) -> (String, String) {
        let v = self.get(&format!("limit.{name}"));
        let (s, h) = v.split_once(':').expect("soft:hard");
        (s.to_string(), h.to_string())
    }
}

/// Parse `N:target[:cloexec]` entries separated by spaces.
pub fn parse_fds(s: &str) -> Vec<FdInfo> {
    s.split_whitespace()
        .map(|item| {
            let (fd, rest) = item.split_once(':').expect("fd:target");
            let (target, cloexec) = match rest.strip_suffix(":cloexec") {
                Some(t) => (t.to_string(), true),
                None => (rest.to_string(), false),
            };
            FdInfo { fd: fd.parse().expect("fd number"), target, cloexec }
        })
        .collect()
}

/// Run `cmd` (stdout captured) to completion, check it exited 0, and parse what it printed.
pub fn run_state(cmd: &mut Command) -> State {
    let what = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("spawn of {what} failed: {e}"));
    assert!(
        out.status.success(),
        "{what} ended with {}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    State::parse(&String::from_utf8(out.stdout).expect("probe output is UTF-8"))
}

/// The probe's state under `strategy`, after `configure` set options on the command.
pub fn probe_state(strategy: Strategy, configure: impl FnOnce(&mut Command)) -> State {
    let mut cmd = probe_cmd(strategy, ["state"]);
    configure(&mut cmd);
    run_state(&mut cmd)
}

/// `cat /proc/self/status` in the child: a C program that installs no signal handlers and
/// does not touch SIGPIPE (the Rust runtime of the probe ignores SIGPIPE at startup, so the
/// probe cannot report whether SIGPIPE was ignored at execve).
pub fn status_via_cat(
    strategy: Strategy,
    configure: impl FnOnce(&mut Command),
) -> BTreeMap<String, String> {
    let mut cmd = Command::new("cat");
    cmd.arg("/proc/self/status").strategy(strategy);
    configure(&mut cmd);
    let out = cmd.output().unwrap_or_else(|e| panic!("cat under {strategy}: {e}"));
    assert!(out.status.success(), "cat under {strategy}: {}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.to_string(), v.trim().to_string())))
        .collect()
}

/// A hex field of a /proc/PID/status map.
pub fn status_hex(status: &BTreeMap<String, String>, key: &str) -> u64 {
    u64::from_str_radix(&status[key], 16).unwrap_or_else(|_| panic!("{key}: {:?}", status[key]))
}

/// A fresh directory under the system temp dir, removed on drop. Its path is canonical.
pub struct TempDir(PathBuf);

static TEMP_COUNTER: AtomicUsize = AtomicUsize::new(0);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let base = std::env::temp_dir().canonicalize().expect("temp dir");
        let dir = base.join(format!("spawnkit-test-{}-{tag}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).expect("create temp dir");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Write a file with the given mode.
    pub fn file(&self, name: &str, contents: &[u8], mode: u32) -> PathBuf {
        let p = self.join(name);
        fs::write(&p, contents).expect("write file");
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).expect("chmod");
        p
    }

    /// A symlink to the probe under `name`.
    pub fn probe_link(&self, name: &str) -> PathBuf {
        let p = self.join(name);
        std::os::unix::fs::symlink(probe(), &p).expect("symlink probe");
        p
    }

    /// A copy of the probe (mode 0755) under `name`, for users that cannot reach target/.
    pub fn probe_copy(&self, name: &str) -> PathBuf {
        let p = self.join(name);
        fs::copy(probe(), &p).expect("copy probe");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// FD_CLOEXEC of an fd of this process (None if it is not open).
pub fn is_cloexec(fd: RawFd) -> Option<bool> {
    // SAFETY: F_GETFD takes an integer fd; -1 if it is not open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    (flags >= 0).then_some(flags & libc::FD_CLOEXEC != 0)
}

/// Set or clear FD_CLOEXEC.
pub fn set_cloexec(fd: RawFd, on: bool) {
    // SAFETY: F_SETFD on an fd with an integer flag.
    let r = unsafe { libc::fcntl(fd, libc::F_SETFD, if on { libc::FD_CLOEXEC } else { 0 }) };
    assert_eq!(r, 0, "fcntl(F_SETFD) on fd {fd}: {}", std::io::Error::last_os_error());
}

/// Whether `fd` is open in this process.
pub fn fd_is_open(fd: RawFd) -> bool {
    is_cloexec(fd).is_some()
}

/// A close-on-exec copy of `fd` numbered `min` or above (F_DUPFD_CLOEXEC).
pub fn dup_at_least(fd: &impl AsRawFd, min: RawFd) -> OwnedFd {
    // SAFETY: F_DUPFD_CLOEXEC on an open fd returns a new fd or -1.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    assert!(new >= 0, "F_DUPFD_CLOEXEC: {}", std::io::Error::last_os_error());
    // SAFETY: `new` was just created and belongs to nobody else.
    unsafe { OwnedFd::from_raw_fd(new) }
}

/// Open a file read-only with FD_CLOEXEC cleared (an fd a careless library would leak).
pub fn open_inheritable(path: &Path) -> File {
    let f = File::open(path).expect("open");
    set_cloexec(f.as_raw_fd(), false);
    f
}

/// What /proc/self/fd/N points to in this process.
pub fn fd_target(fd: RawFd) -> String {
    fs::read_link(format!("/proc/self/fd/{fd}"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|e| panic!("readlink /proc/self/fd/{fd}: {e}"))
}

/// An O_CLOEXEC pipe: (read end, write end).
pub fn pipe() -> (File, File) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just created.
    unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
}

/// The state letter of a process (`R`, `S`, `Z`...) from /proc/PID/stat; None once gone.
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().next()?.chars().next()
}

/// Every child of this process as (pid, state), from a scan of /proc.
pub fn children_of_self() -> Vec<(u32, char)> {
    children_of(std::process::id())
}

/// Every child of process `me` as (pid, state), from a scan of /proc.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn children_of(me: u32) -> Vec<(u32, char)> {
    let mut out = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else { return out };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        // A process that vanishes mid-scan is normal.
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(close) = stat.rfind(')') else { continue };
        let mut fields = stat[close + 1..].split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid: u32 = fields.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        if ppid == me {
            out.push((pid, state));
        }
    }
    out
}

/// Children of this process in state Z.
pub fn zombie_children() -> Vec<u32> {
    children_of_self().into_iter().filter(|&(_, s)| s == 'Z').map(|(p, _)| p).collect()
}

/// Poll `cond` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Serialize the tests of one binary that look at process-wide state (children, fds).
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    let status = fs::read_to_string("/proc/self/status").expect("status");
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim()
        .to_string();
    parse_cpu_list(&list)
}

/// `0-2,5` -> [0, 1, 2, 5].
pub fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

/// Stdio helpers that read better in tests.
pub fn piped() -> Stdio {
    Stdio::Pipe
}

/// Set O_NONBLOCK on an fd of this process.
pub fn set_nonblocking(f: &impl AsRawFd) {
    let fd = f.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on an open fd with integer arguments.
    let r = unsafe {
        libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK)
    };
    assert_eq!(r, 0, "fcntl(F_SETFL) on fd {fd}: {}", std::io::Error::last_os_error());
}

/// The fds open in this process (the directory's own fd left out).
pub fn open_fds() -> Vec<RawFd> {
    let mut fds: Vec<RawFd> = fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd_is_open(fd))
        .collect();
    fds.sort_unstable();
    fds
}

/// `cmd.output()`, retried while execve fails with ETXTBSY. A file this process has just
/// written can be "busy" for a moment: a child that another test thread is forking at the same
/// time holds a copy of the write fd until it execs (the classic fork/exec race, Go #22315).
pub fn output_retrying_etxtbsy(cmd: &mut Command) -> spawnkit::Result<spawnkit::Output> {
    let mut tries = 0;
    loop {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 200 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Whether this is the test binary run again with only the test `name` (then the test runs
/// here: it changes or counts something of the whole process, such as its threads or its
/// fd limit, which sibling tests would disturb); if not, run that and check it passed.
pub fn alone(name: &str) -> bool {
    if std::env::var_os("SK_TEST_ALONE").is_some() {
        return true;
    }
    let me = std::env::current_exe().unwrap();
    let out = std::process::Command::new(me)
        .args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env("SK_TEST_ALONE", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("1 passed"), "the test did not run alone: {text}");
    false
}

/// Lower this process's soft RLIMIT_NOFILE to `n` (tests run [`alone`]).
pub fn set_fd_limit(n: u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write one rlimit struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = n;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
}

/// `n` commands of the probe by `strategy`, the i-th exiting with code i, stdout on
/// /dev/null.
pub fn exit_codes(n: usize, strategy: Strategy) -> Vec<Command> {
    (0..n)
        .map(|i| {
            let mut c = Command::new(probe());
            c.args(["exit", &i.to_string()]).strategy(strategy).stdout(Stdio::Null);
            c
        })
        .collect()
}

/// `rounds` rounds of status requests of `cmds` (from [`exit_codes`]), all of a round in one
/// call: each request answered once, with its own child's exit code; `after` runs after each
/// round (given the client and the round).
pub fn status_rounds(
    client: &mut spawnkit::serve::Client,
    cmds: &[Command],
    rounds: usize,
    mut after: impl FnMut(&mut spawnkit::serve::Client, usize),
) {
    for round in 0..rounds {
        let ids = client.submit_status_many(cmds.iter()).expect("submit");
        let mut got = std::collections::HashMap::new();
        for _ in 0..cmds.len() {
            let (id, st) = client.receive_status().expect("an answer");
            let st = st.unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert!(got.insert(id, st).is_none(), "round {round}: request {id} answered twice");
        }
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(got.get(id), Some(&spawnkit::ExitStatus::Exited(i as i32)), "round {round}");
        }
        after(client, round);
    }
}
