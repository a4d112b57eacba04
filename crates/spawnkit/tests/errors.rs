//! Errors: the exact message, kind, step and errno, and no child left behind.
//!
//! Each test holds a process-wide lock and checks that this process has no children after
//! the failed spawn (the failed child must be reaped by the library, not left a zombie).

mod common;

use std::io;

use common::{children_of_self, fd_is_open, probe, probe_cmd, serial, FULL};
use spawnkit::{Command, ErrorKind, Resource, Signal, Stdio, Strategy};

fn assert_no_children(what: &str) {
    let kids = children_of_self();
    assert!(kids.is_empty(), "{what}: children left behind (pid, state): {kids:?}");
}

#[test]
fn failed_spawns_leak_no_fds() {
    let _g = serial();
    let before = common::open_fds();
    for s in Strategy::ALL {
        for _ in 0..3 {
            let err = probe_cmd(s, ["exit", "0"])
                .stdin(Stdio::Pipe)
                .stdout(Stdio::Pipe)
                .stderr(Stdio::Null)
                .current_dir("/nope")
                .spawn()
                .unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{s}: {err}");
            let err = Command::new("spawnkit-no-such-program")
                .stdout(Stdio::Pipe)
                .strategy(s)
                .spawn()
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::NotFound, "{s}: {err}");
        }
        assert_eq!(common::open_fds(), before, "{s}: fds leaked by failed spawns");
        assert_no_children(&format!("{s} leak check"));
    }
}

#[test]
fn exec_format_error() {
    let _g = serial();
    let dir = common::TempDir::new("enoexec");
    let f = dir.file("garbage", b"\x01\x02 not an executable format\n", 0o755);
    for s in Strategy::ALL {
        let err = Command::new(&f).strategy(s).spawn().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOEXEC), "{s}: {err}");
        assert_eq!(err.exit_code(), 126, "{s}: {err}");
        if s != Strategy::PosixSpawn {
            assert_eq!(
                err.to_string(),
                format!("execve \"{}\": Exec format error (os error 8)", f.display())
            );
        }
        assert_no_children(&format!("{s} ENOEXEC"));
    }
}

#[test]
fn argument_too_long() {
    let _g = serial();
    // One string above MAX_ARG_STRLEN (32 pages).
    let huge = "x".repeat(200_000);
    for s in Strategy::ALL {
        let err = probe_cmd(s, ["exit", "0"]).arg(&huge).spawn().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::E2BIG), "{s}: {err}");
        if s != Strategy::PosixSpawn {
            assert_eq!(err.exit_code(), 126, "{s}: {err}");
            assert_eq!(
                err.to_string(),
                format!("execve \"{}\": Argument list too long (os error 7)", probe_str())
            );
        }
        assert_no_children(&format!("{s} E2BIG"));
    }
}

#[test]
fn argument_too_long_exit_code_is_126_for_every_strategy() {
    let _g = serial();
    let huge = "x".repeat(200_000);
    for s in Strategy::ALL {
        let err = probe_cmd(s, ["exit", "0"]).arg(&huge).spawn().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::E2BIG), "{s}: {err}");
        assert_eq!(err.exit_code(), 126, "{s}: {err}");
    }
}

fn probe_str() -> String {
    probe().to_string_lossy().into_owned()
}

#[test]
fn chdir_to_a_missing_dir() {
    let _g = serial();
    for s in FULL {
        let err = probe_cmd(s, ["exit", "0"]).current_dir("/nope").spawn().unwrap_err();
        assert_eq!(err.to_string(), "chdir \"/nope\": No such file or directory (os error 2)");
        assert_eq!(err.kind(), ErrorKind::Os, "{s}");
        assert_eq!(err.step(), "chdir", "{s}");
        assert_eq!(err.subject(), "\"/nope\"", "{s}");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{s}");
        assert!(err.is_in_child(), "{s}");
        assert_eq!(err.exit_code(), 125, "{s}");
        assert_eq!(io::Error::from(err).kind(), io::ErrorKind::NotFound, "{s}");
        assert_no_children(&format!("{s} chdir"));
    }
    // posix_spawn returns one errno for everything; spawnkit checks the directory in the
    // parent to name the chdir.
    let err =
        probe_cmd(Strategy::PosixSpawn, ["exit", "0"]).current_dir("/nope").spawn().unwrap_err();
    assert_eq!(
        err.to_string(),
        "chdir \"/nope\": No such file or directory (os error 2) \
         (posix_spawn failed; the directory fails in the parent too)"
    );
    assert_eq!(err.step(), "chdir", "{err}");
    assert_eq!(err.kind(), ErrorKind::Os, "{err}");
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");
    assert_eq!(err.exit_code(), 125, "{err}");
    assert_no_children("posix-spawn chdir");
}

