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
