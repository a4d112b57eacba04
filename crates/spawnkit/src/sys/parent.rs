//! Small parent-side wrappers (libc is fine here: this runs in the parent, not the child).

use std::ffi::{c_char, CStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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

/// eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK): a counter one thread raises ([`eventfd_raise`])
/// to wake another polling it for POLLIN, which takes it back to 0 ([`eventfd_take`]).
pub(crate) fn eventfd() -> Result<OwnedFd, i32> {
    // SAFETY: eventfd takes integers and returns a new fd or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: the fd was just created.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Add 1 to an eventfd's counter (readable from now on). Cannot block (nonblocking, and the
/// counter would have to reach 2^64 - 1 first).
pub(crate) fn eventfd_raise(fd: &impl AsRawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Take an eventfd's counter back to 0 (not readable any more); nothing if it was 0.
pub(crate) fn eventfd_take(fd: &impl AsRawFd) {
    let mut n: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live local (EAGAIN when the counter is 0).
    unsafe { libc::read(fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
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

/// statvfs(path): the mount flags (`f_flag`) of the mount holding `path`.
pub(crate) fn statvfs(path: &CStr) -> Result<u64, i32> {
    // SAFETY: zeroed statvfs is a valid out-parameter; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(last_errno());
    }
    Ok(st.f_flag)
}

/// The filesystem type (`f_type`) of an open fd.
pub(crate) fn fstatfs_type(fd: i32) -> Result<i64, i32> {
    // SAFETY: zeroed statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes into `st`.
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return Err(last_errno());
    }
    Ok(st.f_type as i64)
}

/// geteuid().
pub(crate) fn geteuid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

/// getegid().
pub(crate) fn getegid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::getegid() }
}

/// Write all of `data` (errors ignored: the reader may be gone).
pub(crate) fn write_all(fd: i32, mut data: &[u8]) {
    while !data.is_empty() {
        // SAFETY: writes from a live slice.
        let n = unsafe { libc::write(fd, data.as_ptr() as *const libc::c_void, data.len()) };
        if n < 0 && last_errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            return;
        }
        data = &data[n as usize..];
    }
}

/// A directory opened for the `*at` calls only (`O_PATH`).
pub(crate) fn open_dir(path: &str) -> Result<OwnedFd, i32> {
    let c = std::ffi::CString::new(path).map_err(|_| libc::EINVAL)?;
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: NUL-terminated path.
    owned(unsafe { libc::open(c.as_ptr(), flags) })
}

/// Write all of `data` to the file `name` in the directory `dir` (opened write-only, one
/// write: /proc files such as uid_map take their contents in a single write).
pub(crate) fn write_file_at(dir: &OwnedFd, name: &std::ffi::CStr, data: &[u8]) -> Result<(), i32> {
    let flags = libc::O_WRONLY | libc::O_CLOEXEC;
    // SAFETY: `dir` is open; `name` is NUL-terminated.
    let fd = owned(unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) })?;
    // SAFETY: writes from a live slice to the fd just opened.
    let n =
        unsafe { libc::write(fd.as_raw_fd(), data.as_ptr() as *const libc::c_void, data.len()) };
    if n < 0 {
        return Err(last_errno());
    }
    if n as usize != data.len() {
        return Err(libc::EIO);
    }
    Ok(())
}

/// F_DUPFD_CLOEXEC: a copy of `fd` numbered at least `min` (the original is closed).
pub(crate) fn move_above(fd: OwnedFd, min: i32) -> Result<OwnedFd, i32> {
    // SAFETY: fcntl on an open fd returns a new fd or -1.
    owned(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) })
}

fn owned(fd: i32) -> Result<OwnedFd, i32> {
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: a fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Open (creating it, 0666 & ~umask) a file to flock, as flock(1) does.
///
/// Opened with O_NONBLOCK (a FIFO or a device there must not hold the opener), then refused
/// with `ENOTSUP` unless it is a regular file or a directory.
pub(crate) fn open_lock_file(path: &CStr) -> Result<OwnedFd, i32> {
    let flags =
        libc::O_RDONLY | libc::O_CREAT | libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: NUL-terminated path; open returns a new fd or -1.
    let fd = unsafe { libc::open(path.as_ptr(), flags, 0o666 as libc::c_uint) };
    let fd = if fd < 0 && last_errno() == libc::EISDIR {
        // flock(1) locks directories too: open them read-only without O_CREAT.
        // SAFETY: as above.
        owned(unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })?
    } else {
        owned(fd)?
    };
    // SAFETY: a zeroed stat is a valid out-buffer; fstat fills it for an open fd.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open; `st` is writable.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(last_errno());
    }
    let kind = st.st_mode & libc::S_IFMT;
    if kind != libc::S_IFREG && kind != libc::S_IFDIR {
        return Err(libc::ENOTSUP);
    }
    Ok(fd)
}

