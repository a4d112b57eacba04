//! The process's environment read in place, when no other thread can be changing it.
//!
//! A spawn that inherits the environment must not read libc's `environ` while another thread
//! may `setenv`: glibc can free the array under the reader (issue 11's crash). So the engine
//! takes a copy with `std::env::vars_os`, under std's environment lock, before every spawn
//! that inherits it: ~3–4 µs for a few dozen variables, most of it allocation. While the
//! process has only ever had one thread, though, nobody else can change the environment:
//! then it is compared in place with the copy the last spawn made, and that copy is used
//! again when nothing changed.
//!
//! "Only one thread" is glibc's `__libc_single_threaded` (2.32+; looked up at run time, so an
//! older glibc still loads us, and anything else reads as "maybe not"). glibc clears it for
//! good when a second thread is created, and never sets it again (nor in a child forked
//! from a threaded process), so a nonzero value means no other thread exists or has
//! existed. Threads made without `pthread_create` are outside what it sees, as they are
//! outside what libc itself supports.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

extern "C" {
    // Mutable: setenv and clearenv change it (as std declares it).
    static mut environ: *const *const c_char;
}

/// Copies of the environment taken for spawns (`copy`): a test's way to see that the
/// in-place comparison spared one.
static COPIES: AtomicUsize = AtomicUsize::new(0);

/// The environment as `std::env::vars_os` reads it (a copy under std's lock), counted.
fn copy<B: FromIterator<(OsString, OsString)>>() -> B {
    COPIES.fetch_add(1, Ordering::Relaxed);
    std::env::vars_os().collect()
}

/// An environment as `std::env::vars_os` reads it, shared.
pub(crate) type Vars = Arc<[(OsString, OsString)]>;

thread_local! {
    /// The last [`snapshot`] this thread took.
    static SNAPSHOT: RefCell<Option<Vars>> = const { RefCell::new(None) };
}

/// The environment as `std::env::vars_os` reads it now, shared: the last snapshot this
/// thread took when it still matches (one thread only, compared in place), else a new copy.
pub(crate) fn snapshot() -> Vars {
    if !single_threaded() {
        // Never reusable here: a copy each time, and none kept alive per thread.
        return copy();
    }
    let last = SNAPSHOT.try_with(|s| s.borrow().clone()).ok().flatten();
    if let Some(last) = last.filter(|l| matches_vars(l) == Some(true)) {
        return last;
    }
    let fresh: Vars = copy();
    let _ = SNAPSHOT.try_with(|s| *s.borrow_mut() = Some(Arc::clone(&fresh)));
    fresh
}

/// How many copies spawns have taken so far in this process (`copy`).
pub(crate) fn copies() -> usize {
    COPIES.load(Ordering::Relaxed)
}

/// Where glibc keeps `__libc_single_threaded`, if it has one.
fn single_threaded_flag() -> Option<usize> {
    static FLAG: OnceLock<Option<usize>> = OnceLock::new();
    *FLAG.get_or_init(|| {
        // SAFETY: dlsym with the default handle and a NUL-terminated name; it returns the
        // symbol's address or NULL.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__libc_single_threaded".as_ptr()) };
        (!p.is_null()).then_some(p as usize)
    })
}

/// Whether this process has only ever had one thread (false when it cannot tell).
pub(crate) fn single_threaded() -> bool {
    single_threaded_flag().is_some_and(|p| {
        // SAFETY: glibc's `char __libc_single_threaded`, a live static; a volatile read of
        // one byte.
        unsafe { core::ptr::read_volatile(p as *const c_char) != 0 }
    })
}

/// One `environ` entry as `std::env::vars_os` reads it: split at the first '=' after the
/// first byte (a name may start with '='); an empty entry or one without '=' is skipped.
fn parse(entry: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = entry.get(1..)?;
    let eq = 1 + rest.iter().position(|&b| b == b'=')?;
    Some((&entry[..eq], &entry[eq + 1..]))
}

