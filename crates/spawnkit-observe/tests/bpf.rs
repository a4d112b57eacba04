//! The BPF task-iterator backend through the public API ([`Backend::Bpf`]), checked against
//! the procfs backend and against /proc read here directly: a known tree with odd names, other
//! states (stopped, zombie), another uid, a multi-threaded process, and one table read a
//! hundred times while processes come and go.
//!
//! Where BPF cannot load (not root, a kernel without BTF or task iterators, a build without
//! clang) the tests print why and pass, unless `SPAWNKIT_REQUIRE_BPF=1` (set by scripts/test,
//! which installs clang and runs as root): then they fail.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fixtures::{page_size, Churn, Tree};
use spawnkit_observe::{self as observe, Backend, Fields, Process, ProcessTable, State};

/// The BPF table, or `None` (after saying why) where the tests may skip.
fn bpf_table() -> Option<ProcessTable> {
    let err = match ProcessTable::new(Backend::Bpf) {
        Ok(table) => {
            assert_eq!(table.backend(), Backend::Bpf);
            assert_eq!(table.fallback_reason(), None);
            return Some(table);
        }
        Err(e) => e,
    };
    if std::env::var_os("SPAWNKIT_REQUIRE_BPF").is_some_and(|v| v == "1") {
        panic!("SPAWNKIT_REQUIRE_BPF=1 but the BPF backend does not load: {err}");
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let why = err.to_string();
    if root && !why.contains("no BPF program") {
        panic!("root, yet the BPF backend does not load: {why}");
    }
    eprintln!("skipped: the BPF backend is unavailable here: {why}");
    None
}

/// /proc/PID/stat as read here: (comm, the fields after it: field 3 is index 0).
fn stat(pid: i32) -> (Vec<u8>, Vec<String>) {
    let text = std::fs::read(format!("/proc/{pid}/stat")).unwrap();
    let open = text.iter().position(|&b| b == b'(').unwrap();
    let close = text.iter().rposition(|&b| b == b')').unwrap();
    let rest = String::from_utf8(text[close + 2..].to_vec()).unwrap();
    (text[open + 1..close].to_vec(), rest.split_whitespace().map(str::to_string).collect())
}

/// The effective uid in /proc/PID/status.
fn euid(pid: i32) -> u32 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uids = text.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap();
    uids.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn by_pid(procs: &[Process]) -> BTreeMap<i32, &Process> {
    procs.iter().map(|p| (p.pid, p)).collect()
}

/// The record of `pid` agrees with /proc/PID/stat and /proc/PID/status read now.
fn assert_as_proc_shows(p: &Process, pid: i32) {
    let (comm, f) = stat(pid);
    assert_eq!(p.pid, pid);
    assert_eq!(p.comm.as_bytes(), &comm[..], "comm of {pid}");
    assert_eq!(p.state.letter().to_string(), f[0], "state of {pid}");
    assert_eq!(p.ppid, f[1].parse::<i32>().unwrap(), "ppid of {pid}");
    assert_eq!(p.threads, f[17].parse::<u32>().unwrap(), "threads of {pid}");
    assert_eq!(p.start_ticks, f[19].parse::<u64>().unwrap(), "start of {pid}");
    assert_eq!(p.rss_bytes, f[21].parse::<u64>().unwrap() * page_size(), "rss of {pid}");
    assert_eq!(p.uid, Some(euid(pid)), "euid of {pid}");
    assert_eq!(p.cmdline, None, "cmdline of {pid} was not asked for");
}

/// Wait (bounded) until /proc/PID/stat shows state `letter`.
fn await_state(pid: i32, letter: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while stat(pid).1[0] != letter {
        assert!(Instant::now() < deadline, "{pid} never reached state {letter}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

const ODD: &str = "x) S 1 (y\n) z";
const LONG: &str = "0123456789abcdefXYZ";
const UID: Fields = Fields { uid: true, cmdline: false };

#[test]
fn the_tree_as_procfs_and_proc_show_it() {
    let Some(mut bpf) = bpf_table() else { return };
    let odd = Tree::start(2, 2, ODD);
    let long = Tree::start(1, 3, LONG);
    // A node reports itself just before it goes to sleep in pause(): wait for that sleep, after
    // which nothing about these processes changes.
    for &pid in odd.pids.iter().chain(&long.pids) {
        await_state(pid, "S");
    }
    let listed = bpf.list(UID).unwrap();
    let procfs = ProcessTable::new(Backend::Procfs).unwrap().list(UID).unwrap();
    let (seen, other) = (by_pid(&listed), by_pid(&procfs));
    assert_eq!(seen.len(), listed.len(), "a pid listed twice");
    for (tree, comm) in [(&odd, ODD.as_bytes()), (&long, &LONG.as_bytes()[..15])] {
        for &pid in &tree.pids {
            let p = seen.get(&pid).unwrap_or_else(|| panic!("fixture pid {pid} not listed"));
            // Idle processes: nothing changes between the two listings, rss included.
            assert_eq!(Some(p), other.get(&pid), "the BPF and procfs records of {pid}");
            assert_as_proc_shows(p, pid);
            assert_eq!(p.comm.as_bytes(), comm);
            assert_eq!((p.state, p.threads), (State::Sleeping, 1));
            assert!(p.rss_bytes > 0, "rss of {pid}");
        }
        assert_eq!(seen[&tree.pids[0]].ppid, std::process::id() as i32);
        for &pid in &tree.pids[1..] {
            assert!(tree.pids.contains(&seen[&pid].ppid), "parent of {pid}");
        }
    }
    // This process itself, kernel threads (no mm: rss 0; ppid of kthreadd is 0).
    assert!(seen.contains_key(&(std::process::id() as i32)));
    let kthreadd = seen.get(&2).expect("kthreadd (pid 2) listed");
    assert_eq!((kthreadd.ppid, kthreadd.rss_bytes), (0, 0));
}

#[test]
fn stopped_zombie_and_another_uid() {
    let Some(mut bpf) = bpf_table() else { return };
    // A sleeper as nobody (when this test may switch uids), stopped.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = spawnkit::Command::new(common::probe());
    cmd.args(["sleep", "600"]);
    if root {
        cmd.uid(65534).gid(65534);
    }
    let mut nobody = cmd.spawn().unwrap();
    let stopped = nobody.id() as i32;
    nobody.send_signal(spawnkit::Signal::new(libc::SIGSTOP).unwrap()).unwrap();
    await_state(stopped, "T");
    // An exited child not yet waited for.
    let mut zombie = Command::new(common::probe()).args(["exit", "0"]).spawn().unwrap();
    let dead = zombie.id() as i32;
    await_state(dead, "Z");

    let listed = bpf.list(UID).unwrap();
    let seen = by_pid(&listed);
    let s = seen.get(&stopped).expect("the stopped process is listed");
    assert_eq!(s.state, State::Stopped);
    if root {
        assert_eq!(s.uid, Some(65534));
    }
    assert_as_proc_shows(s, stopped);
    let z = seen.get(&dead).expect("the zombie is listed");
    assert_eq!((z.state, z.rss_bytes, z.ppid), (State::Zombie, 0, std::process::id() as i32));
    assert_as_proc_shows(z, dead);

    nobody.kill().unwrap();
    nobody.wait().unwrap();
    zombie.wait().unwrap();
}

/// Not a test: the body of the multi-threaded helper process of the next test, which runs
/// this test binary again with `--ignored --exact` and this name. It starts 4 threads, says
/// `ready`, and waits for EOF on stdin.
#[test]
#[ignore]
fn helper_process_with_threads() {
    if std::env::var("SPAWNKIT_TEST_HELPER").as_deref() != Ok("threads") {
        return;
    }
    for _ in 0..4 {
        std::thread::spawn(|| loop {
            std::thread::park();
        });
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::process::exit(0);
}

#[test]
fn a_multithreaded_process_is_one_record_with_its_thread_count() {
    let Some(mut bpf) = bpf_table() else { return };
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "helper_process_with_threads", "--nocapture"])
        .env("SPAWNKIT_TEST_HELPER", "threads")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(helper.stdout.take().unwrap()).lines();
    while lines.next().expect("the helper said nothing").unwrap() != "ready" {}
    let pid = helper.id() as i32;
    let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    assert!(tids.len() >= 5, "the helper runs {} threads", tids.len());
    // Threads that have not run yet still fault in their stacks: wait until all sleep.
    let deadline = Instant::now() + Duration::from_secs(30);
    for &tid in &tids {
        let path = format!("/proc/{pid}/task/{tid}/stat");
        while !std::fs::read_to_string(&path).unwrap().rsplit_once(") ").unwrap().1.starts_with('S')
        {
            assert!(Instant::now() < deadline, "thread {tid} never slept");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    let listed = bpf.list(UID).unwrap();
    let records: Vec<&Process> = listed.iter().filter(|p| tids.contains(&p.pid)).collect();
    assert_eq!(records.len(), 1, "one record for the thread group: {records:?}");
    assert_eq!(records[0].pid, pid, "the record is the leader's");
    assert_eq!(records[0].threads as usize, tids.len());
    assert_as_proc_shows(records[0], pid);

    drop(helper.stdin.take());
    helper.wait().unwrap();
}

#[test]
fn one_table_read_a_hundred_times_sees_processes_come_and_go() {
    let Some(mut bpf) = bpf_table() else { return };
    let me = std::process::id() as i32;
    let mut procs = Vec::new();
    let mut child: Option<spawnkit::Child> = None;
    let mut gone: Option<i32> = None;
    for round in 0..100 {
        bpf.list_into(UID, &mut procs).unwrap();
        assert!(procs.windows(2).all(|w| w[0].pid < w[1].pid), "increasing pids, none twice");
        assert!(procs.iter().any(|p| p.pid == me), "round {round}: this process is listed");
        if let Some(c) = &child {
            let pid = c.id() as i32;
            let p = procs.iter().find(|p| p.pid == pid);
            assert!(p.is_some(), "round {round}: the new child {pid} is listed");
        }
        if let Some(pid) = gone {
            assert!(procs.iter().all(|p| p.pid != pid), "round {round}: reaped {pid} is listed");
        }
        match round {
            30 => {
                let c = spawnkit::Command::new(common::probe()).args(["sleep", "600"]).spawn();
                child = Some(c.unwrap());
            }
            60 => {
                let mut c = child.take().unwrap();
                c.kill().unwrap();
                c.wait().unwrap();
                gone = Some(c.id() as i32);
            }
            _ => {}
        }
    }
    assert!(gone.is_some());
}

#[test]
fn processes_gone_before_their_command_line_is_read_are_skipped() {
    let Some(mut bpf) = bpf_table() else { return };
    let churn = Churn::start();
    let all = Fields { uid: true, cmdline: true };
    let mut procs = Vec::new();
    for round in 0..50 {
        bpf.list_into(all, &mut procs).unwrap_or_else(|e| panic!("round {round}: {e}"));
        let missing: Vec<i32> =
            procs.iter().filter(|p| p.cmdline.is_none()).map(|p| p.pid).collect();
        assert!(missing.is_empty(), "round {round}: listed without a command line: {missing:?}");
    }
    assert!(churn.spawned() > 0, "the churn thread could not spawn");
}

/// Not a test: the body of the helper process of the next test, run in a new pid namespace.
/// Prints what the BPF and Auto backends do there.
#[test]
#[ignore]
fn helper_tables_in_a_pid_namespace() {
    if std::env::var("SPAWNKIT_TEST_HELPER").as_deref() != Ok("pidns") {
        return;
    }
    let before = open_fds();
    match ProcessTable::new(Backend::Bpf) {
        Ok(_) => println!("bpf=loaded"),
        Err(e) => println!("bpf={e}"),
    }
    // Refused after the program was loaded, attached and read: nothing of that stays open.
    println!("fds={}", if open_fds() == before { "same" } else { "leaked" });
    let auto = ProcessTable::new(Backend::Auto).unwrap();
    println!("auto={:?} {}", auto.backend(), auto.fallback_reason().unwrap_or("-"));
}

/// This process's open fds and what they are.
fn open_fds() -> Vec<String> {
    let mut fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            Some(format!("{} -> {}", e.file_name().to_string_lossy(), target.display()))
        })
        .collect();
    fds.sort();
    fds
}

/// Not a test: the body of the helper process of the next test, alone in its process (the
/// fds of other tests' tables do not come and go under it).
#[test]
#[ignore]
fn helper_tables_opened_and_dropped() {
    if std::env::var("SPAWNKIT_TEST_HELPER").as_deref() != Ok("fds") {
        return;
    }
    let before = open_fds();
    let inherited: Vec<&str> = before.iter().filter_map(|l| l.split(' ').next()).collect();
    for _ in 0..10 {
        let mut table = ProcessTable::new(Backend::Bpf).unwrap();
        table.list(UID).unwrap();
        // Everything the table holds is closed on exec.
        for fd in std::fs::read_dir("/proc/self/fd").unwrap() {
            let fd = fd.unwrap().file_name();
            if inherited.contains(&&*fd.to_string_lossy()) {
                continue;
            }
            let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.display()))
            else {
                continue; // the read_dir's own fd, closed by now
            };
            let flags = info.lines().find_map(|l| l.strip_prefix("flags:")).unwrap().trim();
            let flags = u32::from_str_radix(flags, 8).unwrap();
            let cloexec = flags & libc::O_CLOEXEC as u32 != 0;
            println!("fd {} cloexec={cloexec}", fd.display());
        }
    }
    println!("fds={}", if open_fds() == before { "same" } else { "leaked" });
}

#[test]
fn a_table_leaves_no_fd_behind_and_none_to_children() {
    let Some(_) = bpf_table() else { return };
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "helper_tables_opened_and_dropped", "--nocapture"])
        .env("SPAWNKIT_TEST_HELPER", "fds")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // The fds that were not there before the first table: at least the table's link.
    let fds: Vec<&str> = text.lines().filter(|l| l.starts_with("fd ")).collect();
    assert!(fds.len() >= 10, "{text}");
    for l in fds {
        assert!(l.ends_with("cloexec=true"), "{l}");
    }
    assert!(text.lines().any(|l| l == "fds=same"), "{text}");
}

