//! The process table through the library's public API, checked against /proc as read here
//! independently: a known tree from `spawnkit-probe tree DEPTH WIDTH COMM` (odd names
//! included), filters, the tree order, the pid fast path, and processes that vanish while
//! the table is read.
//!
//! The tests name [`Backend::Procfs`] where they check values: the BPF backend has its own
//! tests. [`Backend::Auto`] must work whether or not BPF can load here.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::process::Command;

use spawnkit::ErrorKind;
use spawnkit_observe::{self as observe, Backend, Fields, Process, ProcessTable, State};

use common::fixtures::{page_size, stat_fields, status, Churn, Tree};

/// Counts each thread's allocations, so that a test can see what one refresh allocates.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

/// This thread's allocations so far.
fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: every call goes to the system allocator unchanged; counting touches a const
// thread-local Cell, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract for `alloc` is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: `ptr` came from this allocator, which is the system one.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, which is the system one.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn by_pid(procs: &[Process]) -> BTreeMap<i32, &Process> {
    procs.iter().map(|p| (p.pid, p)).collect()
}

const ODD: &str = "x) S 1 (y\n) z";

#[test]
fn the_tree_as_proc_shows_it() {
    let tree = Tree::start(2, 2, ODD);
    let mut table = ProcessTable::new(Backend::Procfs).unwrap();
    assert_eq!(table.backend(), Backend::Procfs);
    assert_eq!(table.fallback_reason(), None);
    let all = table.list(Fields { uid: true, cmdline: true }).unwrap();
    let seen = by_pid(&all);
    let my_euid: u32 = status(std::process::id() as i32, "Uid:")
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let page = page_size();
    for &pid in &tree.pids {
        let p = seen.get(&pid).unwrap_or_else(|| panic!("fixture pid {pid} not listed"));
        let f = stat_fields(pid);
        assert_eq!(p.ppid, status(pid, "PPid:").parse::<i32>().unwrap(), "ppid of {pid}");
        assert_eq!(p.comm.as_bytes(), ODD.as_bytes(), "comm of {pid}");
        assert_eq!(p.state, State::Sleeping, "state of {pid}");
        assert_eq!(p.threads, 1);
        assert_eq!(p.uid, Some(my_euid));
        assert_eq!(p.start_ticks, f[19].parse::<u64>().unwrap(), "start ticks of {pid}");
        assert!(p.rss_bytes > 0, "rss of {pid}");
        assert_eq!(p.rss_bytes, f[21].parse::<u64>().unwrap() * page, "rss of {pid}");
        assert_eq!(p.cmdline.as_deref(), Some(&tree.cmdline()[..]), "cmdline of {pid}");
    }
    assert_eq!(seen[&tree.root()].ppid, std::process::id() as i32);
    // Every other node's parent is in the tree.
    for &pid in &tree.pids[1..] {
        assert!(tree.pids.contains(&seen[&pid].ppid));
    }

    // Not asked: not read.
    let lean = table.list(Fields::default()).unwrap();
    let lean = by_pid(&lean);
    for &pid in &tree.pids {
        assert_eq!(lean[&pid].uid, None);
        assert_eq!(lean[&pid].cmdline, None);
        assert_eq!(lean[&pid].comm.as_bytes(), ODD.as_bytes());
    }
}

#[test]
fn long_names_are_cut_at_15_bytes() {
    let tree = Tree::start(1, 1, "0123456789abcdefXYZ");
    let procs =
        ProcessTable::new(Backend::Procfs).unwrap().list_pids(&tree.pids, Fields::default());
    let procs = procs.unwrap();
    assert_eq!(procs.len(), 2);
    for p in &procs {
        assert_eq!(p.comm.as_bytes(), b"0123456789abcde");
    }
}

#[test]
fn filters_and_tree_order_follow_the_tree() {
    let tree = Tree::start(2, 3, "filters");
    let root = tree.root();
    let mut table = ProcessTable::new(Backend::Procfs).unwrap();
    let all = table.list(Fields::default()).unwrap();

    let mut sub = all.clone();
    observe::retain_trees(&mut sub, &[root]);
    let got: Vec<i32> = sub.iter().map(|p| p.pid).collect();
    assert_eq!(got, tree.sorted_pids(), "the root and all its descendants, nothing else");
    assert_eq!(observe::tree_pids(&all, &[root]), tree.sorted_pids());

    let mut kids = all.clone();
    observe::retain_children(&mut kids, &[root]);
    let mut want: Vec<i32> = tree.pids[1..4].to_vec(); // level 1: 3 children, after the root
    want.sort_unstable();
    assert_eq!(kids.iter().map(|p| p.pid).collect::<Vec<_>>(), want);
    for k in &kids {
        assert_eq!(status(k.pid, "PPid:"), root.to_string());
    }

    let mut some = all.clone();
    observe::retain_pids(&mut some, &[tree.pids[5], root, -1]);
    assert_eq!(some.len(), 2);

    // Tree order: the root, then each child followed by its own children.
    let rows = observe::tree_order(&sub);
    assert_eq!((rows[0].pid, rows[0].depth), (root, 0));
    let depth: BTreeMap<i32, usize> = rows.iter().map(|r| (r.pid, r.depth)).collect();
    for (i, r) in rows.iter().enumerate().skip(1) {
        let parent = sub[r.index].ppid;
        assert_eq!(r.depth, depth[&parent] + 1);
        // The nearest row above at depth - 1 is the parent.
        let above = rows[..i].iter().rev().find(|a| a.depth == r.depth - 1).unwrap();
        assert_eq!(above.pid, parent, "{} under its parent", r.pid);
    }
    assert_eq!(rows.iter().filter(|r| r.depth == 2).count(), 9);
}

