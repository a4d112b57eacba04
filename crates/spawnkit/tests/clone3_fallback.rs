//! The clone(2) fallback of the clone-vfork strategy, used where clone3 is refused.
//!
//! `disable_clone3` is process-wide and so is the signal handler installed here: this binary
//! holds a single test function.

mod common;

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    dup_at_least, open_inheritable, probe_cmd, probe_state, run_state, sigbit, status_hex,
    status_via_cat, TempDir,
};
use spawnkit::{ExitStatus, Resource, Signal, Stdio, Strategy};

/// This process's pid, for the handler to tell itself apart from a CLONE_VM child.
static MY_PID: AtomicI32 = AtomicI32::new(0);
/// Set by the handler when it runs in another process: a child that shares our memory
/// (CLONE_VM) ran a handler of ours before execve, on its own stack.
static RAN_IN_CHILD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // SAFETY: getpid is async-signal-safe (a plain system call in glibc >= 2.25).
    if unsafe { libc::getpid() } != MY_PID.load(Ordering::Relaxed) {
        RAN_IN_CHILD.store(true, Ordering::Relaxed);
    }
}

fn install_handler(sig: i32) {
    // SAFETY: a plain handler for a catchable signal, with a zeroed sigaction and empty mask.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(sig, &sa, std::ptr::null_mut()), 0);
    }
}

/// Spawn `/bin/true` over and over for `time` while another thread sends SIGUSR1 (handled
/// in this process) to every child of the spawning thread, so some children get it while
/// they set up (all signals blocked; delivered when the mask is installed just before
/// execve). The parent's handler must never run in a child: handlers are reset first. Each
/// signalled child dies (default action), before or after execve. 2000 extra open fds make
/// the child's close_range slow, so most signals land during the setup. Returns the count of
/// children that died by SIGUSR1.
fn signal_children_during_setup(time: Duration) -> u32 {
    let null = std::fs::File::open("/dev/null").unwrap();
    let widen: Vec<std::fs::File> = (0..2000).map(|_| null.try_clone().unwrap()).collect();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU32::new(0));
    let spammer = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let list = format!("/proc/self/task/{tid}/children");
            while !stop.load(Ordering::Relaxed) {
                let Ok(text) = std::fs::read_to_string(&list) else { continue };
                for pid in text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                    // Open a pidfd first, then check the pid is still our child, so a
                    // recycled pid can never be signalled.
                    // SAFETY: pidfd_open takes integers and returns a new fd or -1.
                    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
                    if fd < 0 {
                        continue;
                    }
                    let still = std::fs::read_to_string(&list)
                        .map(|t| t.split_whitespace().any(|p| p == pid.to_string()))
                        .unwrap_or(false);
                    if still {
                        // SAFETY: a NULL siginfo is allowed; `fd` is our pidfd.
                        unsafe {
                            libc::syscall(
                                libc::SYS_pidfd_send_signal,
                                fd,
                                libc::SIGUSR1,
                                std::ptr::null::<u8>(),
                                0,
                            )
                        };
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    // SAFETY: closing our own fd.
                    unsafe { libc::close(fd) };
                }
            }
        })
    };
    let end = Instant::now() + time;
    let mut signaled = 0;
    while Instant::now() < end {
        let mut cmd = spawnkit::Command::new("/bin/true");
        cmd.strategy(Strategy::CloneVfork);
        match cmd.spawn() {
            Ok(mut child) => {
                let status = child.wait().unwrap();
                assert!(
                    status.success() || status.signal() == Some(libc::SIGUSR1),
                    "unexpected {status}"
                );
                if !status.success() {
                    signaled += 1;
                }
            }
            // Killed by SIGUSR1 before execve: the default action, as wanted.
            Err(e) => {
                assert_eq!(e.kind(), spawnkit::ErrorKind::ChildDied, "{e}");
                signaled += 1;
            }
        }
        assert!(!RAN_IN_CHILD.load(Ordering::Relaxed), "a parent handler ran in a child");
    }
    stop.store(true, Ordering::Relaxed);
    spammer.join().unwrap();
    drop(widen);
    assert!(sent.load(Ordering::Relaxed) > 0, "no child was ever signalled");
    signaled
}

