//! `spawnkit mem`, driven through the real binary, against a known fixture and /proc read
//! independently.
//!
//! The fixture is `spawnkit-probe shm-fixture TOTAL A B [PARENT]` (the probe is built by
//! `cargo build --workspace --bins`): a parent maps TOTAL MiB shared anonymous memory, two
//! children write A and B MiB and exit, the parent reads PARENT MiB itself, prints
//! `ready PID START END` and waits for EOF on stdin.

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::Stdio;
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

use common::fixtures::{is_root, rollup, skip_unless_root, vanished_pid, Ready, ShmFixture};
use common::{spawnkit, spawnkit_bin, spawnkit_cmd, Res};

const MIB: u64 = 1 << 20;

/// One fixture at a time: each holds up to 100 MiB.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn json(res: &Res) -> Vec<Value> {
    assert_eq!(res.code, Some(0), "{res:?}");
    match serde_json::from_str(&res.stdout) {
        Ok(Value::Array(list)) => list,
        other => panic!("not a JSON array: {other:?}\n{res:?}"),
    }
}

#[test]
fn mem_pid_prints_one_row_with_the_shmem_apart() {
    let _s = serial();
    let fx = ShmFixture::start(&["200", "50", "100", "100"]);
    let pid = fx.pid.to_string();
    let res = spawnkit(["mem", "--bytes", &pid]);
    assert_eq!(res.code, Some(0), "{res:?}");
    let lines: Vec<&str> = res.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{res:?}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["PID", "RSS", "PSS", "USS", "SHMEM", "SWAP", "COMM"]);
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[0], pid);
    let num = |i: usize| row[i].parse::<u64>().unwrap();
    assert!(num(1) >= 100 * MIB, "RSS: {row:?}");
    assert!((100 * MIB..101 * MIB).contains(&num(4)), "SHMEM: {row:?}");
    assert!(num(3) < 20 * MIB, "USS must leave the shmem out: {row:?}");
    assert_eq!(num(4), rollup(fx.pid, "Pss_Shmem"));
    assert_eq!(row[6], "spawnkit-probe");

    // Human-readable by default.
    let res = spawnkit(["mem", &pid]);
    let row: Vec<String> =
        res.stdout.lines().nth(1).unwrap().split_whitespace().map(String::from).collect();
    assert_eq!(row[4], "100M", "{res:?}");
    // KiB.
    let res = spawnkit(["mem", "-k", &pid]);
    let row: Vec<String> =
        res.stdout.lines().nth(1).unwrap().split_whitespace().map(String::from).collect();
    assert_eq!(row[4], (rollup(fx.pid, "Pss_Shmem") / 1024).to_string(), "{res:?}");
}

#[test]
fn mem_json_gives_objects_with_byte_values() {
    let _s = serial();
    let fx = ShmFixture::start(&["200", "50", "100", "100"]);
    let me = std::process::id() as i32;
    let list = json(&spawnkit(["mem", "--json", &fx.pid.to_string(), &me.to_string()]));
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["pid"], fx.pid, "the order of the PIDs given");
    assert_eq!(list[1]["pid"], me);
    let o = list[0].as_object().unwrap();
    for key in [
        "pid",
        "comm",
        "status",
        "rss",
        "pss",
        "uss",
        "shmem",
        "swap",
        "pss_anon",
        "pss_file",
        "shmem_private",
        "swap_pss",
        "shared_clean",
        "shared_dirty",
        "private_clean",
        "private_dirty",
    ] {
        assert!(o.contains_key(key), "missing {key}: {o:?}");
    }
    assert_eq!(o["comm"], "spawnkit-probe");
    assert_eq!(o["status"], "measured");
    let n = |k: &str| o[k].as_u64().unwrap_or_else(|| panic!("{k} is not an integer: {o:?}"));
    // The fixture is idle: its rollup does not change between the two reads.
    assert_eq!(n("shmem"), rollup(fx.pid, "Pss_Shmem"));
    assert_eq!(n("rss"), rollup(fx.pid, "Rss"));
    assert_eq!(n("swap"), rollup(fx.pid, "Swap"));
    assert!((100 * MIB..101 * MIB).contains(&n("shmem")), "shmem {}: {o:?}", n("shmem"));
    assert!(n("shmem_private") >= 100 * MIB);
    assert!(n("uss") < 20 * MIB);
    assert_eq!(n("uss") + n("shmem_private"), n("private_clean") + n("private_dirty"));
    assert_eq!(n("pss"), n("pss_anon") + n("pss_file") + n("shmem"));

    // --all lists it too; --top 2 gives two, largest RSS first.
    let all = json(&spawnkit(["mem", "--all", "--json"]));
    assert!(all.iter().any(|o| o["pid"] == fx.pid));
    let top = json(&spawnkit(["mem", "--top", "2", "--json"]));
    assert_eq!(top.len(), 2);
    assert!(top[0]["rss"].as_u64() >= top[1]["rss"].as_u64());
    let sorted = json(&spawnkit(["mem", "--all", "--json", "--sort", "shmem"]));
    // Largest first; processes that could not be read (null) at the end.
    let key = |o: &Value| o["shmem"].as_u64().map_or(-1, |v| v as i128);
    assert!(sorted.windows(2).all(|w| key(&w[0]) >= key(&w[1])), "{sorted:?}");
    // The fixture holds 100 MiB of shmem, so the first row holds at least as much.
    assert!(sorted.iter().any(|o| o["pid"] == fx.pid));
    assert!(key(&sorted[0]) >= (100 * MIB) as i128, "{:?}", sorted[0]);
}

