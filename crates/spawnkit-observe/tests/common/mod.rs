//! Shared helpers for spawnkit-observe's integration tests: the fixtures (probe, process tree,
//! shared memory, /proc read independently) and the few helpers of spawnkit's own tests that
//! the observation tests use too.
//!
//! Every test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::fs;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The probe, the process tree and shared-memory fixtures, /proc read independently: the
/// file that spawnkit's tests and the `spawnkit` binary's tests include too.
pub mod fixtures;

#[allow(unused_imports)]
pub use fixtures::{is_root, probe};

/// The state letter of a process (`R`, `S`, `Z`...) from /proc/PID/stat; None once gone.
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().next()?.chars().next()
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
