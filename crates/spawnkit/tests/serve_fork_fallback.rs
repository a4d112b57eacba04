//! A private server under a seccomp filter that refuses clone3 (ENOSYS) and clone(2) with
//! `CLONE_PIDFD` (EPERM), as an old sandbox's might: its fork-exec spawns take glibc's
//! fork() and open the child's pidfd after it, pinning the server's reaper meanwhile. The
//! filter is process-wide (installed with TSYNC, inherited by the server's fork): this binary
//! holds a single test function.

#![cfg(target_arch = "x86_64")]

mod common;

use std::time::Duration;

use spawnkit::serve::PrivateServer;
use spawnkit::{Command, ExitStatus, Stdio, Strategy};

/// Install the filter in every thread of this process.
fn refuse_clone3_and_clone_pidfd() {
    use libc::{sock_filter, sock_fprog};
    const CLONE3: u32 = 435;
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    let stmt = |code: u32, k: u32| sock_filter { code: code as u16, jt: 0, jf: 0, k };
    let jump = |code: u32, k: u32, jt: u8, jf: u8| sock_filter { code: code as u16, jt, jf, k };
    let (ld, jeq, jset, ret) = (
        libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
        libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
        libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K,
        libc::BPF_RET,
    );
    let prog = [
        stmt(ld, 4), // seccomp_data.arch
        jump(jeq, AUDIT_ARCH_X86_64, 1, 0),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
        stmt(ld, 0), // seccomp_data.nr
        jump(jeq, CLONE3, 0, 1),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        jump(jeq, libc::SYS_clone as u32, 0, 3),
        stmt(ld, 16), // args[0], low word: the flags
        jump(jset, libc::CLONE_PIDFD as u32, 0, 1),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
    ];
    let fp = sock_fprog { len: prog.len() as u16, filter: prog.as_ptr() as *mut sock_filter };
    // SAFETY: prctl and seccomp with valid arguments; `prog` outlives the call.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        let r = libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_TSYNC,
            &fp as *const sock_fprog,
        );
        assert_eq!(r, 0, "seccomp: {}", std::io::Error::last_os_error());
    }
}

/// Fork-exec requests, plain and status, through such a server: each child is handed out
/// (plain: its pidfd, opened after glibc's fork) or answered with its own exit code
/// (status). Beside them, clone-vfork requests: a status request's (no pidfd: clone(2)
/// without `CLONE_PIDFD`) is served; a plain one fails with an error naming the step, and
/// the connection goes on.
#[test]
fn fork_exec_requests_are_served_where_clone3_and_clone_pidfd_are_refused() {
    refuse_clone3_and_clone_pidfd();
    let mut server = PrivateServer::start().expect("private server");
    let cmds = common::exit_codes(4, Strategy::ForkExec);
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        common::status_rounds(server.client(), &cmds, 20, |client, round| {
            let mut child = client.spawn(&cmds[3]).expect("a plain request");
            assert_eq!(child.wait().expect("wait"), ExitStatus::Exited(3), "round {round}");
        });
        let mut vfork = Command::new(common::probe());
        vfork.args(["exit", "5"]).stdout(Stdio::Null);
        let client = server.client();
        assert_eq!(client.status(&vfork).expect("a bare clone(2)"), ExitStatus::Exited(5));
        let e = client.spawn(&vfork).expect_err("clone(2) with CLONE_PIDFD refused");
        assert!(e.step().contains("clone"), "{e}");
        let again = common::exit_codes(2, Strategy::ForkExec);
        common::status_rounds(client, &again, 2, |_, _| {});
        let _ = done_tx.send(server);
    });
    let server = done.recv_timeout(Duration::from_secs(120)).expect("every request answered");
    drop(server);
}
