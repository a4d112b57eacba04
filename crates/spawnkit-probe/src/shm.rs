//! `shm-fixture [TOTAL_MIB A_MIB B_MIB [PARENT_MIB]]` (defaults 200 50 100 0): a known shared
//! anonymous region for the memory tests.
//!
//! The parent maps TOTAL MiB `MAP_SHARED | MAP_ANONYMOUS`; child A writes (touches every page
//! of) the first A MiB and exits; then child B writes the first B MiB and exits. The parent
//! reaps both, then reads the first PARENT MiB itself (0 by default: it never touches the
//! region, so its own RSS shows none of it), waits until it is the one process mapping those
//! pages (an exited child's memory outlives it while another process reads its smaps),
//! prints one line `ready PID START END` (its pid, the region's start and end addresses in
//! hex) and waits for EOF on its stdin, then exits.
//!
//! The region then holds max(A, B) MiB (pages written by processes that have exited) and
//! grows `Shmem` in /proc/meminfo by as much. Single-threaded, so fork is fine here.
//!
//! Two more shapes, chosen by the first argument:
//!
//! - `shm-fixture sysv SIZE_MIB WRITE_MIB [newipc]`: a System V segment of SIZE MiB (shmget
//!   IPC_PRIVATE, shmat, marked for removal at once so it never outlives the process), its
//!   first WRITE MiB written; with `newipc`, in an IPC namespace of its own (unshare
//!   CLONE_NEWIPC, needs root), where segment ids start again from 0. Prints `ready PID SHMID`.
//! - `shm-fixture private-cow`: a 64-page memfd written with write(2), mapped MAP_PRIVATE;
//!   the process writes pages 0..16 (copy-on-write: anonymous pages), forks a child that
//!   keeps those copies mapped too (so they are shared, not private), then reads pages 16..48
//!   (file pages only it maps: 32 pages of private shmem). Prints `ready PID CHILD_PID`.
//!
//! - `shm-fixture sysv-ns SIZE_A_MIB SIZE_B_MIB` (needs root): segment A (SIZE_A MiB, all
//!   written) in this IPC namespace, attached; a child inherits the attachment, moves to an
//!   IPC namespace of its own (unshare CLONE_NEWIPC), sets its `shm_next_id` so that its
//!   segment B (SIZE_B MiB, all written) gets A's id, and attaches B too. So A is mapped by
//!   two processes in two IPC namespaces, and A and B share device and inode number (the id).
//!   Prints `ready PID CHILD_PID SHMID`.
//! - `shm-fixture leader-exits SIZE_MIB [sysv]`: SIZE MiB mapped `MAP_SHARED |
//!   MAP_ANONYMOUS` and written, then the main thread exits (exit(2), the thread alone) while
//!   a second thread keeps the process alive: /proc/PID shows a zombie leader whose mm files
//!   read empty. The thread prints `ready PID START END`. With `sysv`, first a 4 MiB SysV
//!   segment is attached and written and a child forked that keeps it attached (and waits
//!   for EOF): the line is then `ready PID START END CHILD_PID SHMID`.
//!
//! Every shape waits for EOF on stdin, then exits (the child of `private-cow` and `sysv-ns`
//! too).

use std::io::Write;

use crate::sys::{self, Region};

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

/// Fork a child that touches the first `len` bytes and exits; wait for it.
fn child_writes(region: Region, len: usize) {
    let pid = sys::fork();
    if pid < 0 {
        eprintln!("shm-fixture: fork: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    if pid == 0 {
        region.touch(0, len);
        sys::exit_process(0);
    }
    let (r, status) = sys::waitpid(pid);
    if r != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        eprintln!("shm-fixture: child {pid} failed (status {status:#x})");
        std::process::exit(1);
    }
}

