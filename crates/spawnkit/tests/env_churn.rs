//! The inherited environment under churn (issue 11): Rust threads set and remove variables
//! with `std::env` while others spawn with the environment inherited. The engine copies it
//! under std's environment lock, so every spawn succeeds and the child sees a consistent
//! environment. (C code that calls setenv without that lock is the caller's to serialise:
//! see `Command::base_env`.)

use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spawnkit::{Command, ExitStatus, Stdio};

#[test]
fn spawning_beside_std_env_writers() {
    let stop = Arc::new(AtomicBool::new(false));
    let spawned = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..2)
        .map(|t| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    std::env::set_var(
                        format!("SPAWNKIT_RS_CHURN_{t}_{}", i % 300),
                        "v".repeat(i % 97),
                    );
                    if i % 300 == 299 {
                        for j in 0..300 {
                            std::env::remove_var(format!("SPAWNKIT_RS_CHURN_{t}_{j}"));
                        }
                    }
                    i += 1;
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    let spawners: Vec<_> = (0..3)
        .map(|_| {
            let spawned = Arc::clone(&spawned);
            std::thread::spawn(move || {
                while Instant::now() < deadline {
                    let status = Command::new("/bin/true").status().expect("spawn under churn");
                    assert_eq!(status, ExitStatus::Exited(0));
                    spawned.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let results: Vec<_> = spawners.into_iter().map(|h| h.join()).collect();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    for r in results {
        r.expect("a spawning thread failed");
    }
    assert!(spawned.load(Ordering::Relaxed) > 0);
}

/// `base_env` replaces the process's environment as the starting point; changes apply on
/// top, in order, and `env_clear` still starts from nothing.
#[test]
fn base_env_is_what_the_child_inherits() {
    let env_of = |cmd: &mut Command| -> Vec<String> {
        let out = cmd.stdout(Stdio::Pipe).output().unwrap();
        assert_eq!(out.status, ExitStatus::Exited(0));
        String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
    };
    let base = [("A", "1"), ("PATH", "/usr/bin:/bin"), ("B", "2")];
    assert_eq!(env_of(Command::new("env").base_env(base)), ["A=1", "PATH=/usr/bin:/bin", "B=2"]);
    let got =
        env_of(Command::new("env").base_env(base).env("A", "9").env_remove("B").env("C", "3"));
    assert_eq!(got, ["A=9", "PATH=/usr/bin:/bin", "C=3"]);
    let got = env_of(Command::new("/usr/bin/env").base_env(base).env_clear().env("D", "4"));
    assert_eq!(got, ["D=4"]);
    // The PATH searched is the base's.
    let err = Command::new("env").base_env([("PATH", "/nonexistent")]).spawn().unwrap_err();
    assert_eq!(err.to_string(), "execve \"env\": not found in PATH (/nonexistent)");
    // A NUL cannot be passed: an error before anything is spawned.
    let nul = [(OsString::from("A"), OsString::from("x\0y"))];
    let err = Command::new("env").base_env(nul).spawn().unwrap_err();
    assert_eq!(err.kind(), spawnkit::ErrorKind::InvalidInput, "{err}");
}