#[test]
fn mem_shared_json_reports_the_region_once() {
    if skip_unless_root("mem_shared_json_reports_the_region_once") {
        return;
    }
    let _s = serial();
    let fx = ShmFixture::start(&["200", "50", "100"]);
    let object = fx.stat_object();
    let dev = format!("{}:{}", libc::major(object.dev()), libc::minor(object.dev()));
    for method in ["auto", "procmap-query", "maps-text"] {
        let list = json(&spawnkit(["mem", "--shared", "--json", "--method", method]));
        let mine: Vec<&Value> = list
            .iter()
            .filter(|o| o["pids"].as_array().unwrap().iter().any(|p| p == fx.pid))
            .collect();
        assert_eq!(mine.len(), 1, "{method}: {list:?}");
        let o = mine[0];
        for key in
            ["dev", "inode", "name", "size_bytes", "resident_bytes", "pids", "kind", "ipc_ns"]
        {
            assert!(o.get(key).is_some(), "{method}: missing {key}: {o}");
        }
        assert_eq!(o["ipc_ns"], Value::Null, "only SysV segments have an IPC namespace");
        assert_eq!(o["dev"], dev.as_str());
        assert_eq!(o["inode"], object.ino());
        assert_eq!(o["name"], "/dev/zero (deleted)");
        assert_eq!(o["kind"], "anonymous");
        assert_eq!(o["size_bytes"], 200 * MIB);
        assert_eq!(o["resident_bytes"], 100 * MIB);
        assert_eq!(o["pids"], serde_json::json!([fx.pid]));
        let same = list.iter().filter(|x| x["dev"] == o["dev"] && x["inode"] == o["inode"]);
        assert_eq!(same.count(), 1, "{method}: listed once");
    }

    // Restricted to the fixture: just its region. -v puts the totals on stderr as JSON.
    let res = spawnkit(["mem", "--shared", "--json", "-v", &fx.pid.to_string()]);
    let list = json(&res);
    assert_eq!(list.len(), 1);
    let summary: Value = serde_json::from_str(res.stderr.trim()).expect("summary on stderr");
    assert_eq!(summary["total_resident_bytes"], 100 * MIB);
    assert_eq!(summary["method"], "procmap-query");
    let shmem = summary["meminfo_shmem_bytes"].as_i64().unwrap();
    assert_eq!(summary["difference_bytes"].as_i64().unwrap(), shmem - (100 * MIB) as i64);
}

#[test]
fn mem_shared_table_has_the_region_and_the_meminfo_check() {
    if skip_unless_root("mem_shared_table_has_the_region_and_the_meminfo_check") {
        return;
    }
    let _s = serial();
    let fx = ShmFixture::start(&["200", "50", "100"]);
    let res = spawnkit(["mem", "--shared", "--bytes"]);
    assert_eq!(res.code, Some(0), "{res:?}");
    let mut lines = res.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["DEV", "INODE", "SIZE", "RESIDENT", "PIDS", "KIND", "NAME"]);
    let pid = fx.pid.to_string();
    let row = res
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(4) == Some(&pid.as_str()))
        .unwrap_or_else(|| panic!("no row for {pid}: {res:?}"));
    assert_eq!(row[2..], ["209715200", "104857600", &pid, "anonymous", "/dev/zero", "(deleted)"]);
    let value = |label: &str| -> i64 {
        let line = res.stdout.lines().find(|l| l.starts_with(label)).expect(label);
        line[label.len()..].split_whitespace().next().unwrap().parse().unwrap()
    };
    let total = value("total resident");
    let shmem = value("Shmem in /proc/meminfo");
    assert!(total >= (100 * MIB) as i64);
    assert_eq!(value("difference"), shmem - total);
}

