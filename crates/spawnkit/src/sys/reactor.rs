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

/// A started child's notify fd, registered for readability while the [`Starting`] is inside.
pub(crate) struct PendingStart(pub crate::Starting);

impl std::os::fd::AsRawFd for PendingStart {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.fd().map_or(-1, |fd| std::os::fd::AsRawFd::as_raw_fd(&fd))
    }
}

/// `starting` (which must still be pending: [`Starting::fd`](crate::Starting::fd) is `Some`)
/// registered for readability of its notify fd.
pub(crate) fn register_start(starting: crate::Starting) -> io::Result<AsyncFd<PendingStart>> {
    debug_assert!(starting.fd().is_some());
    // SAFETY: the notify fd belongs to the Starting, which stays pending (its fd open and the
    // same) while inside the AsyncFd: it is finished only after `into_inner` deregistered it.
    unsafe { AsyncFd::register_with_interest(PendingStart(starting), Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}