#[test]
fn refused_outside_the_initial_pid_namespace() {
    let Some(_) = bpf_table() else { return };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: a new pid namespace needs root");
        return;
    }
    let out = spawnkit::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "helper_tables_in_a_pid_namespace", "--nocapture"])
        .env("SPAWNKIT_TEST_HELPER", "pidns")
        .unshare(spawnkit::Namespaces::PID)
        // Root with its capabilities (a fenced child loses them): only the namespace refuses.
        .keep_capabilities(true)
        .stdout(spawnkit::Stdio::Pipe)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |key: &str| {
        let found = text.lines().find_map(|l| l.strip_prefix(key));
        found.unwrap_or_else(|| panic!("no {key} line in {text:?}")).to_string()
    };
    let bpf = line("bpf=");
    assert!(bpf.contains("not in the initial pid namespace"), "{bpf}");
    assert_eq!(line("fds="), "same");
    let auto = line("auto=");
    assert!(auto.starts_with("Procfs "), "{auto}");
    assert!(auto.contains("not in the initial pid namespace"), "{auto}");
}

/// This process's start time in clock ticks as each backend and /proc/self/stat give it:
/// `bpf=.. procfs=.. proc=..`.
fn own_start_times() -> String {
    let me = std::process::id() as i32;
    let mut bpf = ProcessTable::new(Backend::Bpf).unwrap();
    let mut procfs = ProcessTable::new(Backend::Procfs).unwrap();
    let start = |t: &mut ProcessTable| t.list_pids(&[me], UID).unwrap()[0].start_ticks;
    let (b, p) = (start(&mut bpf), start(&mut procfs));
    format!("bpf={b} procfs={p} proc={}", stat(me).1[19])
}

