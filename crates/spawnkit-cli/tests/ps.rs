//! `spawnkit ps`, driven through the real binary, checked against /proc read here: a known
//! tree from `spawnkit-probe tree DEPTH WIDTH COMM`, selected with -p, --ppid and --tree-of,
//! shown with -o, --sort, --forest and --json.
//!
//! Values are checked with `--backend procfs` (the BPF backend has its own tests); `auto`
//! must work whether or not BPF loads here.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use common::fixtures::{page_size, probe, stat_fields, status, Tree};
use common::{spawnkit_bin, spawnkit_cmd, Res};

/// `spawnkit ps ARGS`; spawnkit writes UTF-8 whatever the processes are named.
fn ps(args: &[&str]) -> Res {
    Res::of_utf8(spawnkit_cmd(["ps"]).args(args))
}

/// `spawnkit ps --backend procfs ARGS`, which must succeed.
fn ok(args: &[&str]) -> String {
    let mut all = vec!["--backend", "procfs"];
    all.extend_from_slice(args);
    let r = ps(&all);
    assert_eq!(r.code, Some(0), "spawnkit ps {args:?}: {r:?}");
    r.stdout
}

/// The first column of each line, as pids.
fn pid_column(out: &str) -> Vec<i32> {
    out.lines().map(|l| l.split_whitespace().next().unwrap().parse().unwrap()).collect()
}

fn ppid(pid: i32) -> i32 {
    status(pid, "PPid:").parse().unwrap()
}

fn boot_time() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap();
    text.lines().find_map(|l| l.strip_prefix("btime ")).unwrap().trim().parse().unwrap()
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

#[test]
fn format_shows_the_fields_asked_for() {
    let tree = Tree::start(1, 2, "fmt name");
    let out = ok(&["-o", "pid,ppid,state,nlwp,comm", "-p", &tree.list()]);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["PID", "PPID", "S", "NLWP", "COMMAND"]);
    let mut seen = Vec::new();
    for line in lines {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let pid: i32 = cols[0].parse().unwrap();
        assert_eq!(cols[1].parse::<i32>().unwrap(), ppid(pid), "{line}");
        assert_eq!(cols[2], "S");
        assert_eq!(cols[3], "1");
        assert_eq!(&cols[4..], ["fmt", "name"], "{line}");
        seen.push(pid);
    }
    assert_eq!(seen, tree.sorted_pids());

    // Aliases and renamed headers; no header line at all.
    let out = ok(&["-o", "pid=ID,s,thcount,ucomm=NAME", "-p", &tree.root().to_string()]);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["ID", "S", "THCNT", "NAME"]);
    let out = ok(&["-o", "pid", "--no-headers", "-p", &tree.list()]);
    assert_eq!(pid_column(&out), tree.sorted_pids());
}

#[test]
fn json_values_agree_with_proc() {
    let odd = "a b) (c\nd";
    let tree = Tree::start(1, 2, odd);
    let fields = "pid,ppid,comm,state,uid,user,nlwp,start_time,lstart,etimes,rss,args";
    let out = ok(&["--json", "-o", fields, "--tree-of", &tree.root().to_string()]);
    let rows: Vec<Value> = serde_json::from_str(&out).expect("a JSON array");
    let want_keys: BTreeSet<&str> = fields.split(',').collect();
    let boot = boot_time();
    let page = page_size();
    let mut pids = Vec::new();
    for row in &rows {
        let obj = row.as_object().unwrap();
        assert_eq!(obj.keys().map(String::as_str).collect::<BTreeSet<_>>(), want_keys);
        let pid = obj["pid"].as_i64().unwrap() as i32;
        let f = stat_fields(pid);
        let euid: u64 = status(pid, "Uid:").split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(obj["ppid"].as_i64(), Some(ppid(pid) as i64));
        assert_eq!(obj["comm"].as_str(), Some(odd));
        assert_eq!(obj["state"].as_str(), Some("S"));
        assert_eq!(obj["uid"].as_u64(), Some(euid));
        if euid == 0 {
            assert_eq!(obj["user"].as_str(), Some("root"));
        }
        assert_eq!(obj["nlwp"].as_u64(), Some(1));
        assert_eq!(obj["rss"].as_u64(), Some(f[21].parse::<u64>().unwrap() * page / 1024));
        let start = obj["start_time"].as_f64().unwrap();
        let want = boot + f[19].parse::<f64>().unwrap() / 100.0;
        assert!((start - want).abs() < 0.001, "start_time {start}, /proc says {want}");
        let etimes = obj["etimes"].as_u64().unwrap() as f64;
        assert!(etimes >= 0.0 && etimes <= now() - start + 1.0, "etimes {etimes}");
        assert_eq!(obj["lstart"].as_str().map(str::len), Some(24));
        let args = format!("{} tree 1 2 {odd}", probe().display());
        assert_eq!(obj["args"].as_str(), Some(args.as_str()));
        pids.push(pid);
    }
    assert_eq!(pids, tree.sorted_pids());

    // Aliases give the main name as the key; nothing selected gives an empty array.
    let out = ok(&["--json", "-o", "euid,thcount,rsz,cmd", "-p", &tree.root().to_string()]);
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    let keys: BTreeSet<&str> = rows[0].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, BTreeSet::from(["uid", "nlwp", "rss", "args"]));
    // Nothing to show: an empty array, and exit status 1 as for the table (procps).
    let dead = i32::MAX.to_string();
    let r = ps(&["--backend", "procfs", "--json", "-p", &dead]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.is_empty(), "{r:?}");
    let rows: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    assert!(rows.is_empty());
}

