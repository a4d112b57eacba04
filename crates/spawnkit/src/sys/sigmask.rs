//! Signal masks and signalfds of the calling process (parent side): rt_sigprocmask(2) and
//! signalfd4(2) as raw system calls, so that glibc's reserved signals 32 and 33 are not
//! silently left out of a set as sigprocmask(3) and sigaddset(3) do; pthread_sigmask(3) to
//! read the calling thread's mask.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::last_errno;

/// rt_sigprocmask(SIG_BLOCK, mask): add the signals of the 64-bit kernel mask to the calling
/// thread's mask.
pub(crate) fn block(mask: u64) -> Result<(), i32> {
    change(libc::SIG_BLOCK, mask)
}

/// rt_sigprocmask(SIG_UNBLOCK, mask): take the signals of the 64-bit kernel mask out of the
/// calling thread's mask.
pub(crate) fn unblock(mask: u64) -> Result<(), i32> {
    change(libc::SIG_UNBLOCK, mask)
}

fn change(how: libc::c_int, mask: u64) -> Result<(), i32> {
    // SAFETY: rt_sigprocmask reads 8 bytes of mask from a live u64; no old mask is asked.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            how,
            &mask as *const u64,
            std::ptr::null_mut::<u64>(),
            8usize,
        )
    };
    if r != 0 {
        Err(last_errno())
    } else {
        Ok(())
    }
}

/// signalfd4(-1, mask, SFD_CLOEXEC | SFD_NONBLOCK): a new signalfd for the 64-bit mask.
pub(crate) fn signalfd(mask: u64) -> Result<OwnedFd, i32> {
    // SAFETY: -1 asks for a new signalfd; the mask is 8 bytes of a live u64.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_signalfd4,
            -1,
            &mask as *const u64,
            8usize,
            libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: the fd was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// read(2) of one signalfd_siginfo: (signo, code, sender pid); `Ok(None)` on a short read.
pub(crate) fn read_siginfo(fd: BorrowedFd<'_>) -> Result<Option<(u32, i32, u32)>, i32> {
    // SAFETY: signalfd_siginfo is plain integers; all zeroes is a valid value.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: `info` is writable for `size` bytes; the fd is borrowed and open.
    let n = unsafe {
        libc::read(fd.as_raw_fd(), (&mut info as *mut libc::signalfd_siginfo).cast(), size)
    };
    if n < 0 {
        return Err(last_errno());
    }
    if n as usize != size {
        return Ok(None);
    }
    Ok(Some((info.ssi_signo, info.ssi_code, info.ssi_pid)))
}

/// The calling thread's signal mask as 64 kernel bits (pthread_sigmask(3) with no new set,
/// read with sigismember(3)); None if the call fails.
pub(crate) fn thread_mask() -> Option<u64> {
    // SAFETY: sigset_t is plain old data; an all-zero value is a valid (empty) set.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: with a NULL new set pthread_sigmask only writes the current mask into `set`.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set) };
    if r != 0 {
        return None;
    }
    let mut bits = 0u64;
    for sig in 1..=64 {
        // SAFETY: `set` is initialized above; sigismember only reads it.
        if unsafe { libc::sigismember(&set, sig) } == 1 {
            bits |= 1u64 << (sig - 1);
        }
    }
    Some(bits)
}
