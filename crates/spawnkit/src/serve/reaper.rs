//! The children of a server that owns its process, reaped by the server itself: on SIGCHLD
//! (a signalfd in the loop's epoll set), `waitid(P_ALL, WNOHANG)` until none has ended. Each
//! child is known by its pid from its spawn on, so the child of a status request needs no
//! pidfd (none is made: no file to allocate, watch, read and close per child), and a
//! client's pidfd has its child's exit status once the server has reaped it
//! (`PIDFD_INFO_EXIT`, recorded at the reap).
//!
//! A child may end, and be reaped, before the thread that spawned it has registered it (the
//! few microseconds between its clone and the registration). Each spawn holds a [`Ticket`]
//! from before its clone to its registration, with a pid slot that the kernel fills with the
//! child's pid as it makes the child, before the child can run (`CLONE_PARENT_SETTID`; the
//! pool fills it before it wakes a parked child): a reaped pid that no registered child has
//! is looked for in the slots of the spawns under way, and its status kept for that spawn's
//! registration, the slot emptied. A pid in no slot is a child no spawn will register (one
//! whose spawn failed before its exec and was reaped before the spawn marked it, a parked
//! pool child that died): nothing is kept. A spawn whose child failed before its exec with no
//! pidfd (a bare spawn's) marks it in its slot, the pid negated: it is known from then on, as
//! a registered child with no answer, and reaped by pid even while the reaper is pinned. Pids
//! are reused, but a pid in a slot is that spawn's child's until the child is reaped (by the
//! reaper, which empties the slot; or, for a spawn that failed or a parked child that could
//! not be woken, through its pidfd by the spawning thread, which empties it too), so a status
//! is never given to the wrong spawn.
//!
//! A spawn whose child's pid cannot be known that early (posix_spawn, which is followed by a
//! `pidfd_open` by pid, and glibc waits by pid for a child that failed; glibc's fork; the
//! clone(2) fallback) pins the reaper instead: while it is under way only the children the
//! reaper knows are reaped, by pid (SIGCHLD is raised again when the last pin goes, so the
//! loop reaps the rest then). The clone-vfork and fork-exec strategies' clone3 fill the slot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::sys::pidfd::{self, Ended};

/// The server's children by pid, each with what its end must answer (`T`; `None` for a
/// child whose client holds its pidfd and learns its end there).
pub(crate) struct Reaper<T> {
    state: Mutex<State<T>>,
}

struct State<T> {
    /// Spawned, registered, not reaped yet.
    live: HashMap<i32, Option<T>>,
    /// Spawns under way (a [`Ticket`] taken, not yet registered or dropped): a handful, one
    /// per spawning thread at most.
    spawning: Vec<Spawning>,
    next_ticket: u64,
    /// Spawns that pinned the reaper, under way.
    pins: usize,
    /// A reap was put off by a pin: SIGCHLD is raised again when the last pin goes.
    put_off: bool,
}

struct Spawning {
    ticket: u64,
    /// The pid of the child this spawn made (0 until it is known); negated once the child
    /// failed before its exec and is left to the reaper (a bare spawn's: no pidfd to reap it
    /// with). Such a child is known to the reaper as any registered one: reaped by its pid
    /// with no answer.
    slot: Arc<AtomicI32>,
    /// A child of this slot reaped before the registration: its pid and how it ended.
    reaped: Option<(i32, Ended)>,
}