/// Wait (up to 10 s) until this process is the one mapper of the region's pages it maps:
/// none of them shared (`Shared_Clean` and `Shared_Dirty` of the region's block in
/// /proc/self/smaps, one page walk). A child that has exited and been reaped may still map
/// them for a while: a process reading its /proc/PID/smaps holds its memory, which is then
/// torn down when that reader lets go, not at the exit.
fn alone_in_the_region(start: usize) {
    let shared_kb = || -> Option<u64> {
        let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let block = text.split_once(&*format!("\n{start:x}-")).map(|(_, b)| b)?;
        let mut sum = 0;
        // The block's lines up to the next mapping's header (which has no `Key:` first).
        for line in block.lines().skip(1) {
            let Some((key, value)) = line.split_once(':') else { break };
            if key.contains(' ') {
                break;
            }
            if key == "Shared_Clean" || key == "Shared_Dirty" {
                sum += value.split_whitespace().next()?.parse::<u64>().ok()?;
            }
        }
        Some(sum)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while shared_kb() != Some(0) {
        if std::time::Instant::now() > deadline {
            eprintln!("shm-fixture: still not the region's one mapper after 10 s");
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Block in read(2) on stdin until EOF, touching no memory but a stack buffer.
fn wait_for_eof() {
    let mut sink = [0u8; 256];
    loop {
        let n = sys::read(0, &mut sink);
        if n == 0 || (n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR))
        {
            break;
        }
    }
}

fn fail(what: &str) -> ! {
    eprintln!("shm-fixture: {what}: {}", std::io::Error::last_os_error());
    std::process::exit(1)
}

fn ready(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// `sysv SIZE_MIB WRITE_MIB [newipc]`.
fn sysv(args: &[String]) {
    let size = arg(args, 0, 4) * MIB;
    let write = arg(args, 1, 1) * MIB;
    if write > size || size == 0 {
        eprintln!("shm-fixture sysv: WRITE_MIB must be at most SIZE_MIB, and SIZE above 0");
        std::process::exit(2);
    }
    let new_ipc = match args.get(2).map(String::as_str) {
        None => false,
        Some("newipc") => true,
        Some(other) => {
            eprintln!("shm-fixture sysv: {other:?} is not 'newipc'");
            std::process::exit(2);
        }
    };
    if new_ipc && sys::unshare_ipc() != 0 {
        fail("unshare(CLONE_NEWIPC)");
    }
    let (id, _) = sysv_segment(size, write);
    ready(format_args!("ready {} {id}", std::process::id()));
    wait_for_eof();
}

/// Fork a child that keeps this process's mappings (and SysV attachments), waits for EOF on
/// stdin and exits; its pid. Only while this process is single-threaded.
fn fork_waiting_child() -> i32 {
    let child = sys::fork();
    if child < 0 {
        fail("fork");
    }
    if child == 0 {
        wait_for_eof();
        sys::exit_process(0);
    }
    child
}

/// `mmap(MAP_SHARED | MAP_ANONYMOUS)` of `len` bytes, readable and writable (exits on failure).
fn map_shared_anonymous(len: usize) -> Region {
    sys::mmap(len, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1).unwrap_or_else(|| fail("mmap"))
}

/// shmget IPC_PRIVATE of `size` bytes, attached, marked for removal at once (it goes when
/// the last process detaches, so it never outlives the fixture), its first `write` bytes
/// written: (id, address).
fn sysv_segment(size: usize, write: usize) -> (i32, Region) {
    let id = sys::shmget_private(size);
    if id < 0 {
        fail("shmget");
    }
    let region = sys::shmat(id, size).unwrap_or_else(|| fail("shmat"));
    sys::shm_remove(id);
    region.touch(0, write.min(size));
    (id, region)
}

/// `sysv-ns SIZE_A_MIB SIZE_B_MIB`.
fn sysv_ns(args: &[String]) {
    let (size_a, size_b) = (arg(args, 0, 16) * MIB, arg(args, 1, 4) * MIB);
    if size_a == 0 || size_b == 0 {
        eprintln!("shm-fixture sysv-ns: sizes must be above 0");
        std::process::exit(2);
    }
    let (id, _) = sysv_segment(size_a, size_a);
    let (pipe, r) = sys::pipe2(0);
    if r != 0 {
        fail("pipe");
    }
    let child = sys::fork();
    if child < 0 {
        fail("fork");
    }
    if child == 0 {
        if sys::unshare_ipc() != 0 {
            fail("unshare(CLONE_NEWIPC)");
        }
        if std::fs::write("/proc/sys/kernel/shm_next_id", id.to_string()).is_err() {
            fail("write /proc/sys/kernel/shm_next_id");
        }
        let (id_b, _) = sysv_segment(size_b, size_b);
        if id_b != id {
            eprintln!("shm-fixture sysv-ns: segment B got id {id_b}, not {id}");
            std::process::exit(1);
        }
        sys::write(pipe[1], &[1u8]);
        wait_for_eof();
        sys::exit_process(0);
    }
    sys::close(pipe[1]);
    let got = sys::read(pipe[0], &mut [0u8]);
    if got != 1 {
        eprintln!("shm-fixture sysv-ns: the child failed");
        std::process::exit(1);
    }
    ready(format_args!("ready {} {child} {id}", std::process::id()));
    wait_for_eof();
    sys::waitpid(child);
}

/// `leader-exits SIZE_MIB [sysv]`.
fn leader_exits(args: &[String]) {
    let size = arg(args, 0, 32) * MIB;
    let sysv = match args.get(1).map(String::as_str) {
        None => None,
        Some("sysv") => {
            let (id, _) = sysv_segment(4 * MIB, 4 * MIB);
            Some((fork_waiting_child(), id))
        }
        Some(other) => {
            eprintln!("shm-fixture leader-exits: {other:?} is not 'sysv'");
            std::process::exit(2);
        }
    };
    let base = map_shared_anonymous(size);
    base.touch(0, size);
    let start = base.start();
    std::thread::spawn(move || {
        // Until the main thread has exited: the leader stays, a zombie (state Z in stat).
        let me = std::process::id();
        let zombie = || {
            let stat = std::fs::read(format!("/proc/{me}/stat")).unwrap_or_default();
            let after = stat.iter().rposition(|&b| b == b')').map_or(&[][..], |i| &stat[i..]);
            after.starts_with(b") Z")
        };
        while !zombie() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        match sysv {
            None => ready(format_args!("ready {me} {:x} {:x}", start, start + size)),
            Some((child, id)) => {
                ready(format_args!("ready {me} {:x} {:x} {child} {id}", start, start + size))
            }
        }
        wait_for_eof();
        if let Some((child, _)) = sysv {
            sys::waitpid(child);
        }
        // _exit ends the whole process (exit_group) at once.
        sys::exit_process(0);
    });
    // The spawned thread uses only what it owns.
    sys::exit_thread();
}

/// `private-cow`.
fn private_cow() {
    const PAGE: usize = 4096;
    const PAGES: usize = 64;
    let fd = sys::memfd_create(c"spawnkit-private-cow", libc::MFD_CLOEXEC);
    if fd < 0 {
        fail("memfd_create");
    }
    let content = vec![5u8; PAGES * PAGE];
    let mut done = 0;
    while done < content.len() {
        let n = sys::write(fd, &content[done..]);
        if n <= 0 {
            fail("write the memfd");
        }
        done += n as usize;
    }
    let base = sys::mmap(PAGES * PAGE, libc::MAP_PRIVATE, fd).unwrap_or_else(|| fail("mmap"));
    base.touch(0, 16 * PAGE);
    let child = fork_waiting_child();
    let _ = base.read(16 * PAGE, 32 * PAGE);
    ready(format_args!("ready {} {child}", std::process::id()));
    wait_for_eof();
    sys::waitpid(child);
}

pub fn main(args: &[String]) {
    match args.first().map(String::as_str) {
        Some("sysv") => return sysv(&args[1..]),
        Some("private-cow") => return private_cow(),
        Some("sysv-ns") => return sysv_ns(&args[1..]),
        Some("leader-exits") => return leader_exits(&args[1..]),
        _ => {}
    }
    let total = arg(args, 0, 200) * MIB;
    let a = arg(args, 1, 50) * MIB;
    let b = arg(args, 2, 100) * MIB;
    let parent = arg(args, 3, 0) * MIB;
    if a > total || b > total || parent > total || total == 0 {
        eprintln!("shm-fixture: A, B and PARENT must be at most TOTAL, and TOTAL above 0");
        std::process::exit(2);
    }
    let base = map_shared_anonymous(total);
    child_writes(base, a);
    child_writes(base, b);
    let _ = base.read(0, parent);
    let start = base.start();
    alone_in_the_region(start);
    ready(format_args!("ready {} {:x} {:x}", std::process::id(), start, start + total));
    // Wait with read(2) on a stack buffer: nothing allocated or touched after `ready`, so
    // the memory a test reads from now on stays put.
    wait_for_eof();
}
