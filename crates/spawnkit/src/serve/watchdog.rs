//! The spawn server's watchdog: a child that does not reach execve in time is killed.
//!
//! A clone+exec holds the thread that makes it until the child has exec'd. A client can stop
//! its own child in that window (SIGSTOP or ptrace on a pid it guessed: a child of a root
//! server's `--allow-uid` client runs as that client once its credentials step is done), and
//! the thread then waits for good: enough of those would leave the server no thread to spawn
//! with. So every thread that spawns says when it started (a [`Slot`]), and the watchdog, a
//! thread of its own, looks every so often: for a thread in a spawn for longer than the limit,
//! it kills that thread's children that have not exec'd yet (they still share the server's
//! address space), except the children parked in the thread's pool (sys/pool.rs), which wait
//! for a request and are not stuck. The spawn then fails with an error that says so. A spawn held up before
//! its clone is not the watchdog's to end: nothing there may wait (the gate refuses waiting
//! locks; a lock path is opened without blocking).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind};
use crate::sys::pool::{self, ParkedList};
use crate::sys::{pidfd, this_process};

/// How long a child may take from the clone to its execve, unless
/// `ServerOptions::exec_timeout` says otherwise.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(10);

/// One spawning thread, as the watchdog sees it.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    tid: AtomicI32,
    /// Milliseconds since the watchdog's epoch when the current spawn began, plus one (0: idle).
    since: AtomicU64,
    /// The watchdog killed this spawn's child.
    killed: AtomicBool,
}

thread_local! {
    static SLOT: RefCell<Option<(Arc<Slot>, Instant, Duration)>> = const { RefCell::new(None) };
}

/// The watchdog and the slots of the threads it watches.
pub(crate) struct Watchdog {
    slots: Mutex<Vec<Arc<Slot>>>,
    epoch: Instant,
    limit: Duration,
    stop: Mutex<bool>,
    wake: Condvar,
    /// The server's parked pool children (sys/pool.rs): waiting for a request, not stuck.
    parked: Arc<ParkedList>,
}

impl Watchdog {
    pub(crate) fn new(limit: Duration) -> Arc<Watchdog> {
        Arc::new(Watchdog {
            slots: Mutex::new(Vec::new()),
            epoch: Instant::now(),
            limit: limit.max(Duration::from_millis(10)),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            parked: Arc::new(ParkedList::default()),
        })
    }

    /// The list the server's pools keep their parked children on.
    pub(crate) fn parked(&self) -> Arc<ParkedList> {
        self.parked.clone()
    }

    /// Watch the calling thread's spawns from now on.
    pub(crate) fn enroll(&self) {
        let slot = Arc::new(Slot::default());
        slot.tid.store(this_process::gettid(), Ordering::Relaxed);
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).push(slot.clone());
        let (epoch, limit) = (self.epoch, self.limit);
        SLOT.with(|s| *s.borrow_mut() = Some((slot, epoch, limit)));
    }

    /// Start the watching thread; it ends with [`stop`](Watchdog::stop).
    pub(crate) fn start(self: &Arc<Watchdog>) -> std::io::Result<std::thread::JoinHandle<()>> {
        let me = self.clone();
        std::thread::Builder::new().name("spawnkit-watchdog".into()).spawn(move || me.watch())
    }

    pub(crate) fn stop(&self) {
        *self.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.notify_all();
    }

    fn watch(&self) {
        let every = (self.limit / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
        let mut stopped = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let (s, _) = self.wake.wait_timeout(stopped, every).unwrap_or_else(|e| e.into_inner());
            stopped = s;
            if *stopped {
                return;
            }
            let now = self.epoch.elapsed().as_millis() as u64 + 1;
            let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner()).clone();
            for slot in slots {
                let since = slot.since.load(Ordering::Acquire);
                if since != 0 && now.saturating_sub(since) > self.limit.as_millis() as u64 {
                    kill_unexeced_child(&slot, since, &self.parked);
                }
            }
        }
    }
}

/// Kill the children of the slot's thread that have not exec'd: those that still share the
/// server's address space (kcmp `KCMP_VM`: a `CLONE_VM` child before its execve; a child
/// that has exec'd, whatever it runs, has its own). Each is checked after a pidfd pins it and
/// it is seen again among the thread's children (so a reused pid is never the one killed).
fn kill_unexeced_child(slot: &Slot, since: u64, parked: &ParkedList) {
    let tid = slot.tid.load(Ordering::Acquire);
    let children = || -> Vec<i32> {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    for pid in children() {
        // A parked pool child waits for a request: it is not stuck.
        if pool::lock(parked).contains(&pid) {
            continue;
        }
        let Ok(fd) = pidfd::open(pid) else { continue };
        if !children().contains(&pid) {
            continue;
        }
        match this_process::shares_our_vm(pid) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                if !KCMP_WARNED.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "spawnkit: the spawn watchdog cannot tell whether a child has exec'd \
                         (kcmp: {}): a stalled spawn is left as it is",
                        std::io::Error::from_raw_os_error(e)
                    );
                }
                return;
            }
        }
        // The same spawn still (not a later one of the same thread).
        if slot.since.load(Ordering::Acquire) != since {
            return;
        }
        slot.killed.store(true, Ordering::Release);
        let _ = pidfd::send_signal(std::os::fd::AsFd::as_fd(&fd), libc::SIGKILL);
    }
}

static KCMP_WARNED: AtomicBool = AtomicBool::new(false);

/// The calling thread spawns for no server any more.
pub(crate) fn unenroll() {
    let _ = SLOT.try_with(|s| s.borrow_mut().take());
}

/// Run a spawn on an enrolled thread: the watchdog sees it; if it killed the child, the
/// result is an error saying so. Unenrolled threads just run it.
pub(crate) fn watched<T>(spawn: impl FnOnce() -> crate::Result<T>) -> crate::Result<T> {
    let slot = SLOT.with(|s| s.borrow().clone());
    let Some((slot, epoch, limit)) = slot else { return spawn() };
    slot.killed.store(false, Ordering::Release);
    slot.since.store(epoch.elapsed().as_millis() as u64 + 1, Ordering::Release);
    /// The spawn is over, even when it panicked (a spawner thread catches that and goes on).
    struct Over<'a>(&'a AtomicU64);
    impl Drop for Over<'_> {
        fn drop(&mut self) {
            self.0.store(0, Ordering::Release);
        }
    }
    let over = Over(&slot.since);
    let result = spawn();
    drop(over);
    if slot.killed.swap(false, Ordering::AcqRel) && result.is_err() {
        return Err(Error::new(ErrorKind::Timeout, "execve", "").with_reason(format!(
            "the child did not reach execve within {:.3} s (stopped or hung before exec): \
             the server killed it",
            limit.as_secs_f64()
        )));
    }
    result
}