/// Before main, while the process has one thread, a `timens-outside...` helper moves its
/// children (not itself) into a new time namespace whose boottime is
/// `SPAWNKIT_TIMENS_BOOTTIME` seconds (default 1000) ahead: a test runs in a thread of its
/// own, and /proc/PID/timens_offsets is the main thread's.
#[used]
#[link_section = ".init_array"]
static SETUP_TIME_NAMESPACE: extern "C" fn() = setup_time_namespace;

extern "C" fn setup_time_namespace() {
    let helper = std::env::var("SPAWNKIT_TEST_HELPER").unwrap_or_default();
    if helper.starts_with("timens-outside") {
        let secs = std::env::var("SPAWNKIT_TIMENS_BOOTTIME").unwrap_or_else(|_| "1000".into());
        // SAFETY: unshare takes flags and touches no memory of ours; CLONE_NEWTIME only
        // changes the namespace of the children to come.
        let unshared = unsafe { libc::unshare(libc::CLONE_NEWTIME) } == 0;
        let offsets = format!("boottime {secs} 0\n");
        if !unshared || std::fs::write("/proc/self/timens_offsets", offsets).is_err() {
            println!("no time namespace: {}", std::io::Error::last_os_error());
        }
    }
}

/// Not a test: the body of the helper processes of the next test. `outside` (whose children
/// start in a time namespace 1000 s ahead; it is not in it) prints its own start times, then
/// runs `inside` (a child, so in that namespace), which prints its own.
#[test]
#[ignore]
fn helper_start_times_and_time_namespaces() {
    match std::env::var("SPAWNKIT_TEST_HELPER").as_deref() {
        Ok("timens-outside") => {
            println!("outside {}", own_start_times());
            let inside = Command::new(std::env::current_exe().unwrap())
                .args(["--ignored", "--exact", "helper_start_times_and_time_namespaces"])
                .arg("--nocapture")
                .env("SPAWNKIT_TEST_HELPER", "timens-inside")
                .output()
                .unwrap();
            std::io::stdout().write_all(&inside.stdout).unwrap();
        }
        Ok("timens-inside") => println!("inside {}", own_start_times()),
        _ => {}
    }
}

