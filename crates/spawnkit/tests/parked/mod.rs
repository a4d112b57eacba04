//! A spawn server's children as the tests see them from outside, through /proc: all of them,
//! and those parked in its pool (made ahead of time, waiting for a request). Shared by
//! spawnkit's serve_pool tests and the CLI's serve tests (included there by path).

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Every child of the server process, of every thread of it (a spawner thread's children
/// are listed under its own task).
pub fn all_children(server: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{server}/task"))
        .map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect::<Vec<_>>())
        .unwrap_or_default();
    tasks
        .iter()
        .flat_map(|t| {
            std::fs::read_to_string(t.join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Whether `child` shares the server's memory (kcmp KCMP_VM): a parked pool child, or a
/// spawned one before its exec.
pub fn is_parked(server: u32, child: u32) -> bool {
    const KCMP_VM: i32 = 1;
    // SAFETY: kcmp takes integers only.
    let r = unsafe {
        libc::syscall(libc::SYS_kcmp, server as libc::pid_t, child as libc::pid_t, KCMP_VM, 0, 0)
    };
    r == 0
}

/// The server's parked pool children.
pub fn parked(server: u32) -> Vec<u32> {
    all_children(server).into_iter().filter(|&c| is_parked(server, c)).collect()
}

/// Wait (up to 10 s) until the server's pools are full: the same children parked for 200 ms.
#[track_caller]
pub fn wait_pool_full(server: u32) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut last, mut since) = (Vec::new(), Instant::now());
    loop {
        let mut p = parked(server);
        p.sort_unstable();
        if p != last {
            (last, since) = (p, Instant::now());
        } else if !p.is_empty() && since.elapsed() >= Duration::from_millis(200) {
            return p;
        }
        assert!(Instant::now() < deadline, "the pool never filled: {last:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