#[test]
fn chdir_to_a_file() {
    let _g = serial();
    let dir = common::TempDir::new("chdirfile");
    let f = dir.file("plain", b"", 0o644);
    for s in FULL {
        let err = probe_cmd(s, ["exit", "0"]).current_dir(&f).spawn().unwrap_err();
        let want = format!("chdir \"{}\": Not a directory (os error 20)", f.display());
        assert_eq!(err.to_string(), want, "{s}");
        assert_eq!(err.step(), "chdir", "{s}");
        assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR), "{s}");
        assert_no_children(&format!("{s} chdir to a file"));
    }
}

#[test]
fn posix_spawn_chdir_to_a_file() {
    let _g = serial();
    let dir = common::TempDir::new("chdirfile-posix");
    let f = dir.file("plain", b"", 0o644);
    let err = probe_cmd(Strategy::PosixSpawn, ["exit", "0"]).current_dir(&f).spawn().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "chdir \"{}\": Not a directory (os error 20) \
             (posix_spawn failed; the directory fails in the parent too)",
            f.display()
        )
    );
    assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR));
    assert_no_children("posix-spawn chdir to a file");
}

#[test]
fn missing_program_in_path() {
    let _g = serial();
    let path = std::env::var("PATH").unwrap();
    for s in Strategy::ALL {
        let err = Command::new("spawnkit-no-such-program").strategy(s).spawn().unwrap_err();
        let want = match s {
            Strategy::PosixSpawn => {
                format!("posix_spawn \"spawnkit-no-such-program\": not found in PATH ({path})")
            }
            _ => format!("execve \"spawnkit-no-such-program\": not found in PATH ({path})"),
        };
        assert_eq!(err.to_string(), want, "{s}");
        assert_eq!(err.kind(), ErrorKind::NotFound, "{s}");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{s}");
        assert_eq!(err.exit_code(), 127, "{s}");
        assert!(err.is_in_child(), "{s}");
        assert_eq!(io::Error::from(err).kind(), io::ErrorKind::NotFound, "{s}");
        assert_no_children(&format!("{s} missing program"));
    }
}

#[test]
fn missing_program_names_the_childs_path() {
    let _g = serial();
    for s in Strategy::ALL {
        let err = Command::new("spawnkit-no-such-program")
            .env("PATH", "/nonexistent-a:/nonexistent-b")
            .strategy(s)
            .spawn()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{s}");
        assert!(
            err.to_string().contains(": not found in PATH (/nonexistent-a:/nonexistent-b)"),
            "{s}: {err}"
        );
        assert_no_children(&format!("{s} missing program, child PATH"));
    }
    // No PATH at all in the child: the default one is searched.
    for s in FULL {
        let err =
            Command::new("spawnkit-no-such-program").env_clear().strategy(s).spawn().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "execve \"spawnkit-no-such-program\": not found in PATH ({})",
                spawnkit::DEFAULT_PATH
            ),
            "{s}"
        );
    }
}

#[test]
fn missing_program_by_path() {
    let _g = serial();
    for s in FULL {
        let err = Command::new("/nonexistent/prog").strategy(s).spawn().unwrap_err();
        assert_eq!(
            err.to_string(),
            "execve \"/nonexistent/prog\": No such file or directory (os error 2)"
        );
        assert_eq!(err.kind(), ErrorKind::NotFound, "{s}");
        assert_eq!(err.exit_code(), 127, "{s}");
        assert_no_children(&format!("{s} missing path"));
    }
    let err = Command::new("/nonexistent/prog").strategy(Strategy::PosixSpawn).spawn().unwrap_err();
    assert_eq!(
        err.to_string(),
        "posix_spawn \"/nonexistent/prog\": No such file or directory (os error 2)"
    );
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.exit_code(), 127);
    assert_no_children("posix-spawn missing path");
}