/// With one thread only: whether the environment's entries now (those `std::env::vars_os`
/// reads, see [`parse`]) are `want`, in order, one for one. `same(entry, w)` says whether the
/// C string `entry` is exactly `w`, and must never say so of an entry std would skip (so `w`
/// must be one std could have read from it); an entry it does not match is passed over only
/// if std would skip it. `None` when another thread may exist: then only a copy taken under
/// std's lock may be read.
fn matches_by<T>(
    want: impl IntoIterator<Item = T>,
    same: impl Fn(*const c_char, &T) -> bool,
) -> Option<bool> {
    if !single_threaded() {
        return None;
    }
    let mut want = want.into_iter().peekable();
    // SAFETY: one thread, this one, so nothing changes `environ` or its strings while we
    // read them: a NULL-terminated array of NUL-terminated strings, or NULL (cleared).
    unsafe {
        let mut p = (&raw const environ).read();
        if !p.is_null() {
            while !(*p).is_null() {
                if want.peek().is_some_and(|w| same(*p, w)) {
                    want.next();
                } else if parse(CStr::from_ptr(*p).to_bytes()).is_some() {
                    return Some(false);
                }
                p = p.add(1);
            }
        }
    }
    Some(want.next().is_none())
}

/// Whether the C string at `s` begins with `prefix` (which holds no NUL); the rest of it
/// when it does. Reads no further than `s`'s NUL.
///
/// # Safety
/// `s` is a NUL-terminated string.
unsafe fn strip(s: *const c_char, prefix: &[u8]) -> Option<*const c_char> {
    if prefix.is_empty() {
        return Some(s);
    }
    // SAFETY: strncmp stops at the first NUL of `s`, and reads at most `prefix.len()` bytes
    // of `prefix`, none of them NUL; equal means `s` has those bytes before its NUL.
    let equal = unsafe { libc::strncmp(s, prefix.as_ptr() as *const c_char, prefix.len()) == 0 };
    // SAFETY: equal: `s` holds `prefix.len()` bytes before its NUL.
    equal.then(|| unsafe { s.add(prefix.len()) })
}

/// With one thread only: whether the environment is `vars`, as `std::env::vars_os` would
/// read it now (see [`matches_by`]). `vars` is a snapshot std read ([`copy`]): every name is
/// non-empty with no '=' after its first byte, and nothing holds a NUL, so an entry equal to
/// "name=value" is one std reads as that pair.
fn matches_vars(vars: &[(OsString, OsString)]) -> Option<bool> {
    matches_by(vars, |entry, (k, v)| {
        let (k, v) = (k.as_bytes(), v.as_bytes());
        // SAFETY: `entry` is one of environ's strings and `k`, `v` hold no NUL (read from C
        // strings); `strip` reads no further than the entry's NUL, and a byte it stops
        // before is in the string.
        unsafe {
            strip(entry, k).is_some_and(|rest| {
                *rest == b'=' as c_char && strip(rest.add(1), v).is_some_and(|end| *end == 0)
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::parse;

    /// Under libtest, which has threads: no snapshot is ever reused, and none is kept.
    #[test]
    fn with_threads_every_snapshot_is_a_copy() {
        assert!(!super::single_threaded(), "libtest runs tests on threads of their own");
        let (a, b) = (super::snapshot(), super::snapshot());
        assert!(!std::sync::Arc::ptr_eq(&a, &b));
        assert_eq!(super::matches_vars(&a), None);
        assert!(super::SNAPSHOT.with(|s| s.borrow().is_none()));
    }

    #[test]
    fn entries_split_as_std_splits_them() {
        assert_eq!(parse(b"A=1"), Some((&b"A"[..], &b"1"[..])));
        assert_eq!(parse(b"A=1=2"), Some((&b"A"[..], &b"1=2"[..])));
        assert_eq!(parse(b"A="), Some((&b"A"[..], &b""[..])));
        assert_eq!(parse(b"=A=1"), Some((&b"=A"[..], &b"1"[..])));
        assert_eq!(parse(b"NOEQUALS"), None);
        assert_eq!(parse(b"="), None);
        assert_eq!(parse(b""), None);
    }
}
