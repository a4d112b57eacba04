//! Small parent-side wrappers (libc is fine here: this runs in the parent, not the child).

use std::ffi::{c_char, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::last_errno;

/// pipe2(O_CLOEXEC): (read end, write end).
pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd), i32> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(last_errno());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// open("/dev/null", O_RDWR|O_CLOEXEC).
pub(crate) fn dev_null() -> Result<OwnedFd, i32> {
    // SAFETY: NUL-terminated path; open returns a new fd or -1.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: the fd was just created.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Set O_NONBLOCK on an fd.
pub(crate) fn set_nonblocking(fd: &impl AsRawFd) -> Result<(), i32> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on an open fd, integer arguments.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(last_errno());
    }
    Ok(())
}

/// The niceness of this process (getpriority's errno dance).
pub(crate) fn current_nice() -> i32 {
    // SAFETY: getpriority has no memory arguments; errno is cleared to tell -1 apart.
    unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, 0)
    }
}

/// getpid().
pub(crate) fn getpid() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::getpid() }
}

/// A NULL-terminated array of C strings (argv, envp) and the strings it points into.
pub(crate) struct CStrArray {
    strings: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

// SAFETY: the pointers point into `strings`, owned by the same value and never mutated; the
// heap buffers of the CStrings do not move when the array moves between threads.
unsafe impl Send for CStrArray {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for CStrArray {}

impl CStrArray {
    pub(crate) fn new(strings: Vec<CString>) -> CStrArray {
        let mut ptrs: Vec<*const c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        CStrArray { strings, ptrs }
    }

    pub(crate) fn as_ptr(&self) -> *const *const c_char {
        self.ptrs.as_ptr()
    }

    pub(crate) fn strings(&self) -> &[CString] {
        &self.strings
    }
}