#[test]
fn bad_pids_are_clear_errors() {
    let gone = vanished_pid();
    let res = spawnkit(["mem", &gone.to_string()]);
    assert_eq!(res.code, Some(1), "{res:?}");
    assert_eq!(res.stderr.trim(), format!("spawnkit mem: no process {gone}"));
    assert_eq!(res.stdout.lines().count(), 1, "only the header: {res:?}");

    // The others are still shown.
    let me = std::process::id().to_string();
    let res = spawnkit(["mem", "--json", &gone.to_string(), &me]);
    assert_eq!(res.code, Some(1));
    let list: Vec<Value> = serde_json::from_str(&res.stdout).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["pid"].to_string(), me);

    let res = spawnkit(["mem", "--shared", &gone.to_string()]);
    assert_eq!(res.code, Some(1), "{res:?}");
    assert!(res.stderr.contains(&format!("no process {gone}")), "{res:?}");

    for bad in ["0", "-5", "abc", "12x"] {
        let res = spawnkit(["mem", "--", bad]);
        assert_eq!(res.code, Some(125), "{bad}: {res:?}");
        assert!(res.stderr.contains("is not a pid"), "{bad}: {res:?}");
    }
    let res = spawnkit(["mem", "--method", "nope", "--shared"]);
    assert_eq!(res.code, Some(125), "{res:?}");
    assert!(res.stderr.contains("auto, procmap-query or maps-text"), "{res:?}");
}

#[test]
fn closed_stdout_ends_quietly() {
    for args in [&["mem", "--all"][..], &["mem", "--shared"][..]] {
        let mut child = spawnkit_cmd(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader is gone before anything is written
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert!(out.stderr.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// `spawnkit run --uid 65534 --gid 65534 --groups '' -- spawnkit ARGS...`: as nobody.
fn spawnkit_as_nobody(args: &[&str]) -> Res {
    let mut all = vec!["run", "--uid", "65534", "--gid", "65534", "--groups", "", "--"];
    all.push(spawnkit_bin());
    all.extend(args);
    spawnkit(&all)
}

#[test]
fn unprivileged_mem_says_what_it_could_not_read() {
    if !is_root() {
        println!(
            "skipping unprivileged_mem_says_what_it_could_not_read: needs root to drop to nobody"
        );
        return;
    }
    // Every other user's process is unreadable to nobody (pid 1 at least).
    let res = spawnkit_as_nobody(&["mem", "--shared"]);
    assert_eq!(res.code, Some(0), "{res:?}");
    assert!(res.stdout.starts_with("DEV "), "{res:?}");
    let line = res
        .stdout
        .lines()
        .find(|l| l.starts_with("not read"))
        .unwrap_or_else(|| panic!("no 'not read' line in the footer: {res:?}"));
    assert!(line.contains("processes") && line.contains("permission denied"), "{line}");
    assert!(!res.stderr.contains("panicked"), "{res:?}");

    // JSON stays a list on stdout; what could not be read is said on stderr.
    let res = spawnkit_as_nobody(&["mem", "--shared", "--json"]);
    let list = json(&res);
    assert!(list.iter().all(|o| o.get("dev").is_some()), "{res:?}");
    assert!(
        res.stderr.contains("could not be read") && res.stderr.contains("permission denied"),
        "{res:?}"
    );
    // And with -v, the JSON summary carries the count instead.
    let res = spawnkit_as_nobody(&["mem", "--shared", "--json", "-v"]);
    json(&res);
    let summary: Value = serde_json::from_str(res.stderr.trim()).expect("summary on stderr");
    assert!(summary["processes_denied"].as_u64().unwrap() >= 1, "{summary}");

    // Per process: pid 1 is another user's, shown with '-' and exit 0.
    let res = spawnkit_as_nobody(&["mem", "1"]);
    assert_eq!(res.code, Some(0), "{res:?}");
    let row: Vec<&str> = res.stdout.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..6], ["1", "-", "-", "-", "-", "-"], "{res:?}");
    let list = json(&spawnkit_as_nobody(&["mem", "--json", "1"]));
    assert_eq!(list[0]["status"], "denied");
    assert_eq!(list[0]["rss"], Value::Null);
    let res = spawnkit_as_nobody(&["mem", "--all"]);
    assert_eq!(res.code, Some(0), "{res:?}");
}

#[test]
fn closed_stderr_and_stdout_end_quietly() {
    // stdout and stderr on one pipe whose reader is gone: the "no process" notice and -v
    // output meet EPIPE on stderr too, which must not panic.
    let gone = vanished_pid().to_string();
    for args in [&["mem", "-v", &gone][..], &["mem", "--shared", "-v", &gone][..]] {
        let (r, w) = {
            let mut fds = [0; 2];
            // SAFETY: pipe writes two fds into `fds`.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            // SAFETY: both fds were just created and are owned by nobody else.
            unsafe {
                (
                    <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]),
                    <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[1]),
                )
            }
        };
        drop(r);
        let status = spawnkit_cmd(args)
            .stdin(Stdio::null())
            .stdout(w.try_clone().unwrap())
            .stderr(w)
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(1), "{args:?}: the pid does not exist; no panic (101)");
    }
}