#[test]
fn start_times_as_proc_shows_them_in_and_out_of_a_time_namespace() {
    let Some(_) = bpf_table() else { return };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/proc/self/ns/time").exists() {
        eprintln!("skipped: a new time namespace needs root and a kernel with them");
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "helper_start_times_and_time_namespaces", "--nocapture"])
        .env("SPAWNKIT_TEST_HELPER", "timens-outside")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let ticks = |key: &str| -> Vec<u64> {
        let line = text.lines().find_map(|l| l.strip_prefix(key));
        let line = line.unwrap_or_else(|| panic!("no {key:?} line in {text:?}"));
        let values = line.split(' ').map(|kv| kv.split_once('=').unwrap().1.parse().unwrap());
        let values: Vec<u64> = values.collect();
        assert!(values.iter().all(|v| *v == values[0]), "{key}{line}");
        values
    };
    let (outside, inside) = (ticks("outside "), ticks("inside "));
    // The namespace took effect for the child: its start is 1000 s (100 ticks each) later.
    assert!(inside[0] >= outside[0] + 1000 * 100, "{text}");
}

/// Not a test: the body of the helper processes of the next test. `outside` runs `inside`,
/// a child in a time namespace whose boottime is behind, which lists every process with both
/// backends and prints `agree N zero PID,PID,...` (the processes whose start both give as 0)
/// or the first disagreement.
#[test]
#[ignore]
fn helper_backends_in_a_time_namespace_behind() {
    match std::env::var("SPAWNKIT_TEST_HELPER").as_deref() {
        Ok("timens-outside-behind") => {
            let inside = Command::new(std::env::current_exe().unwrap())
                .args(["--ignored", "--exact", "helper_backends_in_a_time_namespace_behind"])
                .arg("--nocapture")
                .env("SPAWNKIT_TEST_HELPER", "timens-inside-behind")
                .output()
                .unwrap();
            std::io::stdout().write_all(&inside.stdout).unwrap();
        }
        Ok("timens-inside-behind") => {
            let bpf = ProcessTable::new(Backend::Bpf).unwrap().list(UID).unwrap();
            let procfs = ProcessTable::new(Backend::Procfs).unwrap().list(UID).unwrap();
            // Now, in this namespace's clock ticks (CLOCK_BOOTTIME is shifted for it).
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: clock_gettime writes one timespec, which `ts` is.
            assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) }, 0);
            let now = ts.tv_sec as u64 * 100 + ts.tv_nsec as u64 / 10_000_000;
            let procfs = by_pid(&procfs);
            let mut agree = 0;
            let mut zero = Vec::new();
            for p in &bpf {
                let Some(q) = procfs.get(&p.pid) else { continue };
                if p.start_ticks != q.start_ticks || q.start_ticks > now + 100 {
                    println!(
                        "differ pid {} bpf {} procfs {} now {now}",
                        p.pid, p.start_ticks, q.start_ticks
                    );
                    return;
                }
                agree += 1;
                if q.start_ticks == 0 {
                    zero.push(q.pid.to_string());
                }
            }
            println!("agree {agree} zero {}", zero.join(","));
        }
        _ => {}
    }
}

