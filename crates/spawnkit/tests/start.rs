//! `Command::start`: the child cloned without CLONE_VFORK, its exec awaited later. What the
//! child sees is what a `spawn` gives it; the errors are `spawn`'s, only later; nothing is
//! leaked (fds, zombies, the stacks of children still starting) however it ends.

mod common;

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::{children_of_self, open_fds, serial, TempDir};
use spawnkit::{Command, ErrorKind, Starting, Stdio, Strategy};

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    c
}

fn readable(fd: std::os::fd::BorrowedFd<'_>, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout_ms) == 1 }
}

fn no_children_soon(what: &str) {
    let gone = common::wait_until(Duration::from_secs(10), || {
        spawnkit::reap_orphans();
        children_of_self().is_empty()
    });
    assert!(gone, "{what}: children left: {:?}", children_of_self());
}

#[test]
fn the_child_sees_what_spawn_gives_it() {
    let _g = serial();
    let dir = TempDir::new("start-cwd");
    let mut cmd = sh("echo $$; pwd; echo \"$SPAWNKIT_START_TEST\"; cat");
    cmd.current_dir(dir.path())
        .env("SPAWNKIT_START_TEST", "from the parent")
        .stdin(Stdio::Pipe)
        .stdout(Stdio::Pipe);
    let starting = cmd.start().unwrap();
    let fd = starting.fd().expect("a clone-vfork plan starts pending");
    assert!(readable(fd, 10_000), "the notify fd never became readable");
    let pid = starting.id().unwrap();
    let mut child = starting.finish().unwrap();
    assert_eq!(child.id(), pid);
    let out = child.communicate(Some(b"stdin reached the child\n"), None).unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], pid.to_string(), "the pid the parent was given is the child's own");
    assert_eq!(lines[1], dir.path().to_str().unwrap());
    assert_eq!(lines[2], "from the parent");
    assert_eq!(lines[3], "stdin reached the child");
    assert!(out.status.success());
}

#[test]
fn failures_come_from_finish_with_spawns_errors_and_leave_nothing() {
    let _g = serial();
    let before = open_fds();
    for _ in 0..3 {
        let err = Command::new("spawnkit-no-such-program")
            .stdout(Stdio::Pipe)
            .start()
            .unwrap()
            .finish()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        assert_eq!(err.step(), "execve", "{err}");
        let err = sh("exit 0")
            .current_dir("/nonexistent-spawnkit-dir")
            .start()
            .unwrap()
            .finish()
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");
        assert_eq!(err.step(), "chdir", "{err}");
        let spawned = sh("exit 0").current_dir("/nonexistent-spawnkit-dir").spawn().unwrap_err();
        assert_eq!(err.to_string(), spawned.to_string(), "start and spawn word it the same");
    }
    assert!(children_of_self().is_empty(), "a failed start left its child unreaped");
    assert_eq!(open_fds(), before, "fds leaked by failed starts");
}

#[test]
fn many_children_start_at_once_and_finish_in_order() {
    let _g = serial();
    let before = open_fds();
    let mut starting: Vec<Starting> = Vec::new();
    for i in 0..64 {
        let mut c = sh(&format!("echo child-{i}; exit {}", i % 5));
        c.stdout(Stdio::Pipe);
        starting.push(c.start().unwrap());
    }
    for (i, s) in starting.into_iter().enumerate() {
        let out = s.finish().unwrap().communicate(None, None).unwrap();
        assert_eq!(out.stdout, format!("child-{i}\n").as_bytes());
        assert_eq!(out.status.code(), Some(i as i32 % 5));
    }
    assert!(children_of_self().is_empty());
    assert_eq!(open_fds(), before);
}