#[test]
fn list_pids_reads_only_those_that_exist() {
    let tree = Tree::start(1, 2, "fastpath");
    let mut dead = Command::new(common::probe()).args(["exit", "0"]).spawn().unwrap();
    let dead_pid = dead.id() as i32;
    dead.wait().unwrap();
    let mut table = ProcessTable::new(Backend::Procfs).unwrap();

    let mut ask = tree.pids.clone();
    ask.extend([dead_pid, tree.pids[1], 0, -7]);
    ask.reverse();
    let got = table.list_pids(&ask, Fields { uid: true, cmdline: true }).unwrap();
    assert_eq!(got.iter().map(|p| p.pid).collect::<Vec<_>>(), tree.sorted_pids());
    assert!(got.iter().all(|p| p.uid.is_some() && p.cmdline.is_some()));
    assert!(got.iter().all(|p| p.comm.as_bytes() == b"fastpath"));

    assert!(table.list_pids(&[dead_pid], Fields::default()).unwrap().is_empty());
    let mut out = vec![got[0].clone()];
    table.list_pids_into(&[dead_pid], Fields::default(), &mut out).unwrap();
    assert!(out.is_empty(), "the _into variant clears its output");
}

#[test]
fn vanishing_processes_are_no_error() {
    let churn = Churn::start();
    let mut table = ProcessTable::new(Backend::Procfs).unwrap();
    let mut out = Vec::new();
    let me = std::process::id() as i32;
    for i in 0..50 {
        // The costly fields now and then: the machine may have thousands of processes.
        let fields = Fields { uid: i % 5 == 0, cmdline: i % 10 == 0 };
        table.list_into(fields, &mut out).unwrap_or_else(|e| panic!("refresh {i}: {e}"));
        assert!(out.iter().any(|p| p.pid == me));
        // A process gone before its command line was read is skipped, not listed without.
        if fields.cmdline {
            assert!(out.iter().all(|p| p.cmdline.is_some()), "refresh {i}: a cmdline is missing");
        }
        // The newest pids, where the churn is: some of them are gone by now.
        let pids: Vec<i32> = out.iter().rev().take(200).map(|p| p.pid).collect();
        let got = table.list_pids(&pids, fields).unwrap_or_else(|e| panic!("list_pids {i}: {e}"));
        assert!(!fields.cmdline || got.iter().all(|p| p.cmdline.is_some()), "list_pids {i}");
    }
    // Keep listing until the churn has really churned (a slow machine may need longer).
    let mut refreshes = 0;
    while churn.spawned() < 100 && refreshes < 20_000 {
        table.list_into(Fields::default(), &mut out).unwrap();
        refreshes += 1;
    }
    assert!(churn.spawned() >= 100, "the churn thread could not spawn");
}

#[test]
fn a_refresh_allocates_nothing_per_process() {
    let tree = Tree::start(1, 3, "no alloc");
    let mut table = ProcessTable::new(Backend::Procfs).unwrap();
    let mut out = Vec::new();
    for fields in [Fields::default(), Fields { uid: true, ..Fields::default() }] {
        // The first refresh sizes the vector; leave room for processes started meanwhile
        // (other tests run herds of thousands).
        table.list_into(fields, &mut out).unwrap();
        out.reserve(out.len() + 20_000);
        let before = allocations();
        table.list_into(fields, &mut out).unwrap();
        let during = allocations() - before;
        assert_eq!(during, 0, "one refresh of {} processes ({fields:?})", out.len());
        assert!(tree.pids.iter().all(|pid| out.iter().any(|p| p.pid == *pid)));

        table.list_pids_into(&tree.pids, fields, &mut out).unwrap();
        let before = allocations();
        table.list_pids_into(&tree.pids, fields, &mut out).unwrap();
        assert_eq!(allocations() - before, 0, "list_pids_into ({fields:?})");
        assert_eq!(out.len(), tree.pids.len());
    }
}

