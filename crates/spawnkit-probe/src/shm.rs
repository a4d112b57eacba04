//! `shm-fixture [TOTAL_MIB A_MIB B_MIB [PARENT_MIB]]` (defaults 200 50 100 0): a known shared
//! anonymous region for the memory tests.
//!
//! The parent maps TOTAL MiB `MAP_SHARED | MAP_ANONYMOUS`; child A writes (touches every page
//! of) the first A MiB and exits; then child B writes the first B MiB and exits. The parent
//! reaps both, then reads the first PARENT MiB itself (0 by default: it never touches the
//! region, so its own RSS shows none of it), prints one line `ready PID START END` (its pid,
//! the region's start and end addresses in hex) and waits for EOF on its stdin, then exits.
//!
//! The region then holds max(A, B) MiB (pages written by processes that have exited) and
//! grows `Shmem` in /proc/meminfo by as much. Single-threaded, so fork is fine here.

use std::io::Write;

const MIB: usize = 1 << 20;

fn arg(args: &[String], i: usize, default: usize) -> usize {
    match args.get(i) {
        None => default,
        Some(a) => a.parse().unwrap_or_else(|_| {
            eprintln!("shm-fixture: {a:?} is not a number of MiB");
            std::process::exit(2)
        }),
    }
}

/// Write one byte in every page of `[base, base + len)`.
fn touch(base: *mut u8, len: usize) {
    let mut off = 0;
    while off < len {
        // SAFETY: `base..base+len` lies inside the writable mapping made in `main`.
        unsafe { base.add(off).write_volatile(1) };
        off += 4096;
    }
}

/// Read one byte of every page of `[base, base + len)` (maps the pages into this process).
fn read(base: *const u8, len: usize) -> u64 {
    let mut sum = 0u64;
    let mut off = 0;
    while off < len {
        // SAFETY: `base..base+len` lies inside the readable mapping made in `main`.
        sum += unsafe { base.add(off).read_volatile() } as u64;
        off += 4096;
    }
    sum
}

/// Fork a child that touches the first `len` bytes and exits; wait for it.
fn child_writes(base: *mut u8, len: usize) {
    // SAFETY: this process is single-threaded; the child only touches memory and _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        eprintln!("shm-fixture: fork: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    if pid == 0 {
        touch(base, len);
        // SAFETY: _exit ends the child without running the parent's atexit handlers.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waitpid writes the status of our own child into `status`.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        eprintln!("shm-fixture: child {pid} failed (status {status:#x})");
        std::process::exit(1);
    }
}

pub fn main(args: &[String]) {
    let total = arg(args, 0, 200) * MIB;
    let a = arg(args, 1, 50) * MIB;
    let b = arg(args, 2, 100) * MIB;
    let parent = arg(args, 3, 0) * MIB;
    if a > total || b > total || parent > total || total == 0 {
        eprintln!("shm-fixture: A, B and PARENT must be at most TOTAL, and TOTAL above 0");
        std::process::exit(2);
    }
    // SAFETY: a fresh anonymous shared mapping; no existing memory is affected.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        eprintln!("shm-fixture: mmap: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    let base = base as *mut u8;
    child_writes(base, a);
    child_writes(base, b);
    let _ = read(base, parent);
    let start = base as usize;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready {} {:x} {:x}", std::process::id(), start, start + total);
    let _ = out.flush();
    drop(out);
    // Wait with read(2) on a stack buffer: nothing allocated or touched after `ready`, so
    // the memory a test reads from now on stays put.
    let mut sink = [0u8; 256];
    loop {
        // SAFETY: read writes at most `sink.len()` bytes into `sink`.
        let n = unsafe { libc::read(0, sink.as_mut_ptr().cast(), sink.len()) };
        if n == 0 || (n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR))
        {
            break;
        }
    }
}
