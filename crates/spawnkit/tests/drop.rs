//! Dropping a Child never leaves a zombie for long: an exited child is reaped on drop, a
//! running one is reaped by the next spawn after it exits, and kill_on_drop kills and reaps.
//!
//! The tests hold a lock: they look at every child of this process.

mod common;

use std::time::Duration;

use common::{children_of_self, probe_cmd, proc_state, serial, wait_until, zombie_children};
use spawnkit::Strategy;

const LONG: Duration = Duration::from_secs(30);

#[test]
fn drop_after_exit_reaps_at_once() {
    let _g = serial();
    for s in Strategy::ALL {
        let child = probe_cmd(s, ["exit", "3"]).spawn().unwrap();
        let pid = child.id();
        assert!(wait_until(LONG, || proc_state(pid) == Some('Z')), "{s}: never exited");
        drop(child);
        assert_eq!(proc_state(pid), None, "{s}: /proc/{pid} still there after drop");
        assert_eq!(zombie_children(), Vec::<u32>::new(), "{s}");
    }
}

#[test]
fn a_running_dropped_child_is_reaped_by_the_next_spawn() {
    let _g = serial();
    for s in Strategy::ALL {
        let child = probe_cmd(s, ["sleep", "0.3"]).spawn().unwrap();
        let pid = child.id();
        drop(child);
        assert!(matches!(proc_state(pid), Some(c) if c != 'Z'), "{s}: should still run");
        assert_eq!(spawnkit::reap_orphans(), 1, "{s}: one orphan still running");
        // It exits and stays a zombie until someone reaps it...
        assert!(wait_until(LONG, || proc_state(pid) == Some('Z')), "{s}: never exited");
        assert_eq!(zombie_children(), [pid], "{s}");
        // ...which the next spawn does, whatever its strategy.
        let status = probe_cmd(Strategy::CloneVfork, ["exit", "0"]).status().unwrap();
        assert!(status.success());
        assert_eq!(proc_state(pid), None, "{s}: orphan {pid} not reaped by the next spawn");
        assert_eq!(spawnkit::reap_orphans(), 0, "{s}");
        assert_eq!(children_of_self(), [], "{s}");
    }
}

#[test]
fn reap_orphans_reaps_without_a_spawn() {
    let _g = serial();
    for s in Strategy::ALL {
        let child = probe_cmd(s, ["sleep", "0.2"]).spawn().unwrap();
        let pid = child.id();
        drop(child);
        assert!(wait_until(LONG, || proc_state(pid) == Some('Z')), "{s}: never exited");
        assert_eq!(spawnkit::reap_orphans(), 0, "{s}");
        assert_eq!(proc_state(pid), None, "{s}");
    }
}

#[test]
fn kill_on_drop_kills_and_reaps() {
    let _g = serial();
    for s in Strategy::ALL {
        let child = probe_cmd(s, ["sleep", "30"]).kill_on_drop(true).spawn().unwrap();
        let pid = child.id();
        assert!(matches!(proc_state(pid), Some(c) if c != 'Z'), "{s}");
        drop(child);
        assert_eq!(proc_state(pid), None, "{s}: /proc/{pid} still there after drop");
        assert_eq!(spawnkit::reap_orphans(), 0, "{s}: a killed child is no orphan");
        assert_eq!(children_of_self(), [], "{s}");
    }
}

#[test]
fn many_dropped_children_all_get_reaped() {
    let _g = serial();
    let mut pids = Vec::new();
    for i in 0..12 {
        let s = Strategy::ALL[i % 3];
        let child = probe_cmd(s, ["sleep", "0.2"]).spawn().unwrap();
        pids.push(child.id());
    }
    assert!(wait_until(LONG, || pids.iter().all(|&p| proc_state(p) == Some('Z'))));
    probe_cmd(Strategy::CloneVfork, ["exit", "0"]).status().unwrap();
    for p in &pids {
        assert_eq!(proc_state(*p), None, "{p} not reaped");
    }
    assert_eq!(children_of_self(), []);
}