#[test]
fn selections() {
    let tree = Tree::start(2, 2, "select");
    let root = tree.root().to_string();
    let out = ok(&["-o", "pid", "--no-headers", "--tree-of", &root]);
    assert_eq!(pid_column(&out), tree.sorted_pids(), "the root and every descendant");

    let out = ok(&["-o", "pid", "--no-headers", "--ppid", &root]);
    let mut kids = tree.pids[1..3].to_vec();
    kids.sort_unstable();
    assert_eq!(pid_column(&out), kids, "direct children only");

    let (a, b, c) = (tree.pids[6], tree.pids[0], tree.pids[3]);
    let out = ok(&["-o", "pid", "--no-headers", "-p", &format!("{a},{b}"), "-p", &c.to_string()]);
    let mut want = vec![a, b, c];
    want.sort_unstable();
    assert_eq!(pid_column(&out), want);

    // Selections add up: -p 1 and the children of the root.
    let out = ok(&["-o", "pid", "--no-headers", "-p", "1", "--ppid", &root]);
    let mut want = vec![1];
    want.extend(&kids);
    assert_eq!(pid_column(&out), want);

    // A tree is followed through the whole table, whatever else is selected: a grandchild's
    // tree and the root, with nothing between them selected.
    let grand = tree.pids[3];
    assert_eq!(ppid(ppid(grand)), tree.root());
    let out = ok(&["-o", "pid", "--no-headers", "--tree-of", &grand.to_string(), "-p", &root]);
    let mut want: Vec<i32> =
        tree.pids.iter().copied().filter(|&p| p == grand || ppid(p) == grand).collect();
    want.push(tree.root());
    want.sort_unstable();
    assert_eq!(pid_column(&out), want);

    // --ppid 0: the processes without a parent; a pid that does not exist adds nothing.
    let out = ok(&["-o", "pid", "--no-headers", "--ppid", "0", "-p", &format!("{root},4194305")]);
    let shown = pid_column(&out);
    assert!(shown.contains(&1) && shown.contains(&tree.root()), "{out}");
    assert!(shown.iter().all(|&p| p == tree.root() || ppid(p) == 0), "{out}");
    let r = ps(&["--backend", "procfs", "-o", "pid", "--no-headers", "-p", "4194305"]);
    assert_eq!((r.code, r.stdout.as_str()), (Some(1), ""), "{r:?}");

    // As procps: the same table for the same selection.
    same_as_procps("pid,ppid", &["-p", "1", "--ppid", &root]);
    same_as_procps("pid,ppid", &["--ppid", &root, "-p", &grand.to_string()]);
}