impl<T> State<T> {
    /// A child reaped: its registered answer to `out`, or its status kept for the spawn
    /// under way whose slot holds its pid.
    fn record(&mut self, pid: i32, ended: Ended, out: &mut Vec<(i32, T, Ended)>) {
        match self.live.remove(&pid) {
            Some(Some(what)) => out.push((pid, what, ended)),
            Some(None) => {}
            None => {
                // A spawn under way made it, or none will register it. Its slot is emptied
                // as its status is kept (so that another spawn's child, given the pid later,
                // is never taken for it); unless the spawn has made another child since (a
                // parked child that could not be woken, then a clone), whose pid the slot
                // holds now.
                // A slot that holds the pid negated is a failed spawn's child (see
                // `Spawning::slot`): reaped, nothing kept.
                for s in &mut self.spawning {
                    let (acq, rel) = (Ordering::AcqRel, Ordering::Acquire);
                    if s.slot.compare_exchange(pid, 0, acq, rel).is_ok() {
                        s.reaped = Some((pid, ended));
                        break;
                    }
                    if s.slot.compare_exchange(-pid, 0, acq, rel).is_ok() {
                        break;
                    }
                }
            }
        }
    }
}

/// What became of a registration ([`Ticket::register`]).
pub(crate) enum Registered<T> {
    /// Kept: answered when the child is reaped.
    Kept,
    /// Reaped already: answer now with how it ended.
    Ended(Option<T>, Ended),
    /// Its answer has nobody to go to (`gone`): kept with no answer; what it was.
    Dropped(T),
}

/// A spawn under way, taken before its clone: its pid slot (see [`Ticket::slot`]).
/// Dropped unregistered (the spawn failed, or panicked), it ends the spawn's claim.
pub(crate) struct Ticket<'a, T> {
    reaper: &'a Reaper<T>,
    ticket: u64,
    slot: Arc<AtomicI32>,
    pinned: bool,
    over: bool,
}

