//! A child killed by a signal before its execve, no step of it failing. By default an error
//! (`ChildDied`, naming the signal); with `may_die_before_exec` a `Child` whose wait gives the
//! signal, as CPython's `subprocess` and Rust's `std::process` hand such a child out (what
//! `spawnkit.subprocess` asks for). Locally and through a spawn server, which gets the flag
//! with the command.
//!
//! The window: 4,000 read-only bind mounts, which the child makes before its exec (root
//! only). A thread beside stops the first child still running this binary's image in a mount
//! namespace other than ours and kills it if it is still among its binds. A test binary of
//! its own: another test's child could be such a child.

use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spawnkit::{Command, ErrorKind, ExitStatus, PrivateServer};

mod parked;

fn is_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The binds the child makes before its exec: enough to keep it in its set-up steps for a
/// while.
const BINDS: usize = 4000;

/// SIGKILL the first child of `parent` (of any of its threads) caught in its bind steps: it
/// still runs this test binary's image, in a mount namespace other than `parent`'s (a child
/// parked in a server's pool shares the server's), and once stopped (SIGSTOP) it has fewer
/// than [`BINDS`] mounts of `dir`, so the kill cannot land after its report of the exec step.
/// A child caught too late is let go on (SIGCONT). Its pid, or `None` if none was caught
/// within 20 s.
fn killer(parent: u32, dir: PathBuf) -> JoinHandle<Option<i32>> {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let mnt = std::fs::read_link(format!("/proc/{parent}/ns/mnt")).unwrap();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut let_go = Vec::new();
        while Instant::now() < deadline {
            for c in parked::all_children(parent) {
                let c = c as i32;
                let same = |what: &str, want: &PathBuf| {
                    std::fs::read_link(format!("/proc/{c}/{what}")).ok().as_ref() == Some(want)
                };
                if let_go.contains(&c) || !same("exe", &exe) || same("ns/mnt", &mnt) {
                    continue;
                }
                signal(c, libc::SIGSTOP);
                if stopped(c) && same("exe", &exe) && binds_of(c, &dir) < BINDS {
                    signal(c, libc::SIGKILL);
                    return Some(c);
                }
                signal(c, libc::SIGCONT);
                let_go.push(c);
            }
        }
        None
    })
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid just read from /proc, a child of the parent watched (a child
    // is not reaped while it is stopped before its exec, nor before its spawn returns).
    unsafe { libc::kill(pid, sig) };
}

/// Wait (at most 1 s) until `pid` is stopped; false if it is gone or never stops.
fn stopped(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
        let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
        if state == Some('T') {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

/// How many mounts of `pid`'s namespace are at `dir`.
fn binds_of(pid: i32, dir: &std::path::Path) -> usize {
    let want = format!(" {} ", dir.display());
    let info = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
    info.lines().filter(|l| l.contains(&want)).count()
}

/// `/bin/true` behind [`BINDS`] read-only binds of a directory onto itself.
fn widened(dir: &std::path::Path, may_die: bool) -> Command {
    let mut cmd = Command::new("/bin/true");
    for _ in 0..BINDS {
        cmd.ro_bind(dir, dir);
    }
    cmd.may_die_before_exec(may_die);
    cmd
}

#[test]
fn a_child_killed_before_exec_is_an_error_or_a_child_to_wait_for() {
    if !is_root() {
        eprintln!("skipped: needs root (the bind mounts that widen the window)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("spawnkit-died-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut server = PrivateServer::start().unwrap();
    let killed = ExitStatus::Signaled { signal: libc::SIGKILL, core_dumped: false };
    for via_server in [false, true] {
        for may_die in [false, true] {
            let what = format!("via server {via_server}, may_die_before_exec {may_die}");
            let parent = if via_server { server.pid() } else { std::process::id() };
            // A child the killer was too late for runs /bin/true: try again (a few times).
            let mut tries = 0;
            let r = loop {
                let k = killer(parent, dir.clone());
                let mut cmd = widened(&dir, may_die);
                let r = if via_server { server.client().spawn(&cmd) } else { cmd.spawn() };
                if k.join().unwrap().is_some() {
                    break r;
                }
                tries += 1;
                assert!(tries < 5, "{what}: the test caught no child before its exec");
                assert!(r.unwrap().wait().unwrap().success(), "{what}: not caught, not fine");
            };
            if may_die {
                let mut child = r.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(child.wait().unwrap(), killed, "{what}");
            } else {
                let e = r.map(|_| ()).expect_err(&what);
                assert_eq!(e.kind(), ErrorKind::ChildDied, "{what}: {e}");
                assert!(e.to_string().contains("killed by SIGKILL before execve"), "{what}: {e}");
            }
        }
    }
    // The server still serves, and the flag did not make a failing step a child.
    let mut bad = Command::new("/no/such/program");
    bad.may_die_before_exec(true);
    let e = server.client().spawn(&bad).map(|_| ()).expect_err("no such program");
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
    let e = bad.spawn().map(|_| ()).expect_err("no such program");
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `pre_exec` hook that ends the child is `pre_exec_may_exit`'s to hand out, not this
/// flag's (with fork-exec a hook can also end the parent's wait while the child lives on).
#[test]
fn a_hook_that_ends_the_child_is_not_this_flags() {
    let mut cmd = Command::new("/bin/true");
    // SAFETY: the hook only calls _exit, which is async-signal-safe.
    unsafe { cmd.pre_exec(|| -> std::io::Result<()> { libc::_exit(3) }) };
    let e = cmd.may_die_before_exec(true).spawn().map(|_| ()).expect_err("ended in the hook");
    assert_eq!(e.kind(), ErrorKind::ChildDied, "{e}");
    let mut child = cmd.pre_exec_may_exit(true).spawn().expect("pre_exec_may_exit");
    assert_eq!(child.wait().unwrap(), ExitStatus::Exited(3));
}