/// Root of a user namespace is root (euid 0) and yet refused every process outside it: what
/// could not be read must not be answered with "run as root".
#[test]
fn root_refused_is_not_told_to_run_as_root() {
    if !is_root() {
        println!("skipping root_refused_is_not_told_to_run_as_root: needs root");
        return;
    }
    let in_userns = |args: &[&str]| {
        let mut all = vec!["run", "--map-root-user", "--"];
        all.push(spawnkit_bin());
        all.extend(args);
        spawnkit(&all)
    };
    let res = in_userns(&["mem", "--shared"]);
    assert_eq!(res.code, Some(0), "{res:?}");
    let line = res
        .stdout
        .lines()
        .find(|l| l.starts_with("not read"))
        .unwrap_or_else(|| panic!("no 'not read' line in the footer: {res:?}"));
    assert!(line.contains("refused even to root"), "{line}");
    assert!(!line.contains("run as root"), "{line}");

    let res = in_userns(&["mem", "--shared", "--json"]);
    json(&res);
    assert!(res.stderr.contains("could not be read"), "{res:?}");
    assert!(res.stderr.contains("root too is refused"), "{res:?}");
    assert!(!res.stderr.contains("run as root"), "{res:?}");

    // Dropped to nobody, the advice is still to run as root.
    let res = spawnkit_as_nobody(&["mem", "--shared", "--json"]);
    assert!(res.stderr.contains("run as root to read them"), "{res:?}");
}

/// A process whose main thread has exited while another runs: its memory is read through
/// the live thread, and its region, which no map_files can measure, says why its size is
/// unknown.
#[test]
fn a_leader_that_exited_before_its_threads_is_measured_through_a_thread() {
    let _serial = serial();
    let fixture = Ready::start(&["shm-fixture", "leader-exits", "16"], 3);
    let pid = fixture.words[0].clone();
    let list = json(&spawnkit(["mem", "--json", &pid]));
    assert_eq!(list[0]["status"], "measured", "{list:?}");
    assert!(list[0]["shmem"].as_u64().unwrap() >= 16 * MIB, "{list:?}");

    if !is_root() {
        return; // without root every resident size is unknown, for map_files' sake
    }
    let res = spawnkit(["mem", "--shared", &pid]);
    assert_eq!(res.code, Some(0), "{res:?}");
    let row = res.stdout.lines().nth(1).unwrap_or_default();
    assert!(row.contains(" - ") && row.contains(&pid) && row.contains("anonymous"), "{res:?}");
    assert!(res.stdout.contains("1 of unknown size (no /proc/PID/map_files"), "{res:?}");
    let res = spawnkit(["mem", "--shared", "--json", "-v", &pid]);
    let summary: Value = serde_json::from_str(res.stderr.trim()).expect("summary on stderr");
    assert_eq!(summary["map_files_denied"], false, "{summary}");
    assert_eq!(summary["unknown_resident"], 1, "{summary}");

    // Another user's (root's) to nobody: its leader's files read empty, its thread's refuse:
    // denied, not "no memory".
    let list = json(&spawnkit_as_nobody(&["mem", "--json", &pid]));
    assert_eq!(list[0]["status"], "denied", "{list:?}");
    assert_eq!(list[0]["rss"], Value::Null);
}

#[test]
fn a_negative_top_is_a_clear_usage_error() {
    for (flag, name) in [("-n", "--top"), ("--top", "--top")] {
        spawnkit(["mem", flag, "-1"])
            .bad_value(name, "-1")
            .stderr_has("-1 is not in 0..=4294967295");
    }
}
