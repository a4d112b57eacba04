//! A parent that sets SIGCHLD to SIG_IGN: the kernel reaps its children by itself, so
//! waits must fail with a clear ECHILD error instead of hanging or inventing a status, and
//! failed spawns must still report their real error.
//!
//! SIGCHLD's disposition is process-wide: every test here sets it to SIG_IGN and none
//! restores it, so they may run in any order or at once.

mod common;

use std::time::Duration;

use common::{children_of_self, probe_cmd, FULL};
use spawnkit::{ErrorKind, Strategy};

fn ignore_sigchld() {
    // SAFETY: setting SIGCHLD to SIG_IGN with signal(2) is a plain disposition change.
    let old = unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    assert_ne!(old, libc::SIG_ERR);
}

#[test]
fn waits_report_echild_when_sigchld_is_ignored() {
    ignore_sigchld();

    for s in Strategy::ALL {
        let mut child = probe_cmd(s, ["sleep", "0.2"]).spawn().unwrap();
        let pid = child.id();
        let err = child.wait().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Os, "{s}: {err}");
        assert_eq!(err.raw_os_error(), Some(libc::ECHILD), "{s}: {err}");
        assert_eq!(
            err.to_string(),
            format!(
                "waitid pid {pid}: the child was reaped by someone else \
                 (a waitpid(-1) or SIGCHLD set to SIG_IGN?)"
            ),
            "{s}"
        );
        assert_eq!(child.status(), None, "{s}");
        // A later try_wait says the same, and dropping the handle does not hang.
        assert_eq!(child.try_wait().unwrap_err().raw_os_error(), Some(libc::ECHILD), "{s}");
        drop(child);

        let mut child = probe_cmd(s, ["sleep", "30"]).spawn().unwrap();
        child.kill().unwrap();
        let r = child.wait_timeout(Duration::from_secs(20));
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ECHILD), "{s}");
    }

    // Failed spawns still name the failed step (fork-exec: see the test below).
    for s in [Strategy::CloneVfork, Strategy::PosixSpawn] {
        for _ in 0..20 {
            let err = probe_cmd(s, ["exit", "0"]).current_dir("/nope").spawn().unwrap_err();
            assert_eq!(err.step(), "chdir", "{s}: {err}");
            assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{s}: {err}");
        }
    }
    assert!(common::wait_until(Duration::from_secs(20), || children_of_self().is_empty()));
}

#[test]
fn failed_fork_exec_spawn_names_the_step_when_sigchld_is_ignored() {
    ignore_sigchld();
    for s in FULL {
        for i in 0..100 {
            let err = probe_cmd(s, ["exit", "0"]).current_dir("/nope").spawn().unwrap_err();
            assert_eq!(
                err.to_string(),
                "chdir \"/nope\": No such file or directory (os error 2)",
                "{s}, try {i}"
            );
        }
    }
}
