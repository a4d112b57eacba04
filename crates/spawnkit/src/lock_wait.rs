//! Waiting for a [`Lock`] to be free, interruptibly: the one wait loop the faces share.

use std::time::{Duration, Instant};

use crate::sys;
use crate::Lock;

impl Lock {
    /// Whether the lock could be taken now: probed with a non-blocking flock(2) of our own on
    /// a descriptor of our own, released at once by closing it. A file that cannot be opened
    /// counts as free (the spawn reports it, or creates the file).
    pub fn is_free(&self) -> bool {
        let Ok(file) = std::fs::File::open(&self.path) else { return true };
        let op = if self.shared { libc::LOCK_SH } else { libc::LOCK_EX } | libc::LOCK_NB;
        use std::os::fd::AsRawFd;
        match sys::parent::flock(file.as_raw_fd(), op) {
            Ok(()) => true,
            Err(e) => e != libc::EWOULDBLOCK,
        }
    }

    /// Wait until the lock could be taken ([`Lock::is_free`]): `Ok(true)` once it is,
    /// `Ok(false)` once `deadline` has passed (None: wait forever). Between probes it calls
    /// `nap(pause)`, which sleeps for `pause` (1 ms growing to 50 ms, clipped to the deadline)
    /// and may end the wait with an error: a Python face releases the GIL for the sleep and
    /// runs the signal handlers after it, so Ctrl-C interrupts the wait.
    pub fn wait_until_free<E>(
        &self,
        deadline: Option<Instant>,
        nap: impl FnMut(Duration) -> Result<(), E>,
    ) -> Result<bool, E> {
        retry_with_naps(deadline, || Ok(self.is_free()), nap)
    }
}

/// The one wait loop: `attempt` until it says done (`Ok(true)`), napping between attempts
/// (1 ms growing to 50 ms, clipped to `deadline`), `Ok(false)` once the deadline has passed.
/// The faces' wait for a free lock and the engine's timed flock both run it.
pub(crate) fn retry_with_naps<E>(
    deadline: Option<Instant>,
    mut attempt: impl FnMut() -> Result<bool, E>,
    mut nap: impl FnMut(Duration) -> Result<(), E>,
) -> Result<bool, E> {
    let mut next = Duration::from_millis(1);
    loop {
        if attempt()? {
            return Ok(true);
        }
        let left = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left,
                _ => return Ok(false),
            },
            None => next,
        };
        nap(next.min(left))?;
        next = (next * 2).min(Duration::from_millis(50));
    }
}
