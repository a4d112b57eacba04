//! Local time of a Unix second, for printing start times as procps does: localtime_r(3)
//! (reads the time zone from TZ or /etc/localtime, as ps does).

/// The local broken-down time of Unix second `t` (localtime_r(3)); all zero if it fails.
pub fn local_time(t: i64) -> libc::tm {
    // SAFETY: an all-zero tm is a valid value (its tm_zone pointer is NULL).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t: libc::time_t = t;
    // SAFETY: localtime_r reads `t` and writes `tm`, both valid for the call.
    unsafe { libc::localtime_r(&t, &mut tm) };
    tm
}
