//! What shared-memory accounting needs from the kernel beyond plain file reads:
//!
//! - the `PROCMAP_QUERY` ioctl(2) on an fd of `/proc/PID/maps` (Linux 6.11+,
//!   `include/uapi/linux/fs.h`): one binary record per mapping, with a kernel-side filter,
//!   instead of formatting and parsing the text of `maps`;
//! - memfd_create(2) + fstat(2), to learn the device number of the kernel's internal shmem
//!   mount (the one behind `/dev/zero (deleted)`, SysV segments and memfds);
//! - statfs(2), to ask whether a mapped file lives on tmpfs;
//! - name_to_handle_at(2), for the generation of a shmem inode (SysV segments of different
//!   IPC namespaces can share device and inode number; their generations differ).
//!
//! Parent side only; plain libc calls are fine here (see the module essay in `sys/mod.rs`).

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::last_errno;

/// `_IOWR('f', 17, struct procmap_query)`: direction 3 << 30, size 104 << 16, type 'f' << 8, 17.
const PROCMAP_QUERY: libc::c_ulong = 0xC068_6611;

// The VMA flags (out) are also filters (in): READABLE 0x01 (`r` in `maps`), WRITABLE 0x02,
// EXECUTABLE 0x04, SHARED 0x08 (`s`, VM_MAYSHARE). Only SHARED is used here.
/// The mapping is shared (`s` in `maps`, VM_MAYSHARE). As a query flag: only such mappings.
pub(crate) const VMA_SHARED: u64 = 0x08;
/// Query flag: the mapping covering the address, or else the next one above it.
pub(crate) const COVERING_OR_NEXT_VMA: u64 = 0x10;
/// Query flag: skip mappings without a file behind them.
pub(crate) const FILE_BACKED_VMA: u64 = 0x20;

/// `struct procmap_query` of include/uapi/linux/fs.h (104 bytes).
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

const _: () = assert!(std::mem::size_of::<ProcmapQuery>() == 104);

/// One mapping as `PROCMAP_QUERY` describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Vma {
    pub start: u64,
    pub end: u64,
    /// The VMA_* bits: READABLE 0x01, WRITABLE 0x02, EXECUTABLE 0x04, [`VMA_SHARED`].
    pub flags: u64,
    /// Offset into the file, in bytes.
    pub offset: u64,
    pub inode: u64,
    pub dev_major: u32,
    pub dev_minor: u32,
    /// Length of the name written to the caller's buffer (without the NUL); 0: no name.
    pub name_len: usize,
}

/// ioctl(maps_fd, PROCMAP_QUERY): the first mapping at or above `addr` that has every flag
/// of `flags` (with [`COVERING_OR_NEXT_VMA`]); its name (the path as /proc/PID/maps shows it,
/// without escaping) goes into `name`. Errors: ENOENT (no such mapping: the end of the walk),
/// ENOTTY or EINVAL (a kernel without the ioctl), ESRCH (the process is gone or has no memory),
/// ENAMETOOLONG (the name does not fit in `name`; the kernel never writes more than PATH_MAX
/// bytes, so a path longer than that, possible with deep directories, always fails).
pub(crate) fn query(
    maps: BorrowedFd<'_>,
    addr: u64,
    flags: u64,
    name: &mut [u8],
) -> Result<Vma, i32> {
    let mut q = ProcmapQuery {
        size: std::mem::size_of::<ProcmapQuery>() as u64,
        query_flags: flags,
        query_addr: addr,
        vma_name_size: name.len().min(u32::MAX as usize) as u32,
        vma_name_addr: name.as_mut_ptr() as u64,
        ..ProcmapQuery::default()
    };
    // SAFETY: `q` is a valid procmap_query of the size it declares; the kernel writes at most
    // `vma_name_size` bytes to `vma_name_addr`, which is `name`'s buffer of that length, and
    // no build id (build_id_size 0). The fd is borrowed and open.
    let r = unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY, &mut q as *mut ProcmapQuery) };
    if r < 0 {
        return Err(last_errno());
    }
    Ok(Vma {
        start: q.vma_start,
        end: q.vma_end,
        flags: q.vma_flags,
        offset: q.vma_offset,
        inode: q.inode,
        dev_major: q.dev_major,
        dev_minor: q.dev_minor,
        name_len: (q.vma_name_size as usize).saturating_sub(1).min(name.len()),
    })
}

/// The device number (st_dev) of the kernel's internal shmem mount: memfd_create(2) a tiny
/// memfd and fstat(2) it. Shared anonymous mappings, SysV segments and memfds all live there.
pub(crate) fn shmem_dev() -> Result<u64, i32> {
    let name = c"spawnkit-shmem-dev";
    // SAFETY: memfd_create reads a NUL-terminated name and returns a new fd or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: the fd was just created and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    Ok(std::os::unix::fs::MetadataExt::dev(&meta))
}

/// statfs(2) `path`: the file system's magic number (`f_type`), e.g. TMPFS_MAGIC.
pub(crate) fn fs_type(path: &CStr) -> Result<i64, i32> {
    // SAFETY: an all-zero statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs reads a NUL-terminated path and writes into `st`.
    let r = unsafe { libc::statfs(path.as_ptr(), &mut st) };
    if r < 0 {
        return Err(last_errno());
    }
    Ok(st.f_type)
}

/// TMPFS_MAGIC of include/uapi/linux/magic.h.
pub(crate) const TMPFS_MAGIC: i64 = 0x0102_1994;

/// `FILEID_INO32_GEN` of include/linux/exportfs.h: the handle type shmem's `encode_fh` gives,
/// whose first 32-bit word is the inode's generation and the rest its inode number.
const FILEID_INO32_GEN: i32 = 1;

/// The generation of the shmem inode at `path` (a `/proc/PID/map_files/START-END` link is
/// followed to the object), from name_to_handle_at(2). shmem draws each inode's generation at
/// random when it makes the inode, so it tells apart objects that share an inode number.
/// Errors: those of name_to_handle_at (EACCES/EPERM: map_files needs CAP_SYS_ADMIN; ENOENT:
/// gone), or EINVAL for a handle that is not shmem's.
pub(crate) fn shmem_generation(path: &CStr) -> Result<u32, i32> {
    /// `struct file_handle` with room for its handle (shmem's is 12 bytes).
    #[repr(C)]
    struct Handle {
        handle_bytes: u32,
        handle_type: i32,
        f_handle: [u8; 32],
    }
    let mut h = Handle { handle_bytes: 32, handle_type: 0, f_handle: [0; 32] };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `h` starts with struct file_handle's two header fields, followed by the
    // `handle_bytes` (32) bytes of room the kernel may fill; it writes no more (EOVERFLOW
    // instead) and the mount id into `mount_id`. `path` is NUL-terminated.
    let r = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            path.as_ptr(),
            (&mut h as *mut Handle).cast::<libc::file_handle>(),
            &mut mount_id,
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if r < 0 {
        return Err(last_errno());
    }
    if h.handle_type != FILEID_INO32_GEN || h.handle_bytes < 4 {
        return Err(libc::EINVAL);
    }
    let [a, b, c, d, ..] = h.f_handle;
    Ok(u32::from_ne_bytes([a, b, c, d]))
}