/// open(path, O_PATH|O_DIRECTORY|O_CLOEXEC).
pub(crate) fn open_dir_path(path: &CStr) -> Result<OwnedFd, i32> {
    // SAFETY: NUL-terminated path; open returns a new fd or -1.
    owned(unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) })
}

/// flock(fd, op), retried on EINTR.
pub(crate) fn flock(fd: i32, op: i32) -> Result<(), i32> {
    loop {
        // SAFETY: flock takes integers.
        if unsafe { libc::flock(fd, op) } == 0 {
            return Ok(());
        }
        let e = last_errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// Read from `fd` (a pipe of ours) until EOF, discarding what comes. Returns only at EOF: a
/// caller's memory may still be in use by the child until then. (A read of our own pipe into
/// a local buffer has no error to give but EINTR; anything else is retried after a pause
/// rather than trusted.)
pub(crate) fn wait_eof(fd: i32) {
    let mut buf = [0u8; 16];
    loop {
        // SAFETY: reads into a local buffer.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        match n {
            0 => return,
            n if n > 0 => {}
            _ if last_errno() == libc::EINTR => {}
            _ => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    }
}

/// The fds open in this process now (a snapshot: other threads may change it).
pub(crate) fn open_fds() -> std::collections::BTreeSet<i32> {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

/// A NULL-terminated array of C strings (argv, envp, PATH candidates), packed: all strings
/// in one buffer, so building one costs two allocations however many strings it has.
#[derive(Default)]
pub(crate) struct CStrArray {
    buf: Vec<u8>,
    /// Where each string starts in `buf`.
    starts: Vec<usize>,
    /// Pointers into `buf`, then NULL; made by `finish`.
    ptrs: Vec<*const c_char>,
}

// SAFETY: the pointers point into `buf`, owned by the same value and not changed after
// `finish`; a Vec's heap buffer does not move when the Vec moves between threads.
unsafe impl Send for CStrArray {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for CStrArray {}

impl CStrArray {
    pub(crate) fn with_capacity(strings: usize, bytes: usize) -> CStrArray {
        CStrArray {
            buf: Vec::with_capacity(bytes),
            starts: Vec::with_capacity(strings),
            ptrs: Vec::new(),
        }
    }

    /// Append the concatenation of `parts` as one string; `Err(())` if it contains a NUL.
    pub(crate) fn push(&mut self, parts: &[&[u8]]) -> Result<(), ()> {
        if parts.iter().any(|p| p.contains(&0)) {
            return Err(());
        }
        self.starts.push(self.buf.len());
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        self.buf.push(0);
        Ok(())
    }

    /// Make the pointer array (after the last `push`).
    pub(crate) fn finish(mut self) -> CStrArray {
        let base = self.buf.as_ptr();
        // SAFETY: every start is an offset inside `buf`, which is not changed from here on.
        self.ptrs = self.starts.iter().map(|&o| unsafe { base.add(o) } as *const c_char).collect();
        self.ptrs.push(std::ptr::null());
        self
    }

    pub(crate) fn as_ptr(&self) -> *const *const c_char {
        self.ptrs.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }

    /// The strings, without their NULs.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let ends =
            self.starts.iter().skip(1).map(|&e| e - 1).chain([self.buf.len().saturating_sub(1)]);
        self.starts.iter().zip(ends).map(move |(&s, e)| &self.buf[s..e])
    }

    /// The `i`-th string as a C string.
    pub(crate) fn get(&self, i: usize) -> Option<&CStr> {
        let start = *self.starts.get(i)?;
        CStr::from_bytes_until_nul(&self.buf[start..]).ok()
    }
}

/// fcntl(F_DUPFD_CLOEXEC): a close-on-exec duplicate of `fd`.
pub(crate) fn dup_cloexec(fd: RawFd) -> Result<OwnedFd, i32> {
    // SAFETY: fcntl on a number; returns a new fd or -1.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(last_errno());
    }
    // SAFETY: the fd was just created and is ours.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// One read(2) into `buf` (EINTR retried); the byte count, 0 on EOF or error (EAGAIN).
pub(crate) fn read_some(fd: RawFd, buf: &mut [u8]) -> usize {
    loop {
        // SAFETY: read writes at most `buf.len()` bytes into `buf`.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && last_errno() == libc::EINTR {
            continue;
        }
        return n.max(0) as usize;
    }
}
