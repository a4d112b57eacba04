//! Children whose [`Child`](crate::Child) was dropped while they still ran. Each later spawn
//! reaps the ones that have exited (WNOHANG through their pidfds), as CPython's
//! `subprocess._cleanup` does, so a dropped child is a zombie at most until the next spawn.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::sys::pidfd;

static ORPHANS: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());
static COUNT: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn adopt(pidfd: OwnedFd) {
    let mut list = ORPHANS.lock().unwrap_or_else(|e| e.into_inner());
    list.push(pidfd);
    COUNT.store(list.len(), Ordering::Relaxed);
}

/// Reap the dropped children that have exited; returns how many still run.
pub(crate) fn reap() -> usize {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let mut list = ORPHANS.lock().unwrap_or_else(|e| e.into_inner());
    // Keep those still running; drop (close) those reaped or no longer ours (ECHILD).
    list.retain(|fd| matches!(pidfd::wait(fd.as_fd(), true), Ok(None)));
    COUNT.store(list.len(), Ordering::Relaxed);
    list.len()
}
