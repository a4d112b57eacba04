//! A fork lock for a started spawn's notify pipe (Go's `syscall.ForkLock`, for one window).
//!
//! [`start_clone`](super::start_clone) makes a close-on-exec pipe, clones the child (which
//! holds the write end) and closes its own write end. A `fork()` by another thread inside that
//! window would copy the write end into a process that may never exec (a `multiprocessing`
//! fork worker, a daemon): the start's EOF, and with it `finish` and `start_async`, would wait
//! for that process to exit. So `fork()` waits (a `pthread_atfork` prepare handler) until no
//! start is in its window, and a start waits while a fork is under way. Windows from many
//! threads run at once; they are a few system calls long. Raw `clone`/`vfork` calls that
//! bypass glibc's `fork()` (posix_spawn, this engine's own spawns) exec or exit at once, so at
//! worst they delay an EOF by that long.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

/// The high bit: a fork holds the lock. The rest: starts inside their window.
static STATE: AtomicU32 = AtomicU32::new(0);
const FORKING: u32 = 1 << 31;
static REGISTER: Once = Once::new();

extern "C" fn prepare() {
    while STATE.compare_exchange_weak(0, FORKING, Ordering::Acquire, Ordering::Relaxed).is_err() {
        std::thread::yield_now();
    }
}

extern "C" fn after() {
    // In the parent: windows may open again. In the child: only this thread exists, so no
    // window is open there either.
    STATE.store(0, Ordering::Release);
}

/// A start's window: no `fork()` of this process completes while it lives. Open it with all
/// signals blocked in this thread (a handler that forked inside it would wait forever).
pub(crate) struct Window(());

impl Window {
    pub(crate) fn open() -> Window {
        REGISTER.call_once(|| {
            // SAFETY: registers three handlers that only touch an atomic; never unregistered
            // (the library is not unloaded while a process runs it).
            unsafe { libc::pthread_atfork(Some(prepare), Some(after), Some(after)) };
        });
        loop {
            let s = STATE.load(Ordering::Relaxed);
            if s & FORKING == 0
                && STATE
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return Window(());
            }
            std::thread::yield_now();
        }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        STATE.fetch_sub(1, Ordering::Release);
    }
}
