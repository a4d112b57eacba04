//! capget(2) for the calling thread: the effective capability set that the kernel's
//! permission checks consult now. Credentials are per thread on Linux (glibc's `setuid`
//! family applies a change to every thread; a raw system call changes only the one that
//! makes it), so this asks about the thread that goes on to act, not about the process.
//! Parent side only; plain libc calls are fine here.

use super::last_errno;

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets, passed as two 32-bit words each.
const VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct` (include/uapi/linux/capability.h).
#[repr(C)]
struct Header {
    version: u32,
    /// 0: the calling thread.
    pid: i32,
}

/// `struct __user_cap_data_struct`: one 32-bit word of each set.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The calling thread's effective capabilities (bit N set: capability N held), as capget(2)
/// gives them: relative to the thread's own user namespace.
pub(crate) fn effective_caps() -> Result<u64, i32> {
    let mut header = Header { version: VERSION_3, pid: 0 };
    let mut data = [Data::default(); 2];
    // SAFETY: with version 3, capget reads `header` and writes two `Data` structs, which
    // `data` is; both live across the call and are not otherwise borrowed.
    let ret =
        unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut Header, data.as_mut_ptr()) };
    if ret != 0 {
        return Err(last_errno());
    }
    Ok(u64::from(data[0].effective) | u64::from(data[1].effective) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The set agrees with `CapEff` in /proc/thread-self/status, read independently.
    #[test]
    fn effective_caps_as_proc_shows_them() {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let line = status.lines().find_map(|l| l.strip_prefix("CapEff:")).unwrap();
        let want = u64::from_str_radix(line.trim(), 16).unwrap();
        assert_eq!(effective_caps(), Ok(want));
    }
}
