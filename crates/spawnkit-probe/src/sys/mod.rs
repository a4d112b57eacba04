//! The probe's system-call room: every `unsafe` block of `spawnkit-probe` lives here.
//!
//! # Safety
//!
//! Each wrapper is a thin, safe face over one libc call (named after it; see its man page)
//! and returns what the call returns (`-1` with errno set on failure), so the callers keep
//! their exact error handling. The arguments a wrapper takes are plain values or Rust
//! slices; the pointer the C call needs is made from them here, with its length, so no
//! caller can pass a dangling one.
//!
//! Two kinds of call need more than that, and say so where they are:
//! - [`fork`]: the probe is single-threaded whenever it forks (the only thread it ever
//!   starts, in `shm-fixture leader-exits`, starts after its fork), so the child may run any
//!   code, as after any fork of a single-threaded program.
//! - memory: a [`Region`] is a mapping (or an attached SysV segment) that is never unmapped
//!   while the process lives, so its pages may be read and written through volatile accesses
//!   at any offset below its length; the accessors check that bound.

use std::ffi::CStr;

/// fcntl(2) `F_GETFD`: the fd flags, or -1 if `fd` is not open.
pub fn fcntl_getfd(fd: i32) -> i32 {
    // SAFETY: F_GETFD on an fd number only reads its flags; -1 (EBADF) if it is not open.
    unsafe { libc::fcntl(fd, libc::F_GETFD) }
}

/// getpid(2).
pub fn getpid() -> i32 {
    // SAFETY: no arguments, no memory.
    unsafe { libc::getpid() }
}

/// getppid(2).
pub fn getppid() -> i32 {
    // SAFETY: no arguments, no memory.
    unsafe { libc::getppid() }
}

/// getpgid(2) of this process.
pub fn getpgid() -> i32 {
    // SAFETY: an integer argument, no memory.
    unsafe { libc::getpgid(0) }
}

/// getsid(2) of this process.
pub fn getsid() -> i32 {
    // SAFETY: an integer argument, no memory.
    unsafe { libc::getsid(0) }
}

/// getpriority(2) `PRIO_PROCESS` of this process (errno cleared first, as the man page asks,
/// since -1 is a valid nice value).
pub fn getpriority() -> i32 {
    // SAFETY: __errno_location points at this thread's errno; getpriority takes integers.
    unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, 0)
    }
}

/// getrlimit(2): (soft, hard); zeros if the call fails.
pub fn getrlimit(res: libc::__rlimit_resource_t) -> (u64, u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into `lim`, a local.
    unsafe { libc::getrlimit(res, &mut lim) };
    (lim.rlim_cur, lim.rlim_max)
}

/// prctl(2) `PR_GET_PDEATHSIG` (0 if none or if the call fails).
pub fn get_pdeathsig() -> i32 {
    let mut sig: libc::c_int = 0;
    // SAFETY: PR_GET_PDEATHSIG writes one int into `sig`, a local.
    unsafe { libc::prctl(libc::PR_GET_PDEATHSIG, &mut sig as *mut libc::c_int) };
    sig
}

/// prctl(2) `PR_SET_PDEATHSIG`.
pub fn set_pdeathsig(sig: i32) -> i32 {
    // SAFETY: integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong) }
}

/// prctl(2) `PR_SET_NAME`: `comm` cut to 15 bytes, NUL-terminated.
pub fn set_name(comm: &[u8]) -> i32 {
    let mut name = [0u8; 16];
    let n = comm.len().min(15);
    name[..n].copy_from_slice(&comm[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from `name`.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) }
}

/// kill(2).
pub fn kill(pid: i32, sig: i32) -> i32 {
    // SAFETY: integer arguments only.
    unsafe { libc::kill(pid, sig) }
}

/// fork(2): 0 in the child, the child's pid in the parent, -1 on failure. See the module
/// comment: the probe is single-threaded whenever it calls this.
pub fn fork() -> i32 {
    // SAFETY: the probe is single-threaded at every call (module comment), so the child may
    // run any code.
    unsafe { libc::fork() }
}

/// _exit(2): end the process without atexit handlers or destructors.
pub fn exit_process(code: i32) -> ! {
    // SAFETY: _exit takes an integer and does not return.
    unsafe { libc::_exit(code) }
}

/// The raw exit(2) system call: ends the calling thread alone, at once (no unwinding, no
/// destructors: nothing of the thread's is touched again).
pub fn exit_thread() -> ! {
    // SAFETY: exit(2) ends this thread; its stack is never used again, so nothing borrowed
    // from it can be observed afterwards.
    unsafe { libc::syscall(libc::SYS_exit, 0) };
    unreachable!("exit(2) returned")
}

/// waitpid(2) with no options: (return value, status).
pub fn waitpid(pid: i32) -> (i32, i32) {
    let mut status = 0;
    // SAFETY: waitpid writes the status into `status`, a local.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    (r, status)
}

