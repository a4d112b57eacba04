//! Fixtures shared by the tests of spawnkit-observe, spawnkit and the `spawnkit` binary (the
//! last two include this file with `#[path]`): the `spawnkit-probe` helper, the process tree
//! and the shared memory fixture it makes, and /proc as read here, independently of spawnkit.
//!
//! Only std and libc, so that every test crate compiles it as it is.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Path of the `spawnkit-probe` helper, next to the test executable's `deps/` directory.
pub fn probe() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/spawnkit-probe
    let dir = exe.parent().and_then(Path::parent).expect("test executable has no grandparent");
    let probe = dir.join("spawnkit-probe");
    assert!(
        probe.is_file(),
        "the test helper {} is missing: run `cargo build --workspace --bins` before `cargo test`",
        probe.display()
    );
    probe
}

/// A `spawnkit-probe` that said `ready WORD...` on its stdout and now waits for EOF on its
/// stdin: dropping it closes that stdin and waits for it to exit.
pub struct Ready {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The words after `ready`.
    pub words: Vec<String>,
}

impl Ready {
    /// `spawnkit-probe ARGS...`, once it said `ready` and `count` words more.
    pub fn start(args: &[&str], count: usize) -> Ready {
        Ready::spawn(Command::new(probe()).args(args), count)
    }

    /// `cmd` (the probe, with its arguments), once it said `ready` and `count` words more.
    pub fn spawn(cmd: &mut Command, count: usize) -> Ready {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let stdin = child.stdin.take();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("ready line");
        let words: Vec<String> = match line.trim_end().strip_prefix("ready ") {
            Some(rest) => rest.split(' ').map(str::to_string).collect(),
            None => panic!("{cmd:?} said {line:?}"),
        };
        assert_eq!(words.len(), count, "{cmd:?} said {line:?}");
        Ready { child, stdin, words }
    }

