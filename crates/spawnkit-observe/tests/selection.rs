//! [`Selection`] on the live process table, with either backend: procps' union of the
//! selectors, `tree_of` followed through the whole table, no selector = every process,
//! `ppids([0])` = the processes without a parent, and a pid that does not exist.

use std::process::{Child, Command};

use spawnkit_observe::{Backend, Fields, Process, ProcessTable, Selection};

/// `sleep 60`, a child of this test, killed when dropped.
struct Sleeper(Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(Command::new("sleep").arg("60").spawn().unwrap())
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tables() -> Vec<ProcessTable> {
    let mut out = vec![ProcessTable::new(Backend::Procfs).unwrap()];
    match ProcessTable::new(Backend::Bpf) {
        Ok(t) => out.push(t),
        Err(e) if std::env::var_os("SPAWNKIT_REQUIRE_BPF").is_some_and(|v| v == "1") => {
            panic!("SPAWNKIT_REQUIRE_BPF=1 but BPF is not available: {e}")
        }
        Err(_) => {}
    }
    out
}

fn pids(procs: &[Process]) -> Vec<i32> {
    let mut v: Vec<i32> = procs.iter().map(|p| p.pid).collect();
    v.sort_unstable();
    v
}

#[test]
fn selectors_add_up_on_the_live_table() {
    let me = std::process::id() as i32;
    let (a, b) = (Sleeper::start(), Sleeper::start());
    let mut children = vec![a.pid(), b.pid()];
    children.sort_unstable();
    for mut t in tables() {
        let fields = Fields::default();
        let list = |t: &mut ProcessTable, s: &Selection| pids(&s.list(t, fields).unwrap());

        // -p ME --ppid ME: me and my children (the union, as procps).
        let s = Selection::all().pids([me]).unwrap().ppids([me]).unwrap();
        let mut want = vec![me];
        want.extend(&children);
        want.sort_unstable();
        assert_eq!(list(&mut t, &s), want, "{:?}", t.backend());

        // tree_of: me and all my descendants; with -p 1 added, pid 1 too.
        let s = Selection::all().tree_of([me]).unwrap();
        assert_eq!(list(&mut t, &s), want);
        let s = s.pids([1]).unwrap();
        let mut with_init = vec![1];
        with_init.extend(&want);
        assert_eq!(list(&mut t, &s), with_init);

        // No selector: every process, me and init included.
        let every = list(&mut t, &Selection::all());
        assert!(every.contains(&1) && every.contains(&me) && every.len() > want.len());

        // ppid 0: the processes without a parent (init, kthreadd), nothing else.
        let orphans = Selection::all().ppids([0]).unwrap().list(&mut t, fields).unwrap();
        assert!(orphans.iter().any(|p| p.pid == 1));
        assert!(orphans.iter().all(|p| p.ppid == 0), "{orphans:?}");

        // A pid that does not exist selects nothing, and takes nothing away.
        let gone = 4_194_305; // above the largest pid_max (2^22)
        assert!(list(&mut t, &Selection::all().pids([gone]).unwrap()).is_empty());
        let s = Selection::all().pids([gone, a.pid()]).unwrap();
        assert_eq!(list(&mut t, &s), [a.pid()]);
        let s = Selection::all().tree_of([gone]).unwrap().ppids([gone]).unwrap();
        assert!(list(&mut t, &s).is_empty());
    }
}

#[test]
fn a_uid_selector_reads_the_uid() {
    let me = std::process::id() as i32;
    let euid = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Uid:")
                .map(|r| r.split_whitespace().nth(1).unwrap().parse::<u32>().unwrap())
        })
        .unwrap();
    for mut t in tables() {
        let got = Selection::all().uids([euid]).list(&mut t, Fields::default()).unwrap();
        assert!(got.iter().any(|p| p.pid == me), "{:?}", t.backend());
        assert!(got.iter().all(|p| p.uid == Some(euid)));
    }
}