#[test]
fn starts_from_many_threads_share_nothing_they_should_not() {
    let _g = serial();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for round in 0..25 {
                    let pending: Vec<Starting> = (0..4)
                        .map(|k| {
                            let mut c = sh(&format!("echo {t}-{round}-{k}"));
                            c.stdout(Stdio::Pipe);
                            c.start().unwrap()
                        })
                        .collect();
                    for (k, s) in pending.into_iter().enumerate() {
                        let out = s.finish().unwrap().communicate(None, None).unwrap();
                        assert_eq!(out.stdout, format!("{t}-{round}-{k}\n").as_bytes());
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(children_of_self().is_empty());
}

#[test]
fn a_start_dropped_unfinished_lets_the_child_run_and_is_reaped() {
    let _g = serial();
    let before = open_fds();
    let dir = TempDir::new("start-drop");
    let mark = dir.join("ran");
    let s = sh(&format!("sleep 0.2; echo ran > {}", mark.display())).start().unwrap();
    drop(s);
    let t = Instant::now();
    while !mark.exists() {
        assert!(t.elapsed() < Duration::from_secs(10), "the dropped start's child never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    no_children_soon("a dropped start");
    assert_eq!(open_fds(), before);
    // kill_on_drop holds for a start dropped unfinished too.
    let s = sh("sleep 30").kill_on_drop(true).start().unwrap();
    let pid = s.id().unwrap() as libc::pid_t;
    drop(s);
    // SAFETY: kill with signal 0 only checks the pid.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    assert!(!alive, "kill_on_drop: the child of a dropped start still runs");
}

#[test]
fn plans_that_need_the_thread_come_back_ready() {
    let _g = serial();
    let s = sh("exit 3").strategy(Strategy::ForkExec).start().unwrap();
    assert!(s.fd().is_none(), "fork-exec is spawned at once");
    assert_eq!(s.finish().unwrap().wait().unwrap().code(), Some(3));
    let err = Command::new("spawnkit-no-such-program")
        .strategy(Strategy::ForkExec)
        .start()
        .unwrap()
        .finish()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}

/// A closed fd number named as a stream fails as `spawn` fails (EBADF), even when the start's
/// own pipe took that number in the parent: the program never gets the pipe, and `finish`
/// does not wait for the program's life.
#[test]
fn a_closed_fd_named_as_a_stream_is_ebadf_not_the_start_pipe() {
    let _g = serial();
    let before = open_fds();
    let first_free = (3..).find(|fd| !before.contains(fd)).unwrap();
    for fd in first_free..first_free + 4 {
        if common::fd_is_open(fd) {
            continue;
        }
        let t = Instant::now();
        let err = sh("sleep 3").stdout(Stdio::Fd(fd)).start().unwrap().finish().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF), "fd {fd}: {err}");
        assert!(t.elapsed() < Duration::from_secs(2), "fd {fd}: finish waited for the program");
    }
    assert!(children_of_self().is_empty());
    assert_eq!(open_fds(), before);
}

/// The same when the pipe's *read* end took the closed number (the lowest free fd, the next
/// one open): the child's copy of it is not the caller's fd either, for every way a number
/// is named (a stream, a mapped fd, a kept fd), started or spawned by fork-exec, whose pipe
/// is made the same way.
#[test]
fn a_closed_fd_that_the_pipes_read_end_took_is_ebadf_too() {
    let _g = serial();
    let before = open_fds();
    type Name = fn(&mut Command, i32);
    let ways: [(&str, Name); 4] = [
        ("stdin", |c, n| {
            c.stdin(Stdio::Fd(n));
        }),
        ("stdout", |c, n| {
            c.stdout(Stdio::Fd(n));
        }),
        ("fd 5", |c, n| {
            c.fd(5, n);
        }),
        ("keep_fd", |c, n| {
            c.keep_fd(n);
        }),
    ];
    for (what, name) in ways {
        for fork_exec in [false, true] {
            // fd n: closed and the lowest free number; n + 1 open, so pipe2's read end is n.
            let a = std::fs::File::open("/dev/null").unwrap();
            let _b = std::fs::File::open("/dev/null").unwrap();
            let n = a.as_raw_fd();
            drop(a);
            let mut c = sh("sleep 3");
            name(&mut c, n);
            let t = Instant::now();
            let err = if fork_exec {
                c.strategy(Strategy::ForkExec).spawn().unwrap_err()
            } else {
                c.start().unwrap().finish().unwrap_err()
            };
            let how = if fork_exec { "fork-exec spawn" } else { "start" };
            assert_eq!(err.raw_os_error(), Some(libc::EBADF), "{what}, {how}: {err}");
            assert!(t.elapsed() < Duration::from_secs(2), "{what}, {how}: the program ran");
        }
    }
    no_children_soon("after the refused fds");
    assert_eq!(open_fds(), before);
}

/// Near the fd limit a start does what a spawn does: with two fds free its pipe would take
/// both and leave the clone none for the pidfd, where a spawn needs only that one; the start
/// then spawns. With 0 to 5 free, both succeed or both fail alike.
#[test]
fn a_start_near_the_fd_limit_does_what_a_spawn_does() {
    // Serial here too: the test binary run again alone is this process's child, which the
    // other tests' "no child left" checks would count.
    let _g = serial();
    if !common::alone("a_start_near_the_fd_limit_does_what_a_spawn_does") {
        return;
    }
    let open = open_fds().len() as u64;
    common::set_fd_limit(open + 16);
    let mut held = Vec::new();
    let fill = |held: &mut Vec<std::fs::File>| {
        while let Ok(f) = std::fs::File::open("/dev/null") {
            held.push(f);
        }
    };
    for free in 0..=5 {
        fill(&mut held);
        held.truncate(held.len() - free);
        let outcome = |r: spawnkit::Result<spawnkit::Child>| {
            r.and_then(|mut c| c.wait()).map(|s| s.success()).map_err(|e| e.raw_os_error())
        };
        let spawned = outcome(Command::new("true").spawn());
        let started = outcome(Command::new("true").start().and_then(Starting::finish));
        assert_eq!(started, spawned, "{free} fds free");
        if free >= 1 {
            assert_eq!(spawned, Ok(true), "{free} fds free");
        }
    }
}

/// Another thread's fork() never lands between a start's pipe and the close of its write end
/// (forklock.rs): a forked process that never execs would otherwise hold the write end, and
/// the start's finish would wait for it to exit (here 2 s).
#[test]
fn a_fork_elsewhere_does_not_hold_a_start_back() {
    let _g = serial();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let forker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut pids = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && pids.len() < 200 {
                // SAFETY: the child only sleeps and exits (async-signal-safe calls).
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    // SAFETY: as above.
                    unsafe {
                        libc::sleep(2);
                        libc::_exit(0);
                    }
                }
                pids.push(pid);
                std::thread::sleep(Duration::from_micros(300));
            }
            pids
        })
    };
    let mut slowest = Duration::ZERO;
    for _ in 0..400 {
        let t = Instant::now();
        let child = Command::new("true").start().unwrap().finish().unwrap();
        slowest = slowest.max(t.elapsed());
        drop(child);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for pid in forker.join().unwrap() {
        // SAFETY: reaping our own forked children.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    }
    spawnkit::reap_orphans();
    assert!(slowest < Duration::from_secs(1), "a start waited {slowest:?} for a forked process");
}

/// A fenced command (new namespaces in the clone, a private /tmp mounted by the child's steps)
/// starts as it spawns: the child is in namespaces of its own and sees its own /tmp.
#[test]
fn a_fenced_start_is_fenced_as_a_spawn() {
    let _g = serial();
    let theirs = |s: &str| std::fs::read_link(format!("/proc/self/ns/{s}")).unwrap();
    let mark = format!("spawnkit-start-fence-{}", std::process::id());
    std::fs::write(std::path::Path::new("/tmp").join(&mark), b"host").unwrap();
    let mut c = sh(&format!(
        "readlink /proc/self/ns/net /proc/self/ns/mnt; test -e /tmp/{mark} && echo leak || echo private"
    ));
    c.private_network(true).private_tmp(None, spawnkit::TmpOptions::default()).stdout(Stdio::Pipe);
    let out = c.start().unwrap().finish().unwrap().communicate(None, None).unwrap();
    let _ = std::fs::remove_file(std::path::Path::new("/tmp").join(&mark));
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_ne!(lines[0], theirs("net").to_str().unwrap(), "the network namespace is ours");
    assert_ne!(lines[1], theirs("mnt").to_str().unwrap(), "the mount namespace is ours");
    assert_eq!(lines[2], "private", "the host's /tmp reached the child");
}
