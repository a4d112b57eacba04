//! Registering an owned fd with tokio's reactor (`AsyncFd`, whose constructor is `unsafe`
//! since tokio 1.54: the caller promises the fd stays open and the same while registered).

use std::io;
use std::os::fd::OwnedFd;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// `fd`, owned by the returned `AsyncFd`, registered for `interest`.
pub(crate) fn register(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd owns `fd`: it stays open, and `OwnedFd::as_raw_fd` returns the same
    // number, for as long as the AsyncFd lives (it closes it when dropped, after deregistering).
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(|e| e.into_parts().1)
}

/// A start of the tokio face's `start_async` that has not resolved, registered with the
/// reactor (for readability of its notify fd) or not yet. Dropped unfinished (its future was
/// dropped), it is finished on the runtime's blocking pool: finishing waits for the child to
/// exec or exit (its steps before execve), which the runtime's thread must not do.
pub(crate) struct PendingStart(pub Option<crate::Starting>);

impl std::os::fd::AsRawFd for PendingStart {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        let fd = self.0.as_ref().and_then(|s| s.fd());
        fd.map_or(-1, |fd| std::os::fd::AsRawFd::as_raw_fd(&fd))
    }
}

impl Drop for PendingStart {
    fn drop(&mut self) {
        let Some(starting) = self.0.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => drop(h.spawn_blocking(move || drop(starting))),
            Err(_) => drop(starting),
        }
    }
}

/// `pending` (whose start must still be pending: [`Starting::fd`](crate::Starting::fd) is
/// `Some`) registered for readability of its notify fd.
pub(crate) fn register_start(pending: PendingStart) -> io::Result<AsyncFd<PendingStart>> {
    debug_assert!(pending.0.as_ref().is_some_and(|s| s.fd().is_some()));
    // SAFETY: the notify fd belongs to the Starting, which stays pending (its fd open and the
    // same) while inside the AsyncFd: it is taken out only after `into_inner` deregistered it.
    unsafe { AsyncFd::register_with_interest(pending, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}