#[test]
fn spawns_work_after_disable_clone3() {
    MY_PID.store(std::process::id() as i32, Ordering::Relaxed);
    let s = Strategy::CloneVfork;
    // Before: clone3 (with CLONE_CLEAR_SIGHAND) on this kernel.
    assert!(probe_cmd(s, ["exit", "0"]).status().unwrap().success());
    assert!(spawnkit::uses_clone3());

    // With clone3, CLONE_CLEAR_SIGHAND resets handlers; a handler of ours must never run in
    // a child between clone and execve.
    install_handler(libc::SIGUSR1);
    let n = signal_children_during_setup(Duration::from_millis(1500));
    assert!(n > 0, "no child died of SIGUSR1");
    assert!(spawnkit::uses_clone3());

    spawnkit::disable_clone3();
    assert!(!spawnkit::uses_clone3());
    // Now the child resets them by hand.
    let n = signal_children_during_setup(Duration::from_millis(1500));
    assert!(n > 0, "no child died of SIGUSR1");
    assert!(!spawnkit::uses_clone3());

    // Handled signals show as not caught in the exec'd child (execve resets handlers too, so
    // this checks the fallback path end to end rather than the reset itself).
    install_handler(libc::SIGTERM);
    install_handler(libc::SIGRTMIN() + 2);
    let handled = sigbit(libc::SIGUSR1) | sigbit(libc::SIGTERM) | sigbit(libc::SIGRTMIN() + 2);
    let me = std::fs::read_to_string("/proc/self/status").unwrap();
    let cgt = me.lines().find_map(|l| l.strip_prefix("SigCgt:")).unwrap().trim();
    assert_eq!(u64::from_str_radix(cgt, 16).unwrap() & handled, handled, "setup");

    let st = status_via_cat(s, |_| {});
    assert_eq!(status_hex(&st, "SigCgt"), 0, "a handler survived into the child");
    assert_eq!(status_hex(&st, "SigBlk"), 0);
    let st = probe_state(s, |_| {});
    assert_eq!(st.hex("sigcgt") & handled, 0);
    assert_eq!(st.hex("sigblk"), 0);
    assert!(!spawnkit::uses_clone3(), "disable_clone3 did not stick");

    // The rest of the engine works the same on the clone(2) path.
    let dir = TempDir::new("clone-fallback");
    let f = dir.file("a", b"a", 0o644);
    let file = std::fs::File::open(&f).unwrap();
    let leak = open_inheritable(&f);
    let high = dup_at_least(&file, 200);
    let st = probe_state(s, |c| {
        c.current_dir(dir.path())
            .env("SPAWNKIT_FALLBACK", "1")
            .fd(5, high.as_raw_fd())
            .rlimit(Resource::Nofile, 77, 88)
            .umask(0o077)
            .signal_mask([Signal::HUP].into_iter().collect());
    });
    assert_eq!(st.get("cwd"), dir.path().to_str().unwrap());
    assert_eq!(st.env["SPAWNKIT_FALLBACK"], "1");
    assert_eq!(st.fd_numbers(), [0, 1, 2, 5], "{}", st.get("fds"));
    assert_eq!(st.fd(5).unwrap().target, f.to_str().unwrap());
    assert_eq!(st.limit("NOFILE"), ("77".into(), "88".into()));
    assert_eq!(st.get("umask"), "0077");
    assert_eq!(st.hex("sigblk"), sigbit(libc::SIGHUP));
    drop(leak);

    // Errors, statuses and communicate.
    let err = probe_cmd(s, ["exit", "0"]).current_dir("/nope").spawn().unwrap_err();
    assert_eq!(err.to_string(), "chdir \"/nope\": No such file or directory (os error 2)");
    assert_eq!(common::children_of_self(), []);
    assert_eq!(probe_cmd(s, ["exit", "9"]).status().unwrap(), ExitStatus::Exited(9));
    let mut child = probe_cmd(s, ["cat"]).stdin(Stdio::Pipe).stdout(Stdio::Pipe).spawn().unwrap();
    let out = child.communicate(Some(b"through clone(2)"), None).unwrap();
    assert_eq!(out.stdout, b"through clone(2)");
    let st = run_state(probe_cmd(s, ["state"]).setsid(true));
    assert_eq!(st.int("sid"), st.int("pid"));

    // A user namespace with its maps, on the clone(2) path too (no clone3-only flag needed:
    // privileged, the spawning thread writes the maps between the clone and the exec).
    let st = run_state(probe_cmd(s, ["state"]).user_map(spawnkit::UserMap::Root));
    assert!(st.get("uid").starts_with("0\t0\t0\t0"), "{}", st.get("uid"));
    assert!(!spawnkit::uses_clone3());
}