#[test]
fn backends_agree_on_start_times_in_a_time_namespace_behind() {
    let Some(_) = bpf_table() else { return };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/proc/self/ns/time").exists() {
        eprintln!("skipped: a new time namespace needs root and a kernel with them");
        return;
    }
    // As far back as the kernel allows (the namespace's clock may not go below 0): kernel
    // threads started in the first seconds after boot then started before its boot, and
    // /proc's start times for them wrap around.
    let uptime = observe::uptime() as u64;
    if uptime < 10 {
        eprintln!("skipped: booted {uptime} s ago, too recently to set a clock back");
        return;
    }
    let behind = uptime - 5;
    // Processes that started after boot but within the `behind` seconds: their starts wrap
    // in /proc inside the namespace. Without one, nothing would test the clamp.
    let outside = ProcessTable::new(Backend::Procfs).unwrap().list(UID).unwrap();
    let early: Vec<i32> = outside
        .iter()
        .filter(|p| p.start_ticks > 0 && p.start_ticks + 200 < behind * 100)
        .map(|p| p.pid)
        .collect();
    if early.is_empty() {
        eprintln!("skipped: no process here started in the first {behind} s after boot");
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "helper_backends_in_a_time_namespace_behind"])
        .arg("--nocapture")
        .env("SPAWNKIT_TEST_HELPER", "timens-outside-behind")
        .env("SPAWNKIT_TIMENS_BOOTTIME", format!("-{behind}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line =
        text.lines().find_map(|l| l.strip_prefix("agree ")).unwrap_or_else(|| panic!("{text}"));
    let (agree, zero) = line.split_once(" zero ").unwrap_or((line, ""));
    assert!(agree.parse::<usize>().unwrap() > 10, "{text}");
    let zero: Vec<i32> = zero.split(',').filter_map(|p| p.parse().ok()).collect();
    assert!(early.iter().any(|p| zero.contains(p)), "none of {early:?} clamped: {text}");
}

// ---- The table re-checks its reader on every listing ----
//
// The helpers below change the credentials, the mount namespace or the user namespace of a
// process that holds a loaded table. They run before main (`.init_array`), while the process
// has one thread: a new user namespace is only for a single-threaded process, and this way
// the mount namespace and the credentials are the whole process's, not one thread's.

#[used]
#[link_section = ".init_array"]
static READER_HELPERS: extern "C" fn() = reader_helpers;

extern "C" fn reader_helpers() {
    let helper = std::env::var("SPAWNKIT_TEST_HELPER").unwrap_or_default();
    let run = match helper.as_str() {
        "reader-nobody" => reader_becomes_nobody_under_hidepid,
        "reader-no-ptrace" => reader_loses_cap_sys_ptrace_under_hidepid,
        "reader-userns" => reader_enters_a_user_namespace,
        _ => return,
    };
    run();
    let _ = std::io::stdout().flush();
    std::process::exit(0);
}

const ALL: Fields = Fields { uid: true, cmdline: true };

/// `BACKEND pid:uid,pid:uid,...` of a listing.
fn listed(table: &ProcessTable, procs: &[Process]) -> String {
    let each: Vec<String> =
        procs.iter().map(|p| format!("{}:{}", p.pid, p.uid.map_or(-1, i64::from))).collect();
    format!("{:?} {}", table.backend(), each.join(","))
}

/// The pids /proc shows this process now (its entries), read here directly.
fn proc_pids() -> String {
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// A mount namespace of this process's own, its mounts private (nothing propagates back to
/// the host's), with a new procfs on /proc mounted `hidepid=invisible`.
fn hide_processes() -> Result<(), String> {
    let fail = |what: &str| Err(format!("{what}: {}", std::io::Error::last_os_error()));
    // SAFETY: unshare takes flags only; this process has one thread (before main).
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return fail("unshare(CLONE_NEWNS)");
    }
    let none = std::ptr::null::<libc::c_char>();
    // SAFETY: the strings are NUL-terminated literals; mount reads them only.
    if unsafe {
        libc::mount(none, c"/".as_ptr(), none, libc::MS_REC | libc::MS_PRIVATE, none.cast())
    } != 0
    {
        return fail("mount --make-rprivate /");
    }
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: as above.
    if unsafe {
        libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            flags,
            c"hidepid=invisible".as_ptr().cast(),
        )
    } != 0
    {
        return fail("mount proc hidepid=invisible");
    }
    Ok(())
}