    /// Word `i` after `ready`, parsed.
    pub fn word<T: std::str::FromStr>(&self, i: usize) -> T {
        let word = &self.words[i];
        word.parse().unwrap_or_else(|_| panic!("ready word {i} is {word:?}"))
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Short-lived processes (`spawnkit-probe exit 0`), started and reaped by a thread of their
/// own a few at a time, so that some exit while a listing reads them. Dropping it stops the
/// thread and waits for it.
pub struct Churn {
    stop: Arc<AtomicBool>,
    spawned: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Churn {
    pub fn start() -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let spawned = Arc::new(AtomicUsize::new(0));
        let (s, n) = (stop.clone(), spawned.clone());
        let thread = std::thread::spawn(move || {
            let probe = probe();
            while !s.load(Ordering::Relaxed) {
                let kids: Vec<Child> = (0..4)
                    .filter_map(|_| Command::new(&probe).args(["exit", "0"]).spawn().ok())
                    .collect();
                n.fetch_add(kids.len(), Ordering::Relaxed);
                for mut k in kids {
                    let _ = k.wait();
                }
            }
        });
        Churn { stop, spawned, thread: Some(thread) }
    }

    /// How many processes it has started so far.
    pub fn spawned(&self) -> usize {
        self.spawned.load(Ordering::Relaxed)
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A process tree from `spawnkit-probe tree DEPTH WIDTH COMM`: every node sleeps, named COMM;
/// it dies (root first, the rest by PDEATHSIG) when dropped.
pub struct Tree {
    /// The root, which prints the pids.
    _root: Ready,
    /// Every pid, root first, then level by level.
    pub pids: Vec<i32>,
    /// The probe's argv, which every node has (they fork without exec).
    pub argv: Vec<Vec<u8>>,
}

impl Tree {
    pub fn start(depth: u32, width: u32, comm: &str) -> Tree {
        Tree::start_as(depth, width, comm, None)
    }

    /// The tree, run as user `uid` when given.
    pub fn start_as(depth: u32, width: u32, comm: &str, uid: Option<u32>) -> Tree {
        use std::os::unix::process::CommandExt;
        let probe = probe();
        let args = ["tree".to_string(), depth.to_string(), width.to_string(), comm.to_string()];
        let mut cmd = Command::new(&probe);
        if let Some(uid) = uid {
            cmd.uid(uid);
        }
        let expected: u32 = (0..=depth).map(|d| width.pow(d)).sum();
        let root = Ready::spawn(cmd.args(&args), expected as usize);
        let pids: Vec<i32> = (0..root.words.len()).map(|i| root.word(i)).collect();
        // A node reports itself just before pause(2), and the root prints `ready` just before
        // it reads its stdin: each may still be running (R) for a moment. The tests expect
        // the tree asleep (S), so wait for that.
        for &pid in &pids {
            wait_asleep(pid);
        }
        let mut argv = vec![probe.as_os_str().as_bytes().to_vec()];
        argv.extend(args.iter().map(|a| a.as_bytes().to_vec()));
        Tree { _root: root, pids, argv }
    }

    pub fn root(&self) -> i32 {
        self.pids[0]
    }

    pub fn sorted_pids(&self) -> Vec<i32> {
        let mut v = self.pids.clone();
        v.sort_unstable();
        v
    }

    /// The pids as one `-p` argument: `1,2,3`.
    pub fn list(&self) -> String {
        self.pids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
    }

    /// The raw /proc/PID/cmdline every node has.
    pub fn cmdline(&self) -> Vec<u8> {
        self.argv.iter().flat_map(|a| a.iter().copied().chain([0])).collect()
    }
}

/// Wait until `pid` sleeps (state S in /proc/PID/stat); fail after 10 s.
fn wait_asleep(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = stat_fields(pid)[0].clone();
        if state == "S" {
            return;
        }
        assert!(Instant::now() < deadline, "tree node {pid} is still in state {state}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A running `spawnkit-probe shm-fixture TOTAL A B [PARENT]`: a parent maps TOTAL MiB
/// `MAP_SHARED | MAP_ANONYMOUS`, child A writes the first A MiB and exits, child B the first
/// B MiB and exits; the parent optionally reads PARENT MiB itself, prints
/// `ready PID START END` and waits for EOF on stdin. Dropping it closes that stdin and waits.
pub struct ShmFixture {
    _probe: Ready,
    /// The parent, the region's one remaining mapper.
    pub pid: i32,
    /// Where the region starts and ends in the parent.
    pub start: u64,
    pub end: u64,
}

impl ShmFixture {
    /// The fixture with these arguments (`TOTAL A B [PARENT]`, in MiB).
    pub fn start(args: &[&str]) -> ShmFixture {
        let mut all = vec!["shm-fixture"];
        all.extend_from_slice(args);
        let probe = Ready::start(&all, 3);
        let hex = |i: usize| u64::from_str_radix(&probe.words[i], 16).unwrap();
        ShmFixture { pid: probe.word(0), start: hex(1), end: hex(2), _probe: probe }
    }

    /// The region's entry in /proc/PID/map_files, as stat(2) sees the object behind it.
    pub fn stat_object(&self) -> fs::Metadata {
        fs::metadata(format!("/proc/{}/map_files/{:x}-{:x}", self.pid, self.start, self.end))
            .expect("stat map_files (needs root)")
    }
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// True (after saying so) when `test` must skip its region checks: reading
/// /proc/PID/map_files needs root.
pub fn skip_unless_root(test: &str) -> bool {
    if is_root() {
        return false;
    }
    println!("skipping {test}: reading /proc/PID/map_files needs root (CAP_SYS_ADMIN)");
    true
}

/// A pid that existed a moment ago and does not now.
pub fn vanished_pid() -> i32 {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id() as i32;
    child.wait().expect("wait");
    assert!(fs::metadata(format!("/proc/{pid}")).is_err());
    pid
}

/// /proc/PID/stat as read here: the fields after the comm (field 3 is index 0).
pub fn stat_fields(pid: i32) -> Vec<String> {
    let text = fs::read(format!("/proc/{pid}/stat")).unwrap();
    let close = text.iter().rposition(|&b| b == b')').unwrap();
    String::from_utf8(text[close + 2..].to_vec())
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The value of a `Name:\tvalue` line of /proc/PID/status (`key` is `Name:`).
pub fn status(pid: i32, key: &str) -> String {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

/// `Key: N kB` of /proc/PID/smaps_rollup, in bytes.
pub fn rollup(pid: i32, key: &str) -> u64 {
    let text = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).expect("smaps_rollup");
    let line = text.lines().find(|l| l.split(':').next() == Some(key)).expect(key);
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// sysconf(_SC_PAGESIZE): the unit of the rss field of /proc/PID/stat.
pub fn page_size() -> u64 {
    // SAFETY: sysconf takes an integer and touches no memory of ours.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as u64 }
}
