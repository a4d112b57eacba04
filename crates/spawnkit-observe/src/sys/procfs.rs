//! The system calls of the /proc walker: openat(2), getdents64(2), read(2), lseek(2),
//! close(2) through libc (parent side: no child rule applies), sysconf(3) for the clock tick
//! and page size, and
//! clock_gettime(2) for the clocks that process start times are measured against.
//!
//! Parent side only. Every function returns the errno on failure; the caller decides which
//! ones mean "the process has vanished".

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::last_errno;

/// A libc return value: the value, or the errno it left.
fn check(ret: isize) -> Result<usize, i32> {
    usize::try_from(ret).map_err(|_| last_errno())
}

/// openat(2) with `O_RDONLY | O_CLOEXEC | extra`, relative to `dir` (`None`: the cwd).
fn open_at(dir: Option<BorrowedFd<'_>>, path: &CStr, extra: i32) -> Result<OwnedFd, i32> {
    let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | extra;
    // SAFETY: `path` is NUL-terminated and outlives the call; openat only reads it.
    let ret = unsafe { libc::openat(dirfd, path.as_ptr(), flags) } as isize;
    let fd = check(ret)?;
    // SAFETY: the kernel just returned this fd, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Open a directory for getdents64: `O_RDONLY | O_DIRECTORY | O_CLOEXEC`.
pub(crate) fn open_dir(path: &CStr) -> Result<OwnedFd, i32> {
    open_at(None, path, libc::O_DIRECTORY)
}

/// Open a file under `dir` for reading (`O_RDONLY | O_CLOEXEC`), as `openat(dir, path)`.
pub(crate) fn open_in(dir: BorrowedFd<'_>, path: &CStr) -> Result<OwnedFd, i32> {
    open_at(Some(dir), path, 0)
}

/// read(2) into `buf`, retried on EINTR: the number of bytes read, 0 at end of file.
pub(crate) fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, i32> {
    loop {
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
        let ret = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match check(ret) {
            Err(libc::EINTR) => continue,
            other => return other,
        }
    }
}

/// getdents64(2): fill `buf` with `struct linux_dirent64` records; 0 at the end of the
/// directory. [`dirents`] walks the records.
pub(crate) fn getdents64(dir: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, i32> {
    loop {
        // SAFETY: the kernel writes at most `buf.len()` bytes of records into `buf`.
        let ret = unsafe {
            libc::syscall(libc::SYS_getdents64, dir.as_raw_fd(), buf.as_mut_ptr(), buf.len())
        } as isize;
        match check(ret) {
            Err(libc::EINTR) => continue,
            other => return other,
        }
    }
}

/// lseek(2) to offset 0: the next getdents64 starts the directory over.
pub(crate) fn rewind(dir: BorrowedFd<'_>) -> Result<(), i32> {
    // SAFETY: lseek takes integers only.
    let ret = unsafe { libc::lseek(dir.as_raw_fd(), 0, libc::SEEK_SET) } as isize;
    check(ret).map(drop)
}

/// The names in a buffer filled by [`getdents64`] (`struct linux_dirent64`: d_ino u64,
/// d_off i64, d_reclen u16, d_type u8, then the NUL-terminated name). Safe code: a record
/// that does not fit ends the walk.
pub(crate) fn dirents(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let reclen = usize::from(u16::from_ne_bytes([*rest.get(16)?, *rest.get(17)?]));
        if reclen < 20 || reclen > rest.len() {
            return None;
        }
        let name = &rest[19..reclen];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        rest = &rest[reclen..];
        Some(name)
    })
}

/// sysconf(3) `name`, or `default` where it gives no positive value.
fn sysconf_or(name: libc::c_int, default: u64) -> u64 {
    // SAFETY: sysconf takes an integer and touches no memory of ours.
    let value = unsafe { libc::sysconf(name) };
    if value > 0 {
        value as u64
    } else {
        default
    }
}

/// sysconf(_SC_CLK_TCK): the unit of `/proc/PID/stat` times (USER_HZ, 100 on Linux).
pub(crate) fn clock_ticks() -> u64 {
    sysconf_or(libc::_SC_CLK_TCK, 100)
}

/// sysconf(_SC_PAGESIZE): the unit of the rss field of `/proc/PID/stat` and of the counts in
/// `/proc/PID/statm`.
pub(crate) fn page_size() -> u64 {
    sysconf_or(libc::_SC_PAGESIZE, 4096)
}

/// clock_gettime(2): `clock` (CLOCK_REALTIME, CLOCK_BOOTTIME...) as seconds and
/// nanoseconds, or `None` when the kernel does not know that clock.
pub(crate) fn clock_gettime(clock: libc::clockid_t) -> Option<(i64, i64)> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`, which lives across the call.
    let ret = unsafe { libc::clock_gettime(clock, &mut ts) };
    (ret == 0).then_some((ts.tv_sec, ts.tv_nsec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn getdents_lists_proc_self() {
        let dir = open_dir(c"/proc").unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let me = std::process::id().to_string();
        let mut found = 0;
        for _ in 0..2 {
            rewind(dir.as_fd()).unwrap();
            loop {
                let n = getdents64(dir.as_fd(), &mut buf).unwrap();
                if n == 0 {
                    break;
                }
                found += dirents(&buf[..n]).filter(|name| *name == me.as_bytes()).count();
            }
        }
        assert_eq!(found, 2, "our pid is listed once per pass over /proc");
    }

    #[test]
    fn open_in_and_read() {
        let dir = open_dir(c"/proc").unwrap();
        let fd = open_in(dir.as_fd(), c"self/stat").unwrap();
        let mut buf = [0u8; 4096];
        let n = read(fd.as_fd(), &mut buf).unwrap();
        let me = format!("{} (", std::process::id());
        assert!(buf[..n].starts_with(me.as_bytes()));
        assert_eq!(open_in(dir.as_fd(), c"0/stat").err(), Some(libc::ENOENT));
        assert_eq!(open_dir(c"/proc/self/stat").err(), Some(libc::ENOTDIR));
    }

    #[test]
    fn dirents_stops_at_a_short_record() {
        let mut rec = vec![0u8; 24];
        rec[16..18].copy_from_slice(&24u16.to_ne_bytes());
        rec[19..22].copy_from_slice(b"123");
        assert_eq!(dirents(&rec).collect::<Vec<_>>(), [b"123"]);
        assert_eq!(dirents(&rec[..23]).count(), 0);
        rec[16..18].copy_from_slice(&3u16.to_ne_bytes());
        assert_eq!(dirents(&rec).count(), 0);
    }

    #[test]
    fn clocks() {
        let (boot, _) = clock_gettime(libc::CLOCK_BOOTTIME).unwrap();
        let (real, _) = clock_gettime(libc::CLOCK_REALTIME).unwrap();
        assert!(boot > 0 && real > boot);
        assert_eq!(clock_gettime(-1), None);
    }

    #[test]
    fn sysconf_values() {
        assert_eq!(clock_ticks(), 100);
        assert!(page_size().is_power_of_two());
    }
}