/// The effective capability set of this process (capget/capset, version 3) with `cap`
/// raised or lowered; the permitted set is left as it is.
fn set_effective_cap(cap: u32, on: bool) {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header { version: 0x2008_0522, pid: 0 };
    let mut data = [Data::default(); 2];
    // SAFETY: capget version 3 writes two Data structs, which `data` is.
    assert_eq!(unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) }, 0);
    let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
    if on {
        data[word].effective |= bit;
    } else {
        data[word].effective &= !bit;
    }
    // SAFETY: capset version 3 reads the header and two Data structs.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    assert_eq!(ret, 0, "capset: {}", std::io::Error::last_os_error());
}

/// As root: a table (Auto) lists with command lines (so its /proc walker is open on the
/// host's /proc); then this process hides processes in a /proc of its own and becomes
/// nobody, and lists again with the same table.
fn reader_becomes_nobody_under_hidepid() {
    let mut table = ProcessTable::new(Backend::Auto).unwrap();
    let procs = table.list(ALL).unwrap();
    println!("before {}", listed(&table, &procs));
    if let Err(e) = hide_processes() {
        println!("error {e}");
        return;
    }
    // SAFETY: plain credential calls (glibc's, applied to every thread); the groups list is
    // empty.
    let dropped = unsafe {
        libc::setgroups(0, std::ptr::null()) == 0
            && libc::setresgid(65534, 65534, 65534) == 0
            && libc::setresuid(65534, 65534, 65534) == 0
    };
    assert!(dropped, "drop to nobody: {}", std::io::Error::last_os_error());
    let procs = table.list(ALL).unwrap();
    println!("after {}", listed(&table, &procs));
    println!("reason {}", table.fallback_reason().unwrap_or("-"));
    println!("proc {}", proc_pids());
}

