//! User and group names to ids: getpwnam_r(3) and getgrnam_r(3), in the parent only (NSS may
//! load modules, allocate and take locks: never between clone and execve).

use std::ffi::CString;
use std::mem::MaybeUninit;

/// Call a getpwnam_r-style function with a buffer that grows on ERANGE. `call` gets the
/// buffer and returns (the function's return value, the id if an entry was found).
/// `Ok(None)`: no such name; `Err(errno)`: the lookup itself failed.
fn with_growing_buffer(
    mut call: impl FnMut(&mut [u8]) -> (libc::c_int, Option<u32>),
) -> Result<Option<u32>, i32> {
    let mut size = 1024;
    loop {
        let mut buf = vec![0u8; size];
        match call(&mut buf) {
            (0, found) => return Ok(found),
            (libc::ERANGE, _) if size < (1 << 22) => size *= 4,
            // "Not found" comes back as one of these from some NSS modules.
            (libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM, _) => return Ok(None),
            (e, _) => return Err(e),
        }
    }
}

/// getpwnam_r(3): the uid and primary gid of user `name`.
pub(crate) fn user_by_name(name: &str) -> Result<Option<(u32, u32)>, i32> {
    let Ok(cname) = CString::new(name) else { return Ok(None) };
    let mut gid = 0;
    let uid = with_growing_buffer(|buf| {
        let mut pw = MaybeUninit::<libc::passwd>::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: a NUL-terminated name, a passwd to fill,
        // a buffer of `buf.len()` bytes for its strings, and the result pointer.
        let r = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                pw.as_mut_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        // SAFETY: when `result` is not NULL it points to `pw`, filled by getpwnam_r.
        let found = (!result.is_null()).then(|| unsafe { ((*result).pw_uid, (*result).pw_gid) });
        if let Some((_, g)) = found {
            gid = g;
        }
        (r, found.map(|(u, _)| u))
    })?;
    Ok(uid.map(|u| (u, gid)))
}

/// getgrnam_r(3): the gid of group `name`.
pub(crate) fn group_by_name(name: &str) -> Result<Option<u32>, i32> {
    let Ok(cname) = CString::new(name) else { return Ok(None) };
    with_growing_buffer(|buf| {
        let mut gr = MaybeUninit::<libc::group>::zeroed();
        let mut result: *mut libc::group = std::ptr::null_mut();
        // SAFETY: as in `user_by_name`, for getgrnam_r.
        let r = unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                gr.as_mut_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        // SAFETY: when `result` is not NULL it points to `gr`, filled by getgrnam_r.
        let found = (!result.is_null()).then(|| unsafe { (*result).gr_gid });
        (r, found)
    })
}
