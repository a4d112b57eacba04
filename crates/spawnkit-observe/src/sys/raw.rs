//! Raw Linux system calls: `syscall` instructions with no libc in between, so no `errno` is
//! written and no lock is taken. Each returns the kernel's value: `>= 0` on success,
//! `-errno` on failure. See `syscall(2)` for the calling convention.
//!
//! Here they serve the hot loop of the /proc walker ([`super::procfs`]): one `syscall`
//! instruction per openat, read or getdents64. The same file as spawnkit's own `sys/raw.rs`
//! (where they are the only system calls the child may make); there is no child here.

use core::arch::asm;

/// A raw syscall result: the value on success, the errno on failure.
#[inline(always)]
pub(crate) fn check(ret: isize) -> Result<usize, i32> {
    if (-4095..0).contains(&ret) {
        Err(ret.wrapping_neg() as i32)
    } else {
        Ok(ret as usize)
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::asm;

    /// # Safety
    /// The caller upholds the contract of system call `nr` for these arguments (pointers
    /// valid for what the kernel reads or writes).
    #[inline(always)]
    pub(crate) unsafe fn syscall6(
        nr: i64,
        a1: usize,
        a2: usize,
        a3: usize,
        a4: usize,
        a5: usize,
        a6: usize,
    ) -> isize {
        let ret: isize;
        // SAFETY: the caller guarantees the arguments suit system call `nr`; the `syscall`
        // instruction clobbers only rax (result), rcx and r11.
        unsafe {
            asm!(
                "syscall",
                inlateout("rax") nr as isize => ret,
                in("rdi") a1, in("rsi") a2, in("rdx") a3,
                in("r10") a4, in("r8") a5, in("r9") a6,
                lateout("rcx") _, lateout("r11") _,
                options(nostack)
            );
        }
        ret
    }
}

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::asm;

    /// # Safety
    /// As for x86_64: the arguments suit system call `nr`.
    #[inline(always)]
    pub(crate) unsafe fn syscall6(
        nr: i64,
        a1: usize,
        a2: usize,
        a3: usize,
        a4: usize,
        a5: usize,
        a6: usize,
    ) -> isize {
        let ret: isize;
        // SAFETY: the caller guarantees the arguments suit system call `nr`; `svc 0` returns
        // in x0 and preserves every other register.
        unsafe {
            asm!(
                "svc 0",
                in("x8") nr,
                inlateout("x0") a1 as isize => ret,
                in("x1") a2, in("x2") a3, in("x3") a4, in("x4") a5, in("x5") a6,
                options(nostack)
            );
        }
        ret
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("spawnkit-observe's raw system calls are written for x86_64 and aarch64 only");

pub(crate) use imp::syscall6;

macro_rules! sc {
    ($nr:expr) => { $crate::sys::raw::syscall6($nr as i64, 0, 0, 0, 0, 0, 0) };
    ($nr:expr, $a:expr) => { $crate::sys::raw::syscall6($nr as i64, $a as usize, 0, 0, 0, 0, 0) };
    ($nr:expr, $a:expr, $b:expr) => {
        $crate::sys::raw::syscall6($nr as i64, $a as usize, $b as usize, 0, 0, 0, 0)
    };
    ($nr:expr, $a:expr, $b:expr, $c:expr) => {
        $crate::sys::raw::syscall6($nr as i64, $a as usize, $b as usize, $c as usize, 0, 0, 0)
    };
    ($nr:expr, $a:expr, $b:expr, $c:expr, $d:expr) => {
        $crate::sys::raw::syscall6(
            $nr as i64, $a as usize, $b as usize, $c as usize, $d as usize, 0, 0,
        )
    };
    ($nr:expr, $a:expr, $b:expr, $c:expr, $d:expr, $e:expr) => {
        $crate::sys::raw::syscall6(
            $nr as i64, $a as usize, $b as usize, $c as usize, $d as usize, $e as usize, 0,
        )
    };
}
pub(crate) use sc;