#[test]
fn sorting() {
    let tree = Tree::start(2, 2, "sort");
    let out = ok(&["-o", "pid", "--no-headers", "--sort=-pid", "-p", &tree.list()]);
    let mut want = tree.sorted_pids();
    want.reverse();
    assert_eq!(pid_column(&out), want);

    // By ppid, then by pid descending within a parent.
    let out = ok(&["-o", "pid,ppid", "--no-headers", "--sort", "ppid,-pid", "-p", &tree.list()]);
    let mut want: Vec<(i32, i32)> = tree.pids.iter().map(|&p| (ppid(p), p)).collect();
    want.sort_by(|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
    assert_eq!(pid_column(&out), want.iter().map(|w| w.1).collect::<Vec<_>>());

    // '--sort -rss' (with a space) is a descending sort too, not an unknown flag.
    let out = ok(&["-o", "rss", "--no-headers", "--sort", "-rss", "-p", &tree.list()]);
    let rss: Vec<u64> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert!(rss.windows(2).all(|w| w[0] >= w[1]), "{rss:?}");
}

#[test]
fn forest_indents_children_under_their_parent() {
    let tree = Tree::start(2, 2, "forest");
    let out =
        ok(&["-o", "pid,comm", "--no-headers", "--forest", "--tree-of", &tree.root().to_string()]);
    let mut depth_of: BTreeMap<i32, usize> = BTreeMap::new();
    let mut order = Vec::new();
    for line in out.lines() {
        let (pid, rest) = line.trim_start().split_once(' ').unwrap();
        let pid: i32 = pid.parse().unwrap();
        let name = rest.trim_start_matches(' ');
        let depth = if name == "forest" {
            0
        } else {
            // "\_ forest" after 4 columns per level above.
            let at = rest.find("\\_ forest").unwrap_or_else(|| panic!("no marker: {line:?}"));
            // Each level above takes 4 columns ("    " or " |  "), then " \_ ".
            let lead = &rest[..at];
            assert!(lead.chars().all(|c| c == ' ' || c == '|'), "{line:?}");
            assert_eq!((at - 1) % 4, 0, "{line:?}");
            (at - 1) / 4 + 1
        };
        depth_of.insert(pid, depth);
        order.push(pid);
    }
    assert_eq!(order[0], tree.root());
    assert_eq!(depth_of[&tree.root()], 0);
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, tree.sorted_pids());
    for (i, &pid) in order.iter().enumerate().skip(1) {
        let parent = ppid(pid);
        assert_eq!(depth_of[&pid], depth_of[&parent] + 1, "{out}");
        let above = order[..i].iter().rev().find(|p| depth_of[p] + 1 == depth_of[&pid]).unwrap();
        assert_eq!(*above, parent, "{pid} is shown under its parent:\n{out}");
    }
    assert_eq!(depth_of.values().filter(|&&d| d == 2).count(), 4);
}

#[test]
fn bad_input_is_a_usage_error() {
    let r = ps(&["-o", "pid,bogus"]);
    assert_eq!(r.code, Some(125), "{r:?}");
    assert!(r.stderr.contains("unknown field 'bogus'"), "{}", r.stderr);
    assert!(r.stdout.is_empty());

    for bad in ["x", "0", "-4", "1,,2"] {
        let r = ps(&["-p", bad]);
        assert_eq!(r.code, Some(125), "-p {bad}: {r:?}");
        assert!(r.stderr.contains("is not a pid"), "{}", r.stderr);
    }
    let r = ps(&["--sort", "-nope"]);
    assert_eq!(r.code, Some(125));
    assert!(r.stderr.contains("unknown field 'nope'"), "{}", r.stderr);
    let r = ps(&["--backend", "magic"]);
    assert_eq!(r.code, Some(125));
    assert!(r.stderr.contains("not a backend"), "{}", r.stderr);
}

