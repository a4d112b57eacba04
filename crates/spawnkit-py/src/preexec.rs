//! `preexec_fn`: Python code in the fork()ed child, with CPython's semantics.
//!
//! The engine runs the hook after every other step, closing the other fds included. CPython
//! closes fds *after* its `preexec_fn`, so fds the hook opens are closed at exec when
//! `close_fds` is on: after the call every fd but 0-2 and the kept ones is marked
//! close-on-exec. (An environment change made by the hook does not reach the child: the engine
//! built the child's environment before the fork; see the README.)
//!
//! A Python exception is reported as [`RAISED`].

use std::io;

use pyo3::ffi;
use pyo3::prelude::*;

/// The errno the hook reports when `preexec_fn` raised (not a real errno).
pub(crate) const RAISED: i32 = -1;

/// Everything the hook needs, prepared in the parent before the fork.
pub(crate) struct Preexec {
    pub f: Py<PyAny>,
    /// Mark fds close-on-exec after the hook, except 0-2 and these (sorted).
    pub close_fds_except: Option<Vec<i32>>,
    /// Also spare every fd open (and not close-on-exec) when the hook starts: the engine has
    /// closed the others by then, and a lock's fd number is only known to the engine.
    pub keep_open_at_entry: bool,
}

impl Preexec {
    /// Runs in the fork()ed child: recover the interpreter, call `preexec_fn`, then what
    /// CPython's child does after it.
    pub(crate) fn run(&self) -> io::Result<()> {
        // SAFETY: called in the fork()ed child on the thread that held the GIL at the fork
        // (spawn keeps it for a preexec_fn), exactly where CPython's _posixsubprocess calls it.
        unsafe { ffi::PyOS_AfterFork_Child() };
        let open_at_entry = match &self.close_fds_except {
            Some(keep) if self.keep_open_at_entry => {
                let mut all = inheritable_fds();
                all.extend_from_slice(keep);
                all.sort_unstable();
                all.dedup();
                Some(all)
            }
            _ => None,
        };
        let ok = Python::attach(|py| self.f.call0(py).is_ok());
        if !ok {
            // The exception is not shown (formatting it could deadlock, as CPython notes);
            // the parent raises SubprocessError("Exception occurred in preexec_fn.").
            return Err(io::Error::from_raw_os_error(RAISED));
        }
        if let Some(keep) = open_at_entry.as_ref().or(self.close_fds_except.as_ref()) {
            cloexec_all_but(keep);
        }
        Ok(())
    }
}

/// The open fds above 2 without close-on-exec: from /proc/self/fd, or where it cannot be read
/// (a chroot without /proc) by asking every number below RLIMIT_NOFILE (at most 65536).
fn inheritable_fds() -> Vec<i32> {
    let candidates: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&fd| fd > 2)
            .collect(),
        Err(_) => {
            let max = match spawnkit::process::nofile_limit() {
                Ok((soft, _)) => soft.min(65536) as i32,
                Err(_) => 1024,
            };
            (3..max).collect()
        }
    };
    candidates
        .into_iter()
        .filter(|&fd| {
            // EBADF if it is not open, as the directory's own fd, closed by now.
            matches!(spawnkit::process::fd_flags(fd), Ok(flags) if flags & libc::FD_CLOEXEC == 0)
        })
        .collect()
}

/// close_range(first, last, CLOSE_RANGE_CLOEXEC) over the gaps between 0-2 and `keep`.
fn cloexec_all_but(keep: &[i32]) {
    let mut first: u32 = 3;
    let mut ranges = Vec::new();
    for &k in keep {
        let k = k as u32;
        if k >= first {
            if k > first {
                ranges.push((first, k - 1));
            }
            first = k + 1;
        }
    }
    ranges.push((first, u32::MAX));
    for (lo, hi) in ranges {
        if spawnkit::process::cloexec_range(lo, hi).is_err() {
            cloexec_slow(lo, hi);
        }
    }
}

/// Kernels before 5.11: set FD_CLOEXEC on each open fd in [lo, hi] from /proc/self/fd.
fn cloexec_slow(lo: u32, hi: u32) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&fd| (lo..=hi).contains(&(fd as u32)))
        .collect();
    for fd in fds {
        // EBADF if it was the directory's own fd, already closed.
        let _ = spawnkit::process::set_cloexec(fd);
    }
}
