//! Signals as a supervisor receives them: a set blocked in the calling thread and read from a
//! signalfd ([`SignalFd`]), and the calling thread's current mask
//! ([`SigSet::current_thread_mask`]).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::sys;
use crate::SigSet;

impl SigSet {
    /// The calling thread's signal mask (pthread_sigmask(3)); empty if it cannot be read. A
    /// child spawned by the default strategy starts with the mask given to
    /// [`Command::signal_mask`](crate::Command::signal_mask), so a face that wants the
    /// child to inherit the caller's mask (as Python's `subprocess` does) passes this one.
    pub fn current_thread_mask() -> SigSet {
        SigSet::from_bits(sys::sigmask::thread_mask().unwrap_or(0))
    }
}

/// One signal read from a [`SignalFd`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceivedSignal {
    /// The signal number (1..=64).
    pub signo: i32,
    /// Its `si_code` (`SI_USER`, `SI_KERNEL`, ...).
    pub code: i32,
    /// The sender's pid (0 when the kernel sent it).
    pub sender: u32,
}

/// A set of signals blocked in the calling thread and delivered through a non-blocking,
/// close-on-exec signalfd(2) instead. The mask is set with raw `rt_sigprocmask` and
/// `signalfd4` system calls, so glibc's reserved signals 32 and 33 are really in it.
///
/// Blocking is per thread: a single-threaded process (as the `spawnkit` command) blocks them
/// for the whole process. Dropping the `SignalFd` closes the fd but leaves the mask as it is.
/// A child spawned by spawnkit does not inherit the mask: the engine installs the child's own
/// (empty unless [`Command::signal_mask`](crate::Command::signal_mask)) before execve.
#[derive(Debug)]
pub struct SignalFd {
    fd: OwnedFd,
}

impl SignalFd {
    /// Block `set` in the calling thread and open a signalfd for it.
    pub fn block(set: SigSet) -> io::Result<SignalFd> {
        sys::sigmask::block(set.bits()).map_err(io::Error::from_raw_os_error)?;
        let fd = sys::sigmask::signalfd(set.bits()).map_err(io::Error::from_raw_os_error)?;
        Ok(SignalFd { fd })
    }

    /// Every signal pending on the fd now (EINTR retried; none when nothing is pending).
    pub fn read_pending(&self) -> io::Result<Vec<ReceivedSignal>> {
        let mut out = Vec::new();
        loop {
            match sys::sigmask::read_siginfo(self.fd.as_fd()) {
                Ok(Some((signo, code, sender))) => {
                    out.push(ReceivedSignal { signo: signo as i32, code, sender })
                }
                Ok(None) => return Ok(out),
                Err(e) if e == libc::EAGAIN => return Ok(out),
                Err(libc::EINTR) => continue,
                Err(e) => return Err(io::Error::from_raw_os_error(e)),
            }
        }
    }
}

impl AsFd for SignalFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
