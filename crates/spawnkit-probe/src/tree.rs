//! `tree DEPTH WIDTH [COMM]`: a known process tree for the listing tests.
//!
//! The root forks WIDTH children, each of them forks WIDTH children, and so on DEPTH levels
//! below the root: `1 + WIDTH + WIDTH^2 + ... + WIDTH^DEPTH` processes (DEPTH 0 is the root
//! alone). Every node, the root included, sets its `comm` to COMM with `prctl(PR_SET_NAME)`
//! when one is given (odd names welcome: `"a b) (c\nd"`; the kernel keeps the first 15 bytes).
//!
//! Protocol:
//! - Each child sets `PR_SET_PDEATHSIG` to SIGKILL (so the tree dies with its root), points
//!   its stdin and stdout at /dev/null (a reader of the root's stdout sees EOF when the root
//!   exits), sets its comm, forks its own children, and only then reports itself to the root
//!   through a pipe. So when a node is reported, its name is set and its children exist.
//! - When every node has been reported, the root prints one line, `ready PID PID ...`: the
//!   root's pid first, then the others level by level, each level in increasing pid order.
//! - The root then reads its stdin to EOF and exits 0; the others sleep in `pause()` until the
//!   death of their parent kills them (or a SIGTERM does).
//! - If a fork fails, or the tree is not complete within 60 s, the root prints `error ...` to
//!   stderr and exits 1 (the nodes that exist die with it).
//!
//! The probe is single-threaded, so plain `fork()` is safe here.

use std::io::{Read, Write};

use crate::sys;

/// One report through the pipe: (pid, depth) of a node that is ready, or (-errno, depth) of a
/// node whose fork failed. 8 bytes < PIPE_BUF, so writes from many children never interleave.
type Record = [i32; 2];

fn set_comm(comm: &[u8]) {
    sys::set_name(comm);
}

fn report(fd: i32, rec: Record) {
    let mut bytes = [0u8; std::mem::size_of::<Record>()];
    bytes[..4].copy_from_slice(&rec[0].to_ne_bytes());
    bytes[4..].copy_from_slice(&rec[1].to_ne_bytes());
    sys::write(fd, &bytes);
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// Fork the WIDTH children of a node at `depth` (each builds its own subtree, reports itself
/// and pauses; it never returns here). Returns false when a fork failed (already reported).
fn fork_children(depth: u32, max: u32, width: u32, comm: Option<&[u8]>, wfd: i32) -> bool {
    if depth >= max {
        return true;
    }
    let parent = sys::getpid();
    for _ in 0..width {
        let pid = sys::fork();
        if pid < 0 {
            report(wfd, [-errno(), depth as i32 + 1]);
            return false;
        }
        if pid == 0 {
            child(parent, depth + 1, max, width, comm, wfd);
        }
    }
    true
}

fn child(parent: i32, depth: u32, max: u32, width: u32, comm: Option<&[u8]>, wfd: i32) -> ! {
    sys::set_pdeathsig(libc::SIGKILL);
    if sys::getppid() != parent {
        // The parent died before PR_SET_PDEATHSIG took effect.
        sys::exit_process(1);
    }
    sys::null_stdin_stdout();
    if let Some(c) = comm {
        set_comm(c);
    }
    if fork_children(depth, max, width, comm, wfd) {
        report(wfd, [sys::getpid(), depth as i32]);
    }
    loop {
        // pause returns only after a caught signal (none are).
        sys::pause();
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("error tree: {msg}");
    std::process::exit(1);
}

pub fn main(args: &[String]) {
    let num = |i: usize, what: &str| -> u32 {
        match args.get(i).map(|a| a.parse::<u32>()) {
            Some(Ok(n)) => n,
            _ => fail(&format!("usage: tree DEPTH WIDTH [COMM] (bad {what})")),
        }
    };
    let (depth, width) = (num(0, "DEPTH"), num(1, "WIDTH"));
    let comm = args.get(2).map(|s| s.as_bytes());
    let mut total: u64 = 0;
    let mut level: u64 = 1;
    for _ in 0..depth {
        level = level.saturating_mul(width as u64);
        total = total.saturating_add(level);
    }
    if total > 100_000 {
        fail(&format!("{total} processes is too many"));
    }
    let (fds, r) = sys::pipe2(libc::O_CLOEXEC);
    if r != 0 {
        fail(&format!("pipe2: {}", std::io::Error::last_os_error()));
    }
    let (rfd, wfd) = (fds[0], fds[1]);
    if let Some(c) = comm {
        set_comm(c);
    }
    fork_children(0, depth, width, comm, wfd);
    // Our copy of the write end is no longer needed.
    sys::close(wfd);

    let root = sys::getpid();
    let mut nodes: Vec<(i32, i32)> = Vec::with_capacity(total as usize);
    let mut buf = [0u8; 8 * 512];
    let mut have = 0usize;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while (nodes.len() as u64) < total {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let r = sys::poll_in(rfd, left.as_millis().max(1) as i32);
        if r == 0 {
            fail(&format!("timed out: {} of {total} nodes reported", nodes.len()));
        }
        if r < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            fail(&format!("poll: {}", std::io::Error::last_os_error()));
        }
        let n = sys::read(rfd, &mut buf[have..]);
        if n == 0 {
            fail(&format!("every node exited: {} of {total} reported", nodes.len()));
        }
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            fail(&format!("read: {}", std::io::Error::last_os_error()));
        }
        have += n as usize;
        let whole = have / 8 * 8;
        for rec in buf[..whole].chunks_exact(8) {
            let pid = i32::from_ne_bytes(rec[..4].try_into().unwrap());
            let level = i32::from_ne_bytes(rec[4..].try_into().unwrap());
            if pid < 0 {
                let e = std::io::Error::from_raw_os_error(-pid);
                fail(&format!("fork at depth {level}: {e}"));
            }
            nodes.push((level, pid));
        }
        buf.copy_within(whole..have, 0);
        have -= whole;
    }
    // The read end is no longer needed.
    sys::close(rfd);
    nodes.sort_unstable();
    let mut line = format!("ready {root}");
    for (_, pid) in &nodes {
        line += &format!(" {pid}");
    }
    line.push('\n');
    let mut out = std::io::stdout().lock();
    if out.write_all(line.as_bytes()).and_then(|_| out.flush()).is_err() {
        std::process::exit(1);
    }
    drop(out);
    let mut sink = [0u8; 4096];
    let mut stdin = std::io::stdin().lock();
    loop {
        match stdin.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}