#[test]
fn empty_program() {
    let _g = serial();
    for s in Strategy::ALL {
        let err = Command::new("").strategy(s).spawn().unwrap_err();
        assert_eq!(err.to_string(), "execve \"\": No such file or directory (os error 2)", "{s}");
        assert_eq!(err.kind(), ErrorKind::NotFound, "{s}");
        assert!(!err.is_in_child(), "{s}: caught before any spawn");
        assert_no_children(&format!("{s} empty program"));
    }
}

#[test]
fn empty_program_is_checked_after_the_other_input() {
    let _g = serial();
    // A NUL in the environment or the cwd is the error, not the empty name (CPython's order).
    let err = Command::new("").env("A", "x\0y").spawn().unwrap_err();
    assert_eq!(err.step(), "environment", "{err}");
    let err = Command::new("").current_dir("/tmp\0x").spawn().unwrap_err();
    assert_eq!(err.step(), "chdir", "{err}");
    // CPython's search (try-all) runs the child: its chdir fails first, and without that the
    // "DIR/" candidates fail with EACCES (a directory) as in CPython.
    let err = Command::new("")
        .path_search(spawnkit::PathSearch::TryAll)
        .current_dir("/nonexistent")
        .spawn()
        .unwrap_err();
    assert_eq!(err.to_string(), "chdir \"/nonexistent\": No such file or directory (os error 2)");
    let err = Command::new("")
        .path_search(spawnkit::PathSearch::TryAll)
        .env("PATH", "/usr/bin")
        .spawn()
        .unwrap_err();
    assert_eq!(err.to_string(), "execve \"/usr/bin/\": Permission denied (os error 13)");
    assert_no_children("empty program, try-all");
}

#[test]
fn all_ones_ids_are_refused() {
    let _g = serial();
    for s in Strategy::ALL {
        let err = Command::new("true").strategy(s).uid(u32::MAX).spawn().unwrap_err();
        assert_eq!(
            err.to_string(),
            "setresuid uid 4294967295: (uid_t)-1 is not an id (setresuid(2) takes it as \"no change\")",
            "{s}"
        );
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        let err = Command::new("true").strategy(s).gid(u32::MAX).plan().unwrap_err();
        assert_eq!(err.step(), "setresgid", "{s}: {err}");
        assert_no_children(&format!("{s} uid -1"));
    }
}

#[test]
fn program_that_is_not_executable() {
    let _g = serial();
    let dir = common::TempDir::new("noexec");
    let f = dir.file("data", b"not a program\n", 0o644);
    for s in FULL {
        let err = Command::new(&f).strategy(s).spawn().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("execve \"{}\": Permission denied (os error 13)", f.display()),
            "{s}"
        );
        assert_eq!(err.kind(), ErrorKind::Os, "{s}");
        assert_eq!(err.exit_code(), 126, "{s}");
        assert_eq!(io::Error::from(err).kind(), io::ErrorKind::PermissionDenied, "{s}");
        assert_no_children(&format!("{s} not executable"));
    }
    let err = Command::new(&f).strategy(Strategy::PosixSpawn).spawn().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");
    assert_eq!(err.exit_code(), 126, "{err}");
    assert_no_children("posix-spawn not executable");
}

#[test]
fn setrlimit_soft_above_hard() {
    let _g = serial();
    for s in FULL {
        let err =
            probe_cmd(s, ["exit", "0"]).rlimit(Resource::Nofile, 100, 50).spawn().unwrap_err();
        assert_eq!(err.to_string(), "setrlimit NOFILE: Invalid argument (os error 22)", "{s}");
        assert_eq!(err.kind(), ErrorKind::Os, "{s}");
        assert_eq!(err.step(), "setrlimit", "{s}");
        assert_eq!(err.subject(), "NOFILE", "{s}");
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{s}");
        assert_no_children(&format!("{s} setrlimit"));
    }
}