/// As root, with a sleeper as nobody running (its pid in SPAWNKIT_TEST_PID): a table (Auto)
/// lists; this process hides processes in a /proc of its own, lists; lowers CAP_SYS_PTRACE
/// (keeping CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON), lists; leaves group 0 (gid and groups
/// 65534, uid still 0), lists; raises CAP_SYS_PTRACE again, lists. Each phase prints
/// `NAME BACKEND sleeper=LISTED REASON`.
fn reader_loses_cap_sys_ptrace_under_hidepid() {
    const CAP_SYS_PTRACE: u32 = 19;
    let mut table = ProcessTable::new(Backend::Auto).unwrap();
    let sleeper: i32 = std::env::var("SPAWNKIT_TEST_PID").unwrap().parse().unwrap();
    let phase = |name: &str, table: &mut ProcessTable| {
        let procs = table.list(UID).unwrap();
        let seen = procs.iter().any(|p| p.pid == sleeper);
        let why = table.fallback_reason().unwrap_or("-").to_string();
        println!("{name} {:?} sleeper={seen} {why}", table.backend());
    };
    phase("root", &mut table);
    if let Err(e) = hide_processes() {
        println!("error {e}");
        return;
    }
    phase("hidepid", &mut table);
    set_effective_cap(CAP_SYS_PTRACE, false);
    phase("group-0", &mut table);
    let groups = [65534];
    // SAFETY: plain credential calls (glibc's, applied to every thread); `groups` outlives
    // the call.
    let left = unsafe {
        libc::setgroups(1, groups.as_ptr()) == 0 && libc::setresgid(65534, 65534, 65534) == 0
    };
    assert!(left, "leave group 0: {}", std::io::Error::last_os_error());
    phase("no-ptrace", &mut table);
    set_effective_cap(CAP_SYS_PTRACE, true);
    phase("ptrace-again", &mut table);
}

/// As root: a table (Auto) lists; this process enters a new user namespace (where it holds
/// every capability, but none in the initial one; no uid map, so every uid reads as the
/// overflow uid), lists again with the same table. Prints the uid of its parent (the test,
/// root) as each listing and as /proc/PPID/status give it.
fn reader_enters_a_user_namespace() {
    let parent = std::os::unix::process::parent_id() as i32;
    let mut table = ProcessTable::new(Backend::Auto).unwrap();
    let uid_of = |procs: &[Process]| procs.iter().find(|p| p.pid == parent).and_then(|p| p.uid);
    let procs = table.list(UID).unwrap();
    println!("before {:?} uid={:?}", table.backend(), uid_of(&procs));
    // SAFETY: unshare takes flags only; this process has one thread (before main).
    if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
        println!("error unshare(CLONE_NEWUSER): {}", std::io::Error::last_os_error());
        return;
    }
    let procs = table.list(UID).unwrap();
    println!("after {:?} uid={:?} proc={}", table.backend(), uid_of(&procs), euid(parent));
    println!("reason {}", table.fallback_reason().unwrap_or("-"));
}

/// Run this test binary as the helper `name` (see `reader_helpers`); its stdout.
fn run_reader_helper(name: &str, pid: Option<i32>) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env("SPAWNKIT_TEST_HELPER", name).stdin(Stdio::null());
    if let Some(pid) = pid {
        cmd.env("SPAWNKIT_TEST_PID", pid.to_string());
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "helper {name}: {:?}\n{text}\n{err}", out.status);
    assert!(!text.contains("error "), "helper {name}: {text}");
    text
}

