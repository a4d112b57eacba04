//! The children of a server that owns its process, reaped by the server itself: on SIGCHLD
//! (a signalfd in the loop's epoll set), `waitid(P_ALL, WNOHANG)` until none has ended. Each
//! child is known by its pid from its spawn on, so the child of a status request needs no
//! pidfd (none is made: no file to allocate, watch, read and close per child), and a
//! client's pidfd has its child's exit status once the server has reaped it
//! (`PIDFD_INFO_EXIT`, recorded at the reap).
//!
//! A child may end, and be reaped, before the thread that spawned it has registered it (the
//! few microseconds between its clone and the registration): its status waits in `early`
//! until the registration takes it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::sys::pidfd::{self, Ended};

/// How long the status of a child reaped before its registration is kept for it. No spawn
/// registers such a child after that: one that failed before its exec (its spawn answered
/// with the error), a parked pool child that died. Forgotten then.
const EARLY_KEPT: Duration = Duration::from_secs(60);

/// The server's children by pid, each with what its end must answer (`T`; `None` for a
/// child whose client holds its pidfd and learns its end there).
pub(crate) struct Reaper<T> {
    state: Mutex<State<T>>,
}

struct State<T> {
    /// Spawned, registered, not reaped yet.
    live: HashMap<i32, Option<T>>,
    /// Reaped before their registration: how they ended, and when they were reaped.
    early: HashMap<i32, (Ended, Instant)>,
}

impl<T> Reaper<T> {
    pub(crate) fn new() -> Reaper<T> {
        Reaper { state: Mutex::new(State { live: HashMap::new(), early: HashMap::new() }) }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register the child `pid`, just spawned, with what its end must answer. If it has been
    /// reaped already: `Err` with that and how it ended (answer it now; it is not kept).
    pub(crate) fn register(&self, pid: i32, what: Option<T>) -> Result<(), (Option<T>, Ended)> {
        let mut st = self.lock();
        match st.early.remove(&pid) {
            Some((ended, _)) => Err((what, ended)),
            None => {
                st.live.insert(pid, what);
                Ok(())
            }
        }
    }

    /// Reap every child that has ended; for each registered one with something to answer,
    /// push (pid, what, how it ended) to `out`.
    pub(crate) fn reap(&self, out: &mut Vec<(i32, T, Ended)>) {
        let now = Instant::now();
        // ECHILD (no child at all) ends it, as "none has ended" does; any other error (none
        // is documented for these arguments) too: the next SIGCHLD tries again.
        while let Ok(Some((pid, ended))) = pidfd::waitid(libc::P_ALL, 0, true) {
            let mut st = self.lock();
            match st.live.remove(&pid) {
                Some(Some(what)) => out.push((pid, what, ended)),
                Some(None) => {}
                None => {
                    st.early.insert(pid, (ended, now));
                }
            }
        }
        let mut st = self.lock();
        if !st.early.is_empty() {
            st.early.retain(|_, (_, at)| now.saturating_duration_since(*at) < EARLY_KEPT);
        }
    }
}
