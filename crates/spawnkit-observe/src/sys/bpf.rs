//! bpf(2) for the task iterator: `BPF_PROG_LOAD` (a tracing program of attach type
//! BPF_TRACE_ITER), `BPF_LINK_CREATE` (attach it; the link keeps it loaded) and
//! `BPF_ITER_CREATE` (a readable session on the link); and a read-only private mmap(2) of the
//! kernel's BTF. Layouts: `union bpf_attr` in include/uapi/linux/bpf.h. Parent side only;
//! plain libc calls are fine here.
//!
//! Each attr below is a prefix of `union bpf_attr` with no implicit padding (every byte is a
//! field, so every byte is initialised); the kernel treats the bytes after the given size as
//! zero.

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::last_errno;

/// enum bpf_cmd
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
/// enum bpf_prog_type
const BPF_PROG_TYPE_TRACING: u32 = 26;
/// enum bpf_attach_type
const BPF_TRACE_ITER: u32 = 28;

/// `union bpf_attr`, the `BPF_PROG_LOAD` member up to `attach_btf_obj_fd`.
#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    prog_btf_fd: u32,
    func_info_rec_size: u32,
    func_info: u64,
    func_info_cnt: u32,
    line_info_rec_size: u32,
    line_info: u64,
    line_info_cnt: u32,
    attach_btf_id: u32,
    attach_btf_obj_fd: u32,
    _pad: u32,
}

const _: () = assert!(std::mem::size_of::<ProgLoad>() == 120);

/// `union bpf_attr`, the `link_create` member up to the iterator's `iter_info` fields.
#[repr(C)]
struct LinkCreate {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    iter_info: u64,
    iter_info_len: u32,
    _pad: u32,
}

const _: () = assert!(std::mem::size_of::<LinkCreate>() == 32);

/// `union bpf_attr`, the `iter_create` member.
#[repr(C)]
struct IterCreate {
    link_fd: u32,
    flags: u32,
}

const _: () = assert!(std::mem::size_of::<IterCreate>() == 8);

/// The attrs above, and only they: what [`bpf`] may pass to the kernel.
trait Attr {}
impl Attr for ProgLoad {}
impl Attr for LinkCreate {}
impl Attr for IterCreate {}

/// bpf(cmd, attr, sizeof attr); the kernel zero-extends a shorter attr. EINTR is retried, and
/// EAGAIN (which BPF_PROG_LOAD may return transiently) a few times.
fn bpf<T: Attr>(cmd: libc::c_long, attr: &mut T) -> Result<OwnedFd, i32> {
    let mut again = 5;
    loop {
        let (attr, size) = (attr as *mut T, std::mem::size_of::<T>() as u32);
        // `attr` (an `Attr`) is a live `#[repr(C)]` prefix of `union bpf_attr` without
        // padding, so initialised, of the size passed; every pointer in it refers to memory
        // the caller borrows for this call (instructions and license read, log buffer
        // written up to its stated size).
        // SAFETY: per the above, the kernel reads and writes only memory valid for the call.
        let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr, size) };
        if fd >= 0 {
            // SAFETY: the fd was just created and is owned by nobody else.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        match last_errno() {
            libc::EINTR => continue,
            libc::EAGAIN if again > 0 => again -= 1,
            e => return Err(e),
        }
    }
}

/// bpf(BPF_PROG_LOAD) of a BPF_PROG_TYPE_TRACING program with expected attach type
/// BPF_TRACE_ITER, attached to the vmlinux BTF function `attach_btf_id` (`bpf_iter_<target>`).
/// `insns` holds whole 8-byte instructions; `name` is cut to 15 bytes. With `log`, the
/// verifier writes its level-1 log there (NUL-terminated).
pub(crate) fn prog_load_iter(
    insns: &[u8],
    license: &CStr,
    name: &str,
    attach_btf_id: u32,
    log: Option<&mut [u8]>,
) -> Result<OwnedFd, i32> {
    let mut prog_name = [0u8; 16];
    let n = name.len().min(15);
    prog_name[..n].copy_from_slice(&name.as_bytes()[..n]);
    let (log_level, log_size, log_buf) = match log {
        Some(buf) if !buf.is_empty() => (1, buf.len() as u32, buf.as_mut_ptr() as u64),
        _ => (0, 0, 0),
    };
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_TRACING,
        insn_cnt: (insns.len() / 8) as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level,
        log_size,
        log_buf,
        kern_version: 0,
        prog_flags: 0,
        prog_name,
        prog_ifindex: 0,
        expected_attach_type: BPF_TRACE_ITER,
        prog_btf_fd: 0,
        func_info_rec_size: 0,
        func_info: 0,
        func_info_cnt: 0,
        line_info_rec_size: 0,
        line_info: 0,
        line_info_cnt: 0,
        attach_btf_id,
        attach_btf_obj_fd: 0,
        _pad: 0,
    };
    bpf(BPF_PROG_LOAD, &mut attr)
}

/// bpf(BPF_LINK_CREATE) attaching a loaded iterator program (attach type BPF_TRACE_ITER,
/// no iterator parameters): the link fd.
pub(crate) fn link_create_iter(prog: BorrowedFd<'_>) -> Result<OwnedFd, i32> {
    let mut attr = LinkCreate {
        prog_fd: prog.as_raw_fd() as u32,
        target_fd: 0,
        attach_type: BPF_TRACE_ITER,
        flags: 0,
        iter_info: 0,
        iter_info_len: 0,
        _pad: 0,
    };
    bpf(BPF_LINK_CREATE, &mut attr)
}

/// bpf(BPF_ITER_CREATE) on an iterator link: a new fd whose reads run the program.
pub(crate) fn iter_create(link: BorrowedFd<'_>) -> Result<OwnedFd, i32> {
    let mut attr = IterCreate { link_fd: link.as_raw_fd() as u32, flags: 0 };
    bpf(BPF_ITER_CREATE, &mut attr)
}

/// A read-only private mapping of the kernel's BTF, unmapped on drop.
pub(crate) struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

/// The kernel's own BTF: made when the kernel was built, the same bytes until it stops.
const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

impl Mapped {
    /// mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) of /sys/kernel/btf/vmlinux (opened
    /// close-on-exec, closed again). Linux 6.16+ allows this (private read-only mappings
    /// only); before, it fails with ENODEV or EINVAL; ENOENT when the kernel has no BTF.
    ///
    /// Only this file: the borrow that [`Mapped::bytes`] gives relies on bytes that never
    /// change, which a file someone may write or truncate does not promise.
    pub(crate) fn vmlinux_btf() -> Result<Mapped, i32> {
        let file = File::open(VMLINUX_BTF).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let len = file.metadata().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?.len();
        let len = usize::try_from(len).map_err(|_| libc::EFBIG)?;
        if len == 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: a fresh read-only private mapping chosen by the kernel; nothing else aliases
        // it, and `Mapped` unmaps it exactly once.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(last_errno());
        }
        Ok(Mapped { ptr, len })
    }

    /// The mapped bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes until drop (the file's size when mapped).
        // The mapping is read-only, and the file is the kernel's BTF, which nobody can write
        // or truncate, so the bytes do not change under the borrow and never fault.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `file`, once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}
