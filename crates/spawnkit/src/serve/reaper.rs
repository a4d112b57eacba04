//! The children of a server that owns its process, reaped by the server itself: on SIGCHLD
//! (a signalfd in the loop's epoll set), `waitid(P_ALL, WNOHANG)` until none has ended. Each
//! child is known by its pid from its spawn on, so the child of a status request needs no
//! pidfd (none is made: no file to allocate, watch, read and close per child), and a
//! client's pidfd has its child's exit status once the server has reaped it
//! (`PIDFD_INFO_EXIT`, recorded at the reap).
//!
//! A child may end, and be reaped, before the thread that spawned it has registered it (the
//! few microseconds between its clone and the registration): its status waits in `early`
//! until the registration takes it. Pids are reused, and some children are reaped that no
//! spawn registers (one that failed before its exec, whose spawn answered with the error; a
//! parked pool child that died), so an entry of `early` is only ever taken by a spawn that
//! began before that reap: each reap is numbered, and each spawn holds a [`Ticket`] with the
//! number of the last reap before it began. A spawn that began after a reap cannot have made
//! the child reaped then (its pid was still that child's, a zombie's, until the reap). An
//! entry that no spawn under way can take any more is dropped, so `early` holds only children
//! reaped while some spawn was under way.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use crate::sys::pidfd::{self, Ended};

/// The server's children by pid, each with what its end must answer (`T`; `None` for a
/// child whose client holds its pidfd and learns its end there).
pub(crate) struct Reaper<T> {
    state: Mutex<State<T>>,
}

struct State<T> {
    /// Spawned, registered, not reaped yet.
    live: HashMap<i32, Option<T>>,
    /// Reaped before their registration: how they ended, and the number of their reap.
    early: HashMap<i32, (Ended, u64)>,
    /// Children reaped so far: the number of the last reap.
    reaps: u64,
    /// Spawns under way (a [`Ticket`] taken, not yet registered or dropped), counted by the
    /// number of the last reap before each began.
    spawning: BTreeMap<u64, usize>,
}

impl<T> State<T> {
    fn spawn_over(&mut self, since: u64) {
        if let Some(n) = self.spawning.get_mut(&since) {
            *n -= 1;
            if *n == 0 {
                self.spawning.remove(&since);
            }
        }
    }
}

/// A spawn under way, taken before its clone: what lets its registration take the status of
/// its child if the reaper was first. Dropped unregistered (the spawn failed, or panicked),
/// it ends the spawn's claim.
pub(crate) struct Ticket<'a, T> {
    reaper: &'a Reaper<T>,
    since: u64,
    registered: bool,
}

impl<T> Reaper<T> {
    pub(crate) fn new() -> Reaper<T> {
        Reaper {
            state: Mutex::new(State {
                live: HashMap::new(),
                early: HashMap::new(),
                reaps: 0,
                spawning: BTreeMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A spawn begins (before its clone).
    pub(crate) fn ticket(&self) -> Ticket<'_, T> {
        let mut st = self.lock();
        let since = st.reaps;
        *st.spawning.entry(since).or_insert(0) += 1;
        Ticket { reaper: self, since, registered: false }
    }

    /// Reap every child that has ended; for each registered one with something to answer,
    /// push (pid, what, how it ended) to `out`.
    pub(crate) fn reap(&self, out: &mut Vec<(i32, T, Ended)>) {
        loop {
            // Under the lock from the reap to the record: a registration of the same pid
            // (reused at once) comes after it, never between.
            let mut st = self.lock();
            // ECHILD (no child at all) ends it, as "none has ended" does; any other error
            // (none is documented for these arguments) too: the next SIGCHLD tries again.
            let Ok(Some((pid, ended))) = pidfd::waitid(libc::P_ALL, 0, true) else { break };
            st.reaps += 1;
            let reap = st.reaps;
            match st.live.remove(&pid) {
                Some(Some(what)) => out.push((pid, what, ended)),
                Some(None) => {}
                None => {
                    st.early.insert(pid, (ended, reap));
                }
            }
        }
        let mut st = self.lock();
        // Only a spawn that began before a reap may take its entry: none under way began
        // before `floor`, and every later one begins after the last reap.
        let floor = st.spawning.keys().next().copied().unwrap_or(st.reaps);
        st.early.retain(|_, (_, reap)| *reap > floor);
    }

    /// Stop answering for the registered children `which` picks (their answers' connection
    /// is gone): they are reaped with no answer. How many there were.
    pub(crate) fn forget(&self, mut which: impl FnMut(&T) -> bool) -> usize {
        let mut st = self.lock();
        let mut n = 0;
        for what in st.live.values_mut() {
            if what.as_ref().is_some_and(&mut which) {
                *what = None;
                n += 1;
            }
        }
        n
    }
}

impl<T> Ticket<'_, T> {
    /// Register the child `pid` this spawn made, with what its end must answer. If it has
    /// been reaped already: `Err` with that and how it ended (answer it now; it is not kept).
    pub(crate) fn register(mut self, pid: i32, what: Option<T>) -> Result<(), (Option<T>, Ended)> {
        self.registered = true;
        let mut st = self.reaper.lock();
        st.spawn_over(self.since);
        match st.early.remove(&pid) {
            Some((ended, reap)) if reap > self.since => Err((what, ended)),
            // None, or another process's that had the pid before this spawn began.
            _ => {
                let before = st.live.insert(pid, what);
                debug_assert!(before.is_none(), "pid {pid} registered twice");
                Ok(())
            }
        }
    }
}

impl<T> Drop for Ticket<'_, T> {
    fn drop(&mut self) {
        if !self.registered {
            self.reaper.lock().spawn_over(self.since);
        }
    }
}
