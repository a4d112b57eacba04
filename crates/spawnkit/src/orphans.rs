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

/// In a freshly forked process about to close every inherited fd (a private spawn server):
/// forget the parent's list without closing anything. Its fd numbers are about to be closed
/// and reused for the new process's own files, which a later `reap` would otherwise close.
/// The lock is only tried: another thread of the parent may have held it at the fork (it
/// then stays held here, and with the count at zero `reap` never takes it; a spawn server
/// never adopts orphans of its own).
pub(crate) fn forget_inherited() {
    let list = match ORPHANS.try_lock() {
        Ok(list) => Some(list),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    };
    if let Some(mut list) = list {
        for fd in list.drain(..) {
            let _ = std::os::fd::IntoRawFd::into_raw_fd(fd);
        }
    }
    COUNT.store(0, Ordering::Relaxed);
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
