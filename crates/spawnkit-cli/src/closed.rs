//! Which of fds 0, 1 and 2 were closed when spawnkit started.
//!
//! Rust's runtime, before `main`, opens /dev/null on any of fds 0-2 that is closed (so that
//! a later open cannot take the number and a stray print land in, say, a lock file). That
//! stays so in spawnkit itself; but a program started by `spawnkit run` must find those fds
//! closed, as it would under env(1) (`spawnkit run -- echo hi >&-` fails as `echo hi >&-`
//! does), not writing into /dev/null unseen. So the state is read earlier than the runtime
//! runs: by a function in `.init_array`, which the dynamic loader (or a static binary's
//! startup code) calls before the C `main` that calls Rust's `lang_start`.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU8, Ordering};

/// Bit N set: fd N was closed at startup.
static CLOSED: AtomicU8 = AtomicU8::new(0);

/// Reads fds 0-2. Runs before `main`: only fcntl(2), no allocation, nothing of std's that
/// needs the runtime (an `io::Error` of an errno allocates nothing).
extern "C" fn record() {
    let mut bits = 0;
    for fd in 0..3 {
        // F_GETFD fails only with EBADF: not open.
        if spawnkit::process::fd_flags(fd).is_err() {
            bits |= 1 << fd;
        }
    }
    CLOSED.store(bits, Ordering::Relaxed);
}

#[used]
#[link_section = ".init_array"]
static RECORD: extern "C" fn() = record;

/// Whether `fd` (0, 1 or 2) was closed when spawnkit started; `false` for any other fd.
pub fn at_start(fd: RawFd) -> bool {
    (0..3).contains(&fd) && CLOSED.load(Ordering::Relaxed) & (1 << fd) != 0
}