#[test]
fn backends() {
    let me = std::process::id() as i32;
    let r = ps(&["--backend", "procfs", "-v", "-o", "pid", "--no-headers"]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stderr.contains("backend procfs"), "{}", r.stderr);
    assert!(pid_column(&r.stdout).contains(&me));

    let r = ps(&["--backend", "auto", "-v", "-o", "pid", "--no-headers"]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(pid_column(&r.stdout).contains(&me));
    if r.stderr.contains("backend procfs") {
        assert!(r.stderr.contains("BPF not used: "), "{}", r.stderr);
    } else {
        assert!(r.stderr.contains("backend bpf"), "{}", r.stderr);
    }

    // bpf either works or says why, with exit status 1.
    let r = ps(&["--backend", "bpf", "-o", "pid", "--no-headers"]);
    match r.code {
        Some(0) => assert!(pid_column(&r.stdout).contains(&me)),
        Some(1) => {
            assert!(r.stderr.starts_with("spawnkit ps: "), "{}", r.stderr);
            assert!(r.stdout.is_empty());
        }
        other => panic!("--backend bpf exited with {other:?}: {r:?}"),
    }
}

#[test]
fn closed_stdout_ends_quietly() {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new fds into `fds`.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds were just created and are owned here alone.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read_end); // every write to the pipe now fails with EPIPE
    let out = spawnkit_cmd(["ps", "--backend", "procfs"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// procps `ps` with these arguments, or `None` when it is not installed. UTF-8 locale, as
/// spawnkit always writes UTF-8 (procps shows control characters as '?' then too).
fn procps(args: &[&str]) -> Option<(Option<i32>, String)> {
    let out = Command::new("ps").args(args).env("LC_ALL", "C.UTF-8").output().ok()?;
    Some((out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// A child of this test that has exited and is not reaped: a zombie until dropped.
struct Zombie(Child);

impl Zombie {
    fn new() -> Zombie {
        let mut child = Command::new(probe()).args(["exit", "0"]).spawn().unwrap();
        let path = format!("/proc/{}/stat", child.id());
        // It becomes a zombie as soon as it exits; wait for that without reaping it.
        for _ in 0..10_000 {
            if std::fs::read_to_string(&path).is_ok_and(|s| s.contains(") Z ")) {
                return Zombie(child);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let pid = child.id();
        let _ = child.wait();
        panic!("pid {pid} never became a zombie");
    }
}

impl Drop for Zombie {
    fn drop(&mut self) {
        let _ = self.0.wait();
    }
}

/// `ps -o FIELDS ARGS` and `spawnkit ps -o FIELDS ARGS` print the same table.
fn same_as_procps(fields: &str, args: &[&str]) -> bool {
    let mut ps_args = vec!["-o", fields];
    ps_args.extend_from_slice(args);
    let Some((code, want)) = procps(&ps_args) else {
        eprintln!("procps ps is not installed: not compared");
        return false;
    };
    let mut ours = vec!["--backend", "procfs", "-o", fields];
    ours.extend_from_slice(args);
    let r = ps(&ours);
    assert_eq!(r.stdout, want, "spawnkit ps {ours:?} (above) and ps {ps_args:?} (below)");
    assert_eq!(r.code, code, "exit status of spawnkit ps {ours:?}: {r:?}");
    true
}

/// The header lines of `ps ARGS` and `spawnkit ps ARGS`.
fn headers(args: &[&str]) -> (String, String) {
    let (_, want) = procps(args).unwrap();
    let mut ours = vec!["--backend", "procfs"];
    ours.extend_from_slice(args);
    let got = ps(&ours).stdout;
    let first = |s: &str| s.lines().next().unwrap_or_default().to_string();
    (first(&got), first(&want))
}

#[test]
fn headers_widths_and_values_as_procps_shows_them() {
    // Each procps call reads all of /proc (a second with 10,000 processes): few calls.
    let tree = Tree::start(3, 2, "procps-agrees");
    let (list, one) = (tree.list(), tree.root().to_string());
    if procps(&["-p", &one]).is_none() {
        eprintln!("procps ps is not installed: not compared");
        return;
    }
    // Every field and alias, in both orders (every one of them is once not last, where a
    // column keeps its width, and the last one is not cut): header names, widths, alignment.
    let all = [
        "pid",
        "ppid",
        "s",
        "state",
        "uid",
        "euid",
        "user",
        "nlwp",
        "thcount",
        "start_time",
        "lstart",
        "etimes",
        "rss",
        "rssize",
        "rsz",
        "comm",
        "ucomm",
        "args",
        "cmd",
        "command",
    ];
    let (got, want) = headers(&["-o", &all.join(","), "-p", &one]);
    assert_eq!(got, want, "the header line");
    let reversed: Vec<&str> = all.iter().rev().copied().collect();
    let (got, want) = headers(&["-o", &reversed.join(","), "-p", &one]);
    assert_eq!(got, want, "the header line, fields reversed");
    // Headers wider than the column: one -o per field (procps takes the header to the end
    // of its -o argument).
    let mut renamed = Vec::new();
    for f in all {
        renamed.extend(["-o".to_string(), format!("{f}=A-LONGER-HEADER")]);
    }
    renamed.extend(["-p".to_string(), one.clone()]);
    let renamed: Vec<&str> = renamed.iter().map(String::as_str).collect();
    let (got, want) = headers(&renamed);
    assert_eq!(got, want, "headers wider than their columns");

    // Values that do not move while the tree sleeps (and for init and kthreadd); text
    // columns that are not last are cut at their width; --forest indents comm and args.
    let stable = "pid,ppid,s,uid,user,nlwp,start_time,lstart,comm,args";
    same_as_procps(stable, &["-p", &format!("1,2,{list}")]);
    same_as_procps("args,comm,pid", &["-p", &list]);
    same_as_procps("comm,args,pid,args", &["--forest", "-p", &list]);

    // Bytes that are not UTF-8 and control characters, in comm and args: '?' each.
    use std::os::unix::process::CommandExt;
    let dir = std::env::temp_dir().join(format!("spawnkit-ps-odd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let odd = dir.join(std::ffi::OsStr::from_bytes(b"x\xff\xfey\x01z\xc3\xa9\t!"));
    std::os::unix::fs::symlink(probe(), &odd).unwrap();
    // comm is the name exec was given; argv[0] stays UTF-8 (the probe reads its arguments
    // as strings) but holds control characters.
    let mut child = Command::new(&odd)
        .arg0("probe\x01\té\n")
        .args(["tree", "0", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("ready "), "{line:?}");
    let pid = child.id().to_string();
    // (procps 4.0.2 shows comm differently once it holds a byte that is not UTF-8: '.' for
    // control characters and '?' for every byte above 127; newer procps as here.)
    let comm = ok(&["-o", "comm=", "-p", &pid]);
    assert_eq!(comm, "x??y?z\u{e9}?!\n");
    same_as_procps("pid,args", &["-p", &pid]);
    drop(child.stdin.take());
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);

    // A zombie: "[comm] <defunct>" as its command line.
    let zombie = Zombie::new();
    same_as_procps("pid,s,comm,args", &["-p", &zombie.0.id().to_string()]);
    drop(zombie);

    // No process selected: the header alone, and exit status 1.
    same_as_procps("pid,comm", &["-p", &i32::MAX.to_string()]);
}

#[test]
fn long_user_names_as_procps_shows_them() {
    // A user whose name is longer than the USER column, if this system has one.
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let Some(uid) = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[0].len() > 8).then(|| f[2].parse::<u32>().ok()).flatten()
    }) else {
        eprintln!("no user name longer than 8 bytes here: not compared");
        return;
    };
    let tree = Tree::start_as(1, 1, "long-user", Some(uid));
    let list = tree.list();
    // Cut with a '+' where the column keeps its width, whole in a wider column or last.
    same_as_procps("user,pid,comm,user", &["-p", &list, "-o", "user=A-VERY-LONG-HEADER,comm"]);
}

/// CLOCK_BOOTTIME in seconds.
fn uptime() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) }, 0);
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[test]
fn etimes_counts_from_the_start_as_the_kernel_does() {
    // etimes = CLOCK_BOOTTIME - start ticks / HZ, truncated (as procps computes it), for
    // every process: their start times have every fraction of a second, so a rounding
    // error (such as counting from btime, which is whole seconds) shows.
    let before = uptime();
    let out = ok(&["--json", "-o", "pid,etimes"]);
    let after = uptime();
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    let mut checked = 0;
    for row in &rows {
        let pid = row["pid"].as_i64().unwrap();
        let Ok(text) = std::fs::read(format!("/proc/{pid}/stat")) else { continue };
        let close = text.iter().rposition(|&b| b == b')').unwrap();
        let fields: Vec<&[u8]> = text[close + 2..].split(|&b| b == b' ').collect();
        let start: f64 = std::str::from_utf8(fields[19]).unwrap().parse::<f64>().unwrap() / 100.0;
        if start >= before {
            // Started while spawnkit ran: perhaps a newcomer that took a listed pid.
            continue;
        }
        let etimes = row["etimes"].as_u64().unwrap() as f64;
        let (low, high) = ((before - start).floor().max(0.0), (after - start).floor());
        assert!(low <= etimes && etimes <= high, "pid {pid}: etimes {etimes}, want {low}..={high}");
        checked += 1;
    }
    assert!(checked > 0);
}

#[test]
fn start_times_need_no_proc_stat() {
    // A /proc mounted with subset=pid has no /proc/stat (no btime): the start times still
    // come out right, from the clocks.
    let want = ok(&["-o", "lstart,start_time", "-p", "1"]);
    let sh = format!(
        "mount -t proc -o subset=pid proc /proc && test ! -e /proc/stat && exec {} ps \
         --backend procfs -o lstart,start_time -p 1",
        spawnkit_bin()
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &sh])
        .output();
    match out {
        Ok(out) if out.status.success() => {
            let got = String::from_utf8_lossy(&out.stdout);
            assert_eq!(got, want);
        }
        other => eprintln!("no private /proc mount here (not root?): not compared: {other:?}"),
    }
}

/// `spawnkit ps` never lists itself (as pgrep): asked for the children of the process that
/// runs it, it shows what that process started and not its own row; asked for every
/// process, likewise.
#[test]
fn never_lists_itself() {
    for args in [
        vec!["--json".to_string(), "--ppid".into(), std::process::id().to_string()],
        vec!["--json".to_string()],
    ] {
        let mut cmd = spawnkit_cmd(std::iter::once("ps".to_string()).chain(args.clone()));
        let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let me = child.id() as u64;
        let out = child.wait_with_output().unwrap();
        let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        assert!(
            rows.iter().all(|r| r["pid"].as_u64() != Some(me)),
            "{args:?}: spawnkit ps ({me}) listed itself"
        );
        if args.len() == 1 {
            assert!(rows.len() > 1, "every process but itself: {}", rows.len());
        }
    }
}