/// A closed fd of this process: 9 if it is closed (as usual), else the next closed one.
fn closed_fd() -> i32 {
    (9..1000).find(|&fd| !fd_is_open(fd)).expect("a closed fd")
}

#[test]
fn dup2_of_a_closed_fd() {
    let _g = serial();
    let bad = closed_fd();
    for s in FULL {
        let err = probe_cmd(s, ["exit", "0"]).fd(3, bad).spawn().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("dup2 fd {bad} -> 3: Bad file descriptor (os error 9)")
        );
        assert_eq!(err.step(), "dup2", "{s}");
        assert_eq!(err.subject(), format!("fd {bad} -> 3"), "{s}");
        assert_eq!(err.raw_os_error(), Some(libc::EBADF), "{s}");
        assert!(err.is_in_child(), "{s}");
        assert_no_children(&format!("{s} dup2"));
        let err = probe_cmd(s, ["exit", "0"]).stdout(Stdio::Fd(bad)).spawn().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("dup2 fd {bad} -> 1: Bad file descriptor (os error 9)")
        );
        assert_no_children(&format!("{s} dup2 stdout"));
    }
    let err = probe_cmd(Strategy::PosixSpawn, ["exit", "0"]).fd(3, bad).spawn().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("posix_spawn \"{}\": Bad file descriptor (os error 9)", probe_str())
    );
    assert_eq!(err.raw_os_error(), Some(libc::EBADF));
    assert_no_children("posix-spawn dup2");
}

#[test]
fn affinity_to_a_missing_cpu() {
    let _g = serial();
    for s in FULL {
        let err = probe_cmd(s, ["exit", "0"]).cpu_affinity([1000]).spawn().unwrap_err();
        assert_eq!(
            err.to_string(),
            "sched_setaffinity cpus 1000: Invalid argument (os error 22)",
            "{s}"
        );
        assert_eq!(err.step(), "sched_setaffinity", "{s}");
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{s}");
        assert_no_children(&format!("{s} affinity"));
    }
}

#[test]
fn setpgid_to_a_missing_group() {
    let _g = serial();
    for s in Strategy::ALL {
        // A pid that is surely no process group of this session.
        let err = probe_cmd(s, ["exit", "0"]).process_group(0x3fff_fff0).spawn().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{s}: {err}");
        if s != Strategy::PosixSpawn {
            assert_eq!(
                err.to_string(),
                "setpgid 1073741808: Operation not permitted (os error 1)",
                "{s}"
            );
        }
        assert_no_children(&format!("{s} setpgid"));
    }
}

#[test]
fn credentials_failure_is_skipped_as_root() {
    // setresuid cannot fail for root; the error path is covered by the other child steps.
    if common::is_root() {
        eprintln!("skipped: setresuid does not fail for root");
        return;
    }
    let _g = serial();
    for s in FULL {
        let err = probe_cmd(s, ["exit", "0"]).uid(0).spawn();
        if let Err(err) = err {
            assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{s}: {err}");
            assert_no_children(&format!("{s} setresuid"));
        }
    }
}

