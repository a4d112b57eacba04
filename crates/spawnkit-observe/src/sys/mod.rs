//! Everything `unsafe` in spawnkit-observe lives in this module tree.
//!
//! # The rules here
//!
//! Observation runs only in the calling process: nothing here is ever reached from a child
//! between clone and execve, so plain libc calls are fine (unlike spawnkit's `sys/`, whose child
//! rules do not apply). What remains to get right is the kernel's side of each call:
//!
//! 1. **One file per system-call family**, named for it, whose first lines name the man pages
//!    and uapi headers it follows: [`bpf`] (bpf(2) for the task iterator and the kernel's BTF),
//!    [`procfs`] (the /proc walker's openat/getdents64/read),
//!    [`procmap`] (the `PROCMAP_QUERY` ioctl, memfd, statfs, name_to_handle_at) and [`creds`]
//!    (capget(2)).
//! 2. **Structures the kernel reads are fully initialised**: every byte of an attr or query
//!    struct is a field (no implicit padding), and its size is passed exactly; the kernel
//!    treats the bytes after the given size as zero.
//! 3. **Buffers the kernel writes are ours and large enough**: a pointer is passed together
//!    with the length of the slice it comes from, never more.
//! 4. **Every fd or mapping the kernel returns is owned at once**: `OwnedFd::from_raw_fd` on
//!    the success path only, and the BTF mapping in a value that unmaps it once, on drop; so
//!    nothing leaks on an early return and nothing is closed or unmapped twice.
//! 5. **Errors are errnos**: each wrapper returns `Err(errno)` and leaves the meaning to the
//!    caller (a process that vanished mid-read is normal, not an error). `errno` is read right
//!    after the failing libc call, on the same thread ([`last_errno`]).
//!
//! Every `unsafe` block below carries a `// SAFETY:` comment pointing back to these rules or
//! to the contract of the call it makes.

pub(crate) mod bpf;
pub(crate) mod creds;
pub(crate) mod localtime;
pub(crate) mod procfs;
pub(crate) mod procmap;

/// `errno` of the calling thread after a failed libc call.
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}