/// The line of `text` that starts with `key ` (without it).
fn line_of<'a>(text: &'a str, key: &str) -> &'a str {
    let found = text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' '));
    found.unwrap_or_else(|| panic!("no {key:?} line in {text:?}"))
}

/// `BACKEND pid:uid,...` as (backend, [(pid, uid)]).
fn parse_listing(line: &str) -> (&str, Vec<(i32, i64)>) {
    let (backend, rest) = line.split_once(' ').unwrap_or((line, ""));
    let each = rest.split(',').filter(|s| !s.is_empty()).map(|s| {
        let (pid, uid) = s.split_once(':').unwrap();
        (pid.parse().unwrap(), uid.parse().unwrap())
    });
    (backend, each.collect())
}

/// Issue 11, case 6: a table loaded as root keeps no view it would not get now. The process
/// becomes nobody under a /proc mounted hidepid=invisible: the same table then lists what
/// /proc shows nobody (its own processes), not pid 1 or anyone else's.
#[test]
fn a_table_loaded_as_root_shows_nobody_only_what_proc_shows_nobody() {
    let Some(_) = bpf_table() else { return };
    if !common::is_root() {
        eprintln!("skipped: dropping to nobody needs root");
        return;
    }
    let text = run_reader_helper("reader-nobody", None);
    let (backend, before) = parse_listing(line_of(&text, "before"));
    assert_eq!(backend, "Bpf", "{text}");
    assert!(before.iter().any(|&(pid, uid)| pid == 1 && uid == 0), "{text}");

    let (backend, after) = parse_listing(line_of(&text, "after"));
    let visible: Vec<i32> =
        line_of(&text, "proc").split(',').filter_map(|p| p.parse().ok()).collect();
    assert!(!visible.contains(&1), "hidepid=invisible hides pid 1 from nobody: {text}");
    assert!(!after.is_empty(), "{text}");
    for &(pid, uid) in &after {
        assert_eq!(uid, 65534, "pid {pid} of uid {uid} listed to nobody: {text}");
        assert!(visible.contains(&pid), "pid {pid} listed, which /proc hides from nobody: {text}");
    }
    assert_eq!(backend, "Procfs", "{text}");
    let reason = line_of(&text, "reason");
    assert!(reason.contains("CAP_BPF"), "{reason}");
}

/// The decision for a reader that may still load the program: under a /proc mounted
/// hidepid=invisible, the BPF backend serves it only while /proc shows it every process too:
/// while it holds CAP_SYS_PTRACE or is in the mount's group (0, root's, by default). Without
/// either, the table lists what /proc shows it (not the sleeper of another uid); with
/// CAP_SYS_PTRACE again, the BPF backend comes back.
#[test]
fn under_hidepid_the_bpf_backend_serves_only_a_reader_that_sees_every_process() {
    let Some(_) = bpf_table() else { return };
    if !common::is_root() {
        eprintln!("skipped: a mount namespace and a process as nobody need root");
        return;
    }
    let sleeper = Tree::start_as(0, 1, "sk-nobody", Some(65534));
    let text = run_reader_helper("reader-no-ptrace", Some(sleeper.root()));
    for phase in ["root", "hidepid", "group-0", "ptrace-again"] {
        assert_eq!(line_of(&text, phase), "Bpf sleeper=true -", "{phase}: {text}");
    }
    let refused = line_of(&text, "no-ptrace");
    assert!(refused.starts_with("Procfs sleeper=false "), "{text}");
    assert!(refused.contains("hidepid=invisible"), "{refused}");
}

/// A reader that has entered a user namespace of its own holds every capability there but
/// none in the initial one: the table no longer serves it BPF records, and the uids it lists
/// are the ones /proc shows it (unmapped: the overflow uid), not the host's.
#[test]
fn a_reader_in_a_new_user_namespace_gets_procs_view() {
    let Some(_) = bpf_table() else { return };
    if !common::is_root() {
        eprintln!("skipped: the BPF table needs root here");
        return;
    }
    let text = run_reader_helper("reader-userns", None);
    assert_eq!(line_of(&text, "before"), "Bpf uid=Some(0)", "{text}");
    let after = line_of(&text, "after");
    let proc_uid = after.rsplit_once("proc=").unwrap().1;
    assert_eq!(after, format!("Procfs uid=Some({proc_uid}) proc={proc_uid}"), "{text}");
    assert_ne!(proc_uid, "0", "{text}");
    assert!(line_of(&text, "reason").contains("user namespace"), "{text}");
}