#[test]
fn invalid_input_is_caught_before_spawning() {
    let _g = serial();
    type Case = (&'static str, fn(&mut Command), &'static str);
    let cases: [Case; 12] = [
        (
            "argument",
            |c| {
                c.arg("a\0b");
            },
            "argument \"a\\0b\": contains a NUL byte",
        ),
        (
            "argument",
            |c| {
                c.arg0("zero\0");
            },
            "argument \"zero\\0\": contains a NUL byte",
        ),
        (
            "environment",
            |c| {
                c.env("A=B", "1");
            },
            "environment \"A=B\": a variable name must be non-empty and have no '='",
        ),
        (
            "environment",
            |c| {
                c.env("", "1");
            },
            "environment \"\": a variable name must be non-empty and have no '='",
        ),
        (
            "environment",
            |c| {
                c.env("K", "v\0x");
            },
            "environment \"K=v\\0x\": contains a NUL byte",
        ),
        (
            "chdir",
            |c| {
                c.current_dir("/tmp\0x");
            },
            "chdir \"/tmp\\0x\": contains a NUL byte",
        ),
        (
            "dup2",
            |c| {
                c.fd(-1, 3);
            },
            "dup2 fd 3 -> -1: negative fd",
        ),
        (
            "dup2",
            |c| {
                c.fd(3, -2);
            },
            "dup2 fd -2 -> 3: negative fd",
        ),
        (
            "dup2",
            |c| {
                c.stdout(Stdio::Fd(-1));
            },
            "dup2 fd -1 -> 1: negative fd",
        ),
        (
            "umask",
            |c| {
                c.umask(0o1000);
            },
            "umask 1000: not a mode (0..=0777)",
        ),
        (
            "sched_setaffinity",
            |c| {
                c.cpu_affinity([]);
            },
            "sched_setaffinity cpus: empty CPU list",
        ),
        (
            "setpgid",
            |c| {
                c.process_group(-5);
            },
            "setpgid -5: negative process group",
        ),
    ];
    for s in Strategy::ALL {
        for (step, set, msg) in cases {
            let mut cmd = probe_cmd(s, ["exit", "0"]);
            set(&mut cmd);
            let err = cmd.spawn().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{s} {step}: {err}");
            assert_eq!(err.step(), step, "{s}: {err}");
            assert_eq!(err.to_string(), msg, "{s}");
            assert_eq!(err.raw_os_error(), None, "{s}: {err}");
            assert!(!err.is_in_child(), "{s}: {err}");
            assert_eq!(io::Error::from(err).kind(), io::ErrorKind::InvalidInput, "{s}");
            // plan() finds the same problem.
            let err = cmd.plan().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{s}: plan: {err}");
            assert_no_children(&format!("{s} {step}"));
        }
    }
}

#[test]
fn nul_in_the_program_is_invalid_input() {
    let _g = serial();
    for s in Strategy::ALL {
        let err = Command::new("/bin/x\0y").strategy(s).spawn().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{s}: {err}");
        // argv[0] is the program, checked first.
        assert_eq!(err.to_string(), "argument \"/bin/x\\0y\": contains a NUL byte", "{s}");
        let err = Command::new("x\0y").strategy(s).spawn().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{s}: {err}");
        assert_no_children(&format!("{s} NUL in program"));
    }
}

#[test]
fn parsing_names() {
    let err = "bogus".parse::<Resource>().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(err.step(), "rlimit");
    assert_eq!(
        err.to_string(),
        "rlimit bogus: unknown resource (try nofile, nproc, core, as, ...)"
    );
    for name in ["nofile", "NOFILE", "RLIMIT_NOFILE", "rlimit_nofile"] {
        assert_eq!(name.parse::<Resource>().unwrap(), Resource::Nofile, "{name}");
    }
    for r in Resource::ALL {
        assert_eq!(r.name().parse::<Resource>().unwrap(), *r);
    }
    assert_eq!(Resource::Nofile.raw(), libc::RLIMIT_NOFILE);

    for name in ["TERM", "SIGTERM", "sigterm", "term", "15"] {
        assert_eq!(name.parse::<Signal>().unwrap(), Signal::TERM, "{name}");
    }
    assert_eq!("40".parse::<Signal>().unwrap().name(), "SIG40");
    assert_eq!(Signal::USR1.to_string(), "SIGUSR1");
    for bad in ["0", "65", "-1", "BOGUS", "SIG"] {
        let err = bad.parse::<Signal>().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad}");
        assert_eq!(err.step(), "signal", "{bad}");
    }
    assert_eq!(Signal::new(0).unwrap_err().to_string(), "signal 0: not a signal number (1..=64)");

    for s in Strategy::ALL {
        assert_eq!(s.name().parse::<Strategy>().unwrap(), s);
        assert_eq!(s.name().replace('-', "_").parse::<Strategy>().unwrap(), s);
    }
    let err = "vfork".parse::<Strategy>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "strategy vfork: unknown (use clone-vfork, posix-spawn or fork-exec)"
    );
}