#[test]
fn thread_ids_are_not_processes() {
    let me = std::process::id() as i32;
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        // SAFETY: gettid has no arguments.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        let _ = done_rx.recv();
    });
    let tid = tid_rx.recv().unwrap();
    assert!(std::path::Path::new(&format!("/proc/{tid}/stat")).exists());
    let mut table = ProcessTable::new(Backend::Procfs).unwrap();
    for fields in [Fields::default(), Fields { uid: true, cmdline: true }] {
        let got = table.list_pids(&[tid, me], fields).unwrap();
        assert_eq!(got.iter().map(|p| p.pid).collect::<Vec<_>>(), [me], "{fields:?}");
        assert!(got[0].threads >= 2);
        let all = table.list(fields).unwrap();
        assert!(all.iter().all(|p| p.pid != tid), "a thread listed as a process");
    }
    done_tx.send(()).unwrap();
    thread.join().unwrap();
}

#[test]
fn a_table_can_move_between_threads() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<ProcessTable>();
    let mut table = ProcessTable::new(Backend::Auto).unwrap();
    let me = std::process::id() as i32;
    let found = std::thread::spawn(move || table.list(Fields::default()).unwrap())
        .join()
        .unwrap()
        .iter()
        .any(|p| p.pid == me);
    assert!(found);
}

#[test]
fn auto_works_with_or_without_bpf() {
    let mut table = ProcessTable::new(Backend::Auto).unwrap();
    match table.backend() {
        Backend::Procfs => {
            let why = table.fallback_reason().expect("a fallback says why");
            assert!(!why.is_empty());
        }
        Backend::Bpf => assert_eq!(table.fallback_reason(), None),
        Backend::Auto => panic!("backend() names the backend in use"),
    }
    let me = std::process::id() as i32;
    let procs = table.list(Fields::default()).unwrap();
    assert!(procs.iter().any(|p| p.pid == me));
    let procs = observe::processes(Fields::default()).unwrap();
    assert!(procs.iter().any(|p| p.pid == me));

    match ProcessTable::new(Backend::Bpf) {
        Ok(t) => assert_eq!(t.backend(), Backend::Bpf),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Unsupported);
            assert!(!e.to_string().is_empty());
        }
    }
}

#[test]
fn start_time_and_cmdline_helpers() {
    let tree = Tree::start(0, 0, "helpers");
    let root = tree.root();
    let p = ProcessTable::new(Backend::Procfs)
        .unwrap()
        .list_pids(&[root], Fields { cmdline: true, ..Fields::default() })
        .unwrap()
        .pop()
        .expect("listed");
    let boot = observe::boot_time().unwrap();
    let start = p.start_time(boot);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    // btime has a precision of one second.
    assert!(start >= boot as f64 && start <= now.as_secs_f64() + 1.0, "{start}");
    let want = boot as f64 + stat_fields(root)[19].parse::<f64>().unwrap() / 100.0;
    assert!((start - want).abs() < 1e-6);

    let args: Vec<&[u8]> = p.args().collect();
    assert_eq!(args, tree.argv.iter().map(Vec::as_slice).collect::<Vec<_>>());
    assert_eq!(observe::read_cmdline(root), Some(tree.cmdline()));
    // A kernel thread (kthreadd, pid 2) has an empty command line.
    if std::fs::read_to_string("/proc/2/stat").is_ok_and(|s| s.contains("(kthreadd)")) {
        assert_eq!(observe::read_cmdline(2), Some(Vec::new()));
    }
    assert_eq!(observe::read_cmdline(-1), None);
}

/// pid 1 is in every backend's table, as /proc shows it (some kernels hide it from BPF task
/// iterators; the table puts it back), in a whole listing and when asked for by pid.
#[test]
fn init_is_listed_by_every_backend() {
    let from_proc = stat_fields(1);
    for backend in [Backend::Procfs, Backend::Bpf] {
        let require = std::env::var_os("SPAWNKIT_REQUIRE_BPF").is_some_and(|v| v == "1");
        let mut table = match ProcessTable::new(backend) {
            Ok(t) => t,
            Err(e) if backend == Backend::Bpf && !require => {
                eprintln!("BPF backend not checked: {e}");
                continue;
            }
            Err(e) => panic!("{backend:?}: {e}"),
        };
        let all = table.list(Fields { uid: true, cmdline: true }).unwrap();
        let init = all.iter().find(|p| p.pid == 1).unwrap_or_else(|| panic!("{backend:?}"));
        assert_eq!(all.iter().filter(|p| p.pid == 1).count(), 1, "{backend:?}");
        assert_eq!(all.first().map(|p| p.pid), Some(1), "{backend:?}: pid order");
        assert_eq!(init.ppid, 0);
        assert_eq!(init.state.letter().to_string(), from_proc[0], "{backend:?}");
        assert_eq!(init.start_ticks.to_string(), from_proc[19], "{backend:?}");
        assert_eq!(
            init.uid,
            Some(status(1, "Uid:").split_whitespace().nth(1).unwrap().parse().unwrap())
        );
        assert!(init.cmdline.is_some());
        let one = table.list_pids(&[1, 2], Fields::default()).unwrap();
        assert_eq!(one.iter().map(|p| p.pid).collect::<Vec<_>>(), [1, 2], "{backend:?}");
    }
}
