//! The child's stack: an `mmap`'d region with a `PROT_NONE` guard page below it.
//!
//! Stacks are cached per thread: a CLONE_VFORK child is done with its stack by the time the
//! clone returns, so the next spawn from the same thread reuses it without a system call.

use std::cell::RefCell;

/// Usable stack size. The child's deepest path (the close_range fallback with its 4 KiB
/// getdents buffer) needs well under 16 KiB even in debug builds; 64 KiB leaves margin, and
/// pages never touched cost nothing.
const STACK_SIZE: usize = 64 * 1024;

pub(crate) struct Stack {
    map: *mut u8,
    len: usize,
    guard: usize,
}

// SAFETY: a Stack is a private mapping owned by nobody else; which thread unmaps it does not
// matter (it is handed back only when no child runs on it).
unsafe impl Send for Stack {}

impl Stack {
    pub(crate) fn new() -> Result<Stack, i32> {
        let guard = page_size();
        let len = STACK_SIZE + guard;
        // SAFETY: anonymous private mapping; no existing memory is touched.
        let map = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(super::last_errno());
        }
        // SAFETY: the first page of our own fresh mapping becomes the guard page.
        if unsafe { libc::mprotect(map, guard, libc::PROT_NONE) } != 0 {
            let e = super::last_errno();
            // SAFETY: unmapping the region we just mapped.
            unsafe { libc::munmap(map, len) };
            return Err(e);
        }
        Ok(Stack { map: map as *mut u8, len, guard })
    }

    /// Lowest usable address (above the guard page).
    pub(crate) fn base(&self) -> *mut u8 {
        // SAFETY: `guard` < `len`, inside the mapping.
        unsafe { self.map.add(self.guard) }
    }

    pub(crate) fn size(&self) -> usize {
        self.len - self.guard
    }

    /// One past the highest address: the initial stack pointer (16-byte aligned).
    pub(crate) fn top(&self) -> *mut u8 {
        // SAFETY: one past the end of the mapping.
        unsafe { self.map.add(self.len) }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the region was mapped by `new` and no child runs on it any more.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

thread_local! {
    static CACHE: RefCell<Option<Stack>> = const { RefCell::new(None) };
}

/// Run `f` with this thread's cached stack, creating it on first use.
pub(crate) fn with_stack<R>(f: impl FnOnce(&Stack) -> R) -> Result<R, i32> {
    let cached = CACHE.try_with(|c| c.borrow_mut().take()).ok().flatten();
    let stack = match cached {
        Some(s) => s,
        None => Stack::new()?,
    };
    let r = f(&stack);
    // A re-entrant spawn on this thread (none today) would simply make its own stack.
    let _ = CACHE.try_with(|c| *c.borrow_mut() = Some(stack));
    Ok(r)
}

/// Stacks of children that were cloned without CLONE_VFORK and have since exec'd or exited
/// (sys/mod.rs `Launch`), kept for the next such spawn from any thread.
static SPARE: std::sync::Mutex<Vec<Stack>> = std::sync::Mutex::new(Vec::new());

/// At most this many spare stacks are kept (64 KiB of address space each; only the pages a
/// child touched are memory).
const SPARE_MAX: usize = 64;

/// A stack for a child that outlives this call: a spare one, or a new one.
///
/// The list is only ever tried (`try_lock`), never waited for: a process forked by another
/// thread while it was held must still be able to start children.
pub(crate) fn take_spare() -> Result<Stack, i32> {
    let spare = SPARE.try_lock().map(|mut v| v.pop()).unwrap_or(None);
    match spare {
        Some(s) => Ok(s),
        None => Stack::new(),
    }
}

/// Hand back a stack no child runs on any more.
pub(crate) fn put_spare(stack: Stack) {
    if let Ok(mut v) = SPARE.try_lock() {
        if v.len() < SPARE_MAX {
            v.push(stack);
        }
    }
}