/// read(2) into `buf`.
pub fn read(fd: i32, buf: &mut [u8]) -> isize {
    // SAFETY: read writes at most `buf.len()` bytes into `buf`.
    unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) }
}

/// write(2) from `buf`.
pub fn write(fd: i32, buf: &[u8]) -> isize {
    // SAFETY: write reads at most `buf.len()` bytes from `buf`.
    unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) }
}

/// close(2).
pub fn close(fd: i32) -> i32 {
    // SAFETY: an fd number; the callers own it and do not use it again.
    unsafe { libc::close(fd) }
}

/// pipe2(2): ([read, write], return value).
pub fn pipe2(flags: i32) -> ([i32; 2], i32) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two fds into `fds`, a local.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), flags) };
    (fds, r)
}

/// poll(2) for `POLLIN` on one fd.
pub fn poll_in(fd: i32, timeout_ms: i32) -> i32 {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: poll reads and writes one pollfd, a local.
    unsafe { libc::poll(&mut pfd, 1, timeout_ms) }
}

/// pause(2).
pub fn pause() {
    // SAFETY: no arguments.
    unsafe { libc::pause() };
}

/// Point stdin and stdout at /dev/null (open(2) + dup2(2)); nothing if /dev/null won't open.
pub fn null_stdin_stdout() {
    // SAFETY: open reads a NUL-terminated literal; dup2 and close take fd numbers this
    // function owns (`null`) or means to replace (0 and 1).
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::close(null);
        }
    }
}

/// unshare(2) `CLONE_NEWIPC`.
pub fn unshare_ipc() -> i32 {
    // SAFETY: a flag word; only this process's IPC namespace changes.
    unsafe { libc::unshare(libc::CLONE_NEWIPC) }
}

/// memfd_create(2).
pub fn memfd_create(name: &CStr, flags: libc::c_uint) -> i32 {
    // SAFETY: memfd_create reads the NUL-terminated `name`.
    unsafe { libc::memfd_create(name.as_ptr(), flags) }
}

/// Memory that stays mapped for the life of the process: an mmap(2) never unmapped or an
/// attached SysV segment never detached. See the module comment.
#[derive(Clone, Copy)]
pub struct Region {
    base: *mut u8,
    len: usize,
}

impl Region {
    /// The start address.
    pub fn start(&self) -> usize {
        self.base as usize
    }

    /// Write one byte in every page of `[off, off + len)` (clipped to the region).
    pub fn touch(&self, off: usize, len: usize) {
        let end = off.saturating_add(len).min(self.len);
        let mut at = off;
        while at < end {
            // SAFETY: `at < self.len`, inside a writable mapping that is never unmapped.
            unsafe { self.base.add(at).write_volatile(1) };
            at += 4096;
        }
    }

    /// Read one byte of every page of `[off, off + len)` (clipped to the region), which maps
    /// those pages into this process; returns their sum.
    pub fn read(&self, off: usize, len: usize) -> u64 {
        let end = off.saturating_add(len).min(self.len);
        let mut at = off;
        let mut sum = 0u64;
        while at < end {
            // SAFETY: `at < self.len`, inside a readable mapping that is never unmapped.
            sum += unsafe { self.base.add(at).read_volatile() } as u64;
            at += 4096;
        }
        sum
    }
}

/// mmap(2) of `len` bytes, readable and writable, with `flags` (`MAP_SHARED | MAP_ANONYMOUS`
/// with fd -1, or `MAP_PRIVATE` of a file), never unmapped; None on failure (errno set).
pub fn mmap(len: usize, flags: i32, fd: i32) -> Option<Region> {
    // SAFETY: a fresh mapping at an address the kernel picks; no existing memory is affected.
    let base = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, fd, 0)
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    Some(Region { base: base.cast(), len })
}

/// shmget(2) `IPC_PRIVATE` of `size` bytes (mode 0600).
pub fn shmget_private(size: usize) -> i32 {
    // SAFETY: integer arguments only.
    unsafe { libc::shmget(libc::IPC_PRIVATE, size, libc::IPC_CREAT | 0o600) }
}

/// shmat(2) of segment `id` (of `size` bytes) at an address the kernel picks, never
/// detached; None on failure (errno set).
pub fn shmat(id: i32, size: usize) -> Option<Region> {
    // SAFETY: attaches the segment at an address the kernel picks; no existing memory is
    // affected.
    let p = unsafe { libc::shmat(id, std::ptr::null(), 0) };
    if p as isize == -1 {
        return None;
    }
    Some(Region { base: p.cast(), len: size })
}

/// shmctl(2) `IPC_RMID`: the segment goes once the last process detaches.
pub fn shm_remove(id: i32) -> i32 {
    // SAFETY: IPC_RMID takes no buffer.
    unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) }
}