#[test]
fn pre_exec_needs_fork_exec() {
    let _g = serial();
    let mut cmd = probe_cmd(Strategy::ForkExec, ["exit", "0"]);
    // SAFETY: the hook makes no call at all.
    unsafe { cmd.pre_exec(|| Ok(())) };
    assert_eq!(cmd.get_strategy(), Strategy::ForkExec);
    for s in [Strategy::CloneVfork, Strategy::PosixSpawn] {
        let err = cmd.strategy(s).spawn().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{s}: {err}");
        assert_eq!(
            err.to_string(),
            format!("pre_exec: a pre_exec hook needs the fork-exec strategy, not {s}")
        );
        assert_no_children(&format!("{s} pre_exec"));
    }
}

#[test]
fn pre_exec_hook_runs_in_the_child() {
    let _g = serial();
    let mut cmd = probe_cmd(Strategy::ForkExec, ["state"]);
    // SAFETY: umask(2) is async-signal-safe and touches only the child's own state.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0o037);
            Ok(())
        })
    };
    let st = common::run_state(&mut cmd);
    assert_eq!(st.get("umask"), "0037");
}

#[test]
fn pre_exec_hook_error() {
    let _g = serial();
    let mut cmd = probe_cmd(Strategy::ForkExec, ["exit", "0"]);
    // SAFETY: the hook makes no call at all.
    unsafe { cmd.pre_exec(|| Err(io::Error::from_raw_os_error(libc::EPERM))) };
    let err = cmd.spawn().unwrap_err();
    assert_eq!(err.to_string(), "pre_exec: Operation not permitted (os error 1)");
    assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    assert!(err.is_in_child());
    assert_no_children("pre_exec error");
}

#[test]
fn child_killed_before_exec() {
    let _g = serial();
    let mut cmd = probe_cmd(Strategy::ForkExec, ["exit", "0"]);
    // SAFETY: getpid and kill are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::kill(libc::getpid(), libc::SIGKILL);
            Ok(())
        })
    };
    let err = cmd.spawn().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ChildDied, "{err}");
    assert_eq!(
        err.to_string(),
        "spawn (pre_exec hook): the child was killed by SIGKILL before execve"
    );
    assert!(err.is_in_child());
    assert_no_children("killed before exec");
}

/// A hook that exits, or kills the child, without returning an error.
fn hook_ends(exit_code: Option<i32>) -> io::Result<()> {
    match exit_code {
        // SAFETY: _exit is async-signal-safe.
        Some(code) => unsafe { libc::_exit(code) },
        // SAFETY: getpid and kill are async-signal-safe.
        None => unsafe { libc::kill(libc::getpid(), libc::SIGKILL) },
    };
    Ok(())
}

#[test]
fn pre_exec_may_exit_hands_out_the_child() {
    let _g = serial();
    let killed = spawnkit::ExitStatus::Signaled { signal: libc::SIGKILL, core_dumped: false };
    for (code, want) in [(Some(7), spawnkit::ExitStatus::Exited(7)), (None, killed)] {
        let mut cmd = probe_cmd(Strategy::ForkExec, ["exit", "0"]);
        // SAFETY: the hook only makes async-signal-safe calls.
        unsafe { cmd.pre_exec(move || hook_ends(code)) };
        let mut child = cmd.pre_exec_may_exit(true).stdout(Stdio::Pipe).spawn().unwrap();
        assert_eq!(child.wait().unwrap(), want);
        assert_no_children("ended in pre_exec, waited");
    }
    // A hook's error is still an error.
    let mut cmd = probe_cmd(Strategy::ForkExec, ["exit", "0"]);
    // SAFETY: the hook makes no call at all.
    unsafe { cmd.pre_exec(|| Err(io::Error::from_raw_os_error(libc::EPERM))) };
    let err = cmd.pre_exec_may_exit(true).spawn().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
    assert_no_children("pre_exec error");
}

#[test]
fn unsupported_maps_to_io_unsupported() {
    let err = probe_cmd(Strategy::PosixSpawn, ["exit", "0"]).umask(0o22).spawn().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert_eq!(io::Error::from(err).kind(), io::ErrorKind::Unsupported);
}