impl<T> Reaper<T> {
    pub(crate) fn new() -> Reaper<T> {
        Reaper {
            state: Mutex::new(State {
                live: HashMap::new(),
                spawning: Vec::new(),
                next_ticket: 0,
                pins: 0,
                put_off: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A spawn begins (before its clone).
    pub(crate) fn ticket(&self) -> Ticket<'_, T> {
        let slot = Arc::new(AtomicI32::new(0));
        let mut st = self.lock();
        st.next_ticket += 1;
        let ticket = st.next_ticket;
        st.spawning.push(Spawning { ticket, slot: slot.clone(), reaped: None });
        Ticket { reaper: self, ticket, slot, pinned: false, over: false }
    }

    /// Reap every child that has ended; for each registered one with something to answer,
    /// push (pid, what, how it ended) to `out`. While a spawn has pinned the reaper, only
    /// the children it knows (registered, failed spawns' marked in their slots, or in a
    /// spawn's slot) are reaped, each by its pid; the others (a pinned spawn's own, a parked
    /// child that died, a failed child with a pidfd that its spawn reaps) when the last pin
    /// goes.
    pub(crate) fn reap(&self, out: &mut Vec<(i32, T, Ended)>) {
        if self.reap_known(out) {
            return;
        }
        loop {
            // Under the lock from the reap to the record: a registration of the pid comes
            // before it or after it, never between.
            let mut st = self.lock();
            if st.pins > 0 {
                st.put_off = true;
                return;
            }
            // ECHILD (no child at all) ends it, as "none has ended" does; any other error
            // (none is documented for these arguments) too: the next SIGCHLD tries again.
            let Ok(Some((pid, ended))) = pidfd::waitid(libc::P_ALL, 0, true) else { return };
            st.record(pid, ended, out);
        }
    }

    /// While pinned: reap the registered children and those in the slots of spawns under
    /// way, each by its pid (only the reaper reaps them: the pid is still theirs), and put
    /// the rest off; true. Not pinned: false (nothing done).
    fn reap_known(&self, out: &mut Vec<(i32, T, Ended)>) -> bool {
        let mut st = self.lock();
        if st.pins == 0 {
            return false;
        }
        st.put_off = true;
        let slots = st.spawning.iter().map(|s| s.slot.load(Ordering::Acquire).saturating_abs());
        let mut known: Vec<i32> = st.live.keys().copied().chain(slots).filter(|&p| p > 0).collect();
        known.sort_unstable();
        known.dedup();
        for pid in known {
            // Still known (not reaped earlier in this scan, its pid free for another since).
            // (A failed spawn's child is in its slot negated.)
            let in_slot =
                st.spawning.iter().any(|s| s.slot.load(Ordering::Acquire).saturating_abs() == pid);
            if !st.live.contains_key(&pid) && !in_slot {
                continue;
            }
            if let Ok(Some((pid, ended))) = pidfd::waitid(libc::P_PID, pid as libc::id_t, true) {
                st.record(pid, ended, out);
            }
        }
        true
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

    /// End the spawn of `ticket` (registered or not): what the reaper kept for it.
    fn spawn_over(st: &mut State<T>, ticket: u64, pinned: bool) -> Option<Spawning> {
        let at = st.spawning.iter().position(|s| s.ticket == ticket);
        let spawning = at.map(|i| st.spawning.swap_remove(i));
        // Its failed child, not reaped yet (the slot still holds its pid negated): known from
        // now on as a registered child with no answer.
        let failed = spawning.as_ref().map_or(0, |s| s.slot.load(Ordering::Acquire));
        if failed < 0 {
            st.live.entry(-failed).or_insert(None);
        }
        if pinned {
            st.pins -= 1;
        }
        spawning
    }
}

/// SIGCHLD to this process again: a reap put off by a pin happens now (it is blocked in
/// every thread of a server with a reaper: the loop's signalfd takes it).
fn reap_again() {
    crate::sys::this_process::signal_self(libc::SIGCHLD);
}

impl<T> Ticket<'_, T> {
    /// Where this spawn's child's pid goes as the child is made (see
    /// `sys::clone::with_pid_slot`).
    pub(crate) fn slot(&self) -> &AtomicI32 {
        &self.slot
    }

    /// No reap until this spawn is registered or dropped: for a spawn whose child's pid is
    /// known only after the child may have ended (posix_spawn, glibc's fork, clone(2)).
    pub(crate) fn pin(&mut self) {
        if !self.pinned {
            self.reaper.lock().pins += 1;
            self.pinned = true;
        }
    }

    /// Register the child `pid` this spawn made, with what its end must answer (`gone`, read
    /// under the reaper's lock: its answer has nobody to go to any more).
    pub(crate) fn register(
        mut self,
        pid: i32,
        what: Option<T>,
        gone: impl FnOnce() -> bool,
    ) -> Registered<T> {
        self.over = true;
        let mut st = self.reaper.lock();
        let spawning = Reaper::spawn_over(&mut st, self.ticket, self.pinned);
        let again = self.pinned && st.pins == 0 && std::mem::take(&mut st.put_off);
        // Kept for this pid, and the slot emptied by that reap since (a slot that holds the
        // pid again is a later child's, not reaped yet).
        let reaped = spawning
            .filter(|s| s.slot.load(Ordering::Acquire) == 0)
            .and_then(|s| s.reaped)
            .filter(|&(p, _)| p == pid);
        let result = match (reaped, what) {
            (Some((_, ended)), what) => Registered::Ended(what, ended),
            (None, Some(what)) if gone() => {
                st.live.insert(pid, None);
                Registered::Dropped(what)
            }
            (None, what) => {
                let before = st.live.insert(pid, what);
                debug_assert!(before.is_none(), "pid {pid} registered twice");
                Registered::Kept
            }
        };
        drop(st);
        if again {
            reap_again();
        }
        result
    }
}

impl<T> Drop for Ticket<'_, T> {
    fn drop(&mut self) {
        if self.over {
            return;
        }
        let mut st = self.reaper.lock();
        Reaper::spawn_over(&mut st, self.ticket, self.pinned);
        let again = self.pinned && st.pins == 0 && std::mem::take(&mut st.put_off);
        drop(st);
        if again {
            reap_again();
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code)] // fork, kill, waitpid, _exit: the test's own children, in a forked child
mod tests {
    use super::*;
    use crate::sys::test_children::{fork_exit, fork_paused, kill_and_reap};
    use std::time::Duration;

    /// A child of this process with pid `want`, made by `fork` (ns_last_pid set just before,
    /// tried again if another process of the machine took the pid first); `None` when the
    /// pid cannot be chosen here (not root, no such file).
    fn fork_with_pid(want: i32, fork: impl Fn() -> i32) -> Option<i32> {
        for _ in 0..50 {
            std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", want - 1)).ok()?;
            let pid = fork();
            if pid == want {
                return Some(pid);
            }
            kill_and_reap(pid);
        }
        None
    }

    /// Run `scenario` in a forked child of the test process (whose other threads' children
    /// the reaper's `waitid(P_ALL)` must not take): Ok, skipped (with the reason), or the
    /// failure as a panic here.
    fn in_forked_child(scenario: fn() -> Result<(), String>) {
        let (r, w) = crate::sys::parent::pipe().expect("pipe");
        // SAFETY: the child runs the scenario (system calls, allocations) and leaves with
        // _exit; no lock of another thread is taken in it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let (code, msg) = match std::panic::catch_unwind(scenario) {
                Ok(Ok(())) => (0, String::new()),
                Ok(Err(skip)) => (2, skip),
                Err(_) => (1, "panicked".to_string()),
            };
            crate::sys::parent::write_all(std::os::fd::AsRawFd::as_raw_fd(&w), msg.as_bytes());
            // SAFETY: leave the forked child without the harness's atexit.
            unsafe { libc::_exit(code) };
        }
        drop(w);
        let mut msg = vec![0u8; 4096];
        let n = crate::sys::parent::read_some(std::os::fd::AsRawFd::as_raw_fd(&r), &mut msg);
        let msg = String::from_utf8_lossy(&msg[..n]).into_owned();
        let mut status = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        match libc::WEXITSTATUS(status) {
            0 => {}
            2 => eprintln!("skipped: {msg}"),
            _ => panic!("the scenario failed: {msg} (status {status:#x})"),
        }
    }

    /// The state letter of process `pid` (None: gone).
    fn proc_state(pid: i32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat[stat.rfind(')')? + 1..].split_whitespace().next()?.chars().next()
    }

    fn settle() {
        std::thread::sleep(Duration::from_millis(30));
    }

    /// A spawn began (its ticket), then, before its clone, a child no spawn registers was
    /// reaped (a failed spawn's, a parked child that died), and the spawn's clone was given
    /// the same pid: that spawn is answered with its own child's end, never the earlier
    /// process's.
    #[test]
    fn a_pid_reaped_before_a_spawns_clone_is_not_taken_for_its_child() {
        in_forked_child(|| {
            let reaper: Reaper<u32> = Reaper::new();
            let ticket = reaper.ticket();
            let old = fork_exit(7);
            settle();
            let mut out = Vec::new();
            reaper.reap(&mut out);
            if !out.is_empty() {
                return Err(format!("an unregistered child answered for: {:?}", out.len()));
            }
            let Some(pid) = fork_with_pid(old, fork_paused) else {
                return Err("ns_last_pid not writable".into());
            };
            ticket.slot().store(pid, Ordering::Release); // as CLONE_PARENT_SETTID does
            if !matches!(ticket.register(pid, Some(1), || false), Registered::Kept) {
                panic!("answered with the earlier process's status");
            }
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            settle();
            reaper.reap(&mut out);
            let got: Vec<_> = out.iter().map(|&(p, w, e)| (p, w, e)).collect();
            let killed = Ended::Signaled { signal: libc::SIGKILL, core: false };
            assert_eq!(got, vec![(pid, 1, killed)]);
            Ok(())
        });
    }

    /// While a spawn has pinned the reaper (a posix_spawn or a fork under way, which may
    /// take as long as a child stopped before its exec), the children it knows are still
    /// reaped, each by its pid: a registered one, and one in another spawn's slot. A child
    /// it does not know (a parked child that died) waits for the pin to go.
    #[test]
    fn a_pinned_reaper_still_reaps_the_children_it_knows() {
        in_forked_child(|| {
            let reaper: Reaper<u32> = Reaper::new();
            let mut pinned = reaper.ticket();
            pinned.pin();
            let registered = reaper.ticket();
            let c1 = fork_exit(1);
            assert!(matches!(registered.register(c1, Some(1), || false), Registered::Kept));
            let in_slot = reaper.ticket();
            let c2 = fork_exit(2);
            in_slot.slot().store(c2, Ordering::Release);
            let unknown = fork_exit(3);
            settle();
            let mut out = Vec::new();
            reaper.reap(&mut out);
            assert_eq!(
                out.iter().map(|&(p, w, e)| (p, w, e)).collect::<Vec<_>>(),
                vec![(c1, 1, Ended::Exited(1))]
            );
            match in_slot.register(c2, Some(2), || false) {
                Registered::Ended(Some(2), Ended::Exited(2)) => {}
                _ => panic!("the child in a slot was not reaped for its spawn"),
            }
            assert_eq!(proc_state(unknown), Some('Z'), "put off");
            drop(pinned);
            reaper.reap(&mut out);
            assert_eq!(proc_state(unknown), None, "reaped after the pin");
            Ok(())
        });
    }

    /// A spawn's child was reaped before the spawn registered it, and its pid was given to
    /// another spawn's child, which also ended before its registration: each spawn is
    /// answered with its own child's end.
    #[test]
    fn a_pid_given_again_is_not_taken_for_the_first_child_that_had_it() {
        in_forked_child(|| {
            let reaper: Reaper<u32> = Reaper::new();
            let first = reaper.ticket();
            let c1 = fork_exit(3);
            first.slot().store(c1, Ordering::Release);
            settle();
            let mut out = Vec::new();
            reaper.reap(&mut out);
            let second = reaper.ticket();
            let Some(c2) = fork_with_pid(c1, || fork_exit(5)) else {
                return Err("ns_last_pid not writable".into());
            };
            second.slot().store(c2, Ordering::Release);
            settle();
            reaper.reap(&mut out);
            assert!(out.is_empty());
            match first.register(c1, Some(1), || false) {
                Registered::Ended(Some(1), Ended::Exited(3)) => {}
                _ => panic!("the first spawn was not answered with its own child's end"),
            }
            match second.register(c2, Some(2), || false) {
                Registered::Ended(Some(2), Ended::Exited(5)) => {}
                _ => panic!("the second spawn was not answered with its own child's end"),
            }
            Ok(())
        });
    }

    /// A bare spawn's child that failed before its exec is left to the reaper (its slot
    /// holds the pid negated, as `sys::clone::note_failed` marks it). While another spawn
    /// has pinned the reaper, it is reaped by its pid all the same: after its spawn has
    /// ended (known from then on, as a registered child with no answer), and while it is
    /// still under way (in its slot). Nothing is answered for either.
    #[test]
    fn a_failed_spawns_child_is_reaped_while_the_reaper_is_pinned() {
        in_forked_child(|| {
            let reaper: Reaper<u32> = Reaper::new();
            let mut pinned = reaper.ticket();
            pinned.pin();
            let failed = reaper.ticket();
            let c1 = fork_exit(127);
            failed.slot().store(-c1, Ordering::Release);
            drop(failed); // the spawn failed: no registration
            let under_way = reaper.ticket();
            let c2 = fork_exit(126);
            under_way.slot().store(-c2, Ordering::Release);
            settle();
            let mut out = Vec::new();
            reaper.reap(&mut out);
            assert!(out.is_empty(), "a failed spawn's child answered for");
            assert_eq!(proc_state(c1), None, "a failed spawn's child left a zombie while pinned");
            assert_eq!(proc_state(c2), None, "a child in a failed slot left while pinned");
            assert_eq!(under_way.slot().load(Ordering::Acquire), 0, "the slot emptied");
            drop(under_way);
            drop(pinned);
            assert!(reaper.lock().live.is_empty(), "a reaped child still known");
            Ok(())
        });
    }
}
