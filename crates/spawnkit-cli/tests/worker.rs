//! `spawnkit worker` as a real process: what it does with a stderr it cannot write. (The
//! worker against a real farm: tests/test_worker.py.)

mod common;

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{closed_pipe, spawnkit_cmd};

fn dev_full() -> Stdio {
    Stdio::from(OpenOptions::new().write(true).open("/dev/full").expect("/dev/full"))
}

/// The exit code of `child`, waiting at most `limit` (killed then, and None).
fn wait_for(child: &mut Child, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_stderr_that_cannot_be_written_is_no_panic() {
    for (name, stderr) in [("full", dev_full as fn() -> Stdio), ("closed", closed_pipe)] {
        let dir: PathBuf =
            std::env::temp_dir().join(format!("spawnkit-cli-worker-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // Nothing listens on port 1: the worker logs its failed CreateBotSession calls (to
        // stderr) until SIGTERM, then logs that it stopped, and exits 0.
        let mut child = spawnkit_cmd(["worker", "--remote", "http://127.0.0.1:1", "--fence"])
            .args(["none", "--concurrency", "1", "--drain-timeout", "1", "--work-dir"])
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr())
            .spawn()
            .expect("spawnkit worker");
        std::thread::sleep(Duration::from_millis(700));
        let early = child.try_wait().unwrap();
        if early.is_none() {
            // SAFETY: kill(2) of our own child, not reaped yet (try_wait found it running).
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        }
        let code = wait_for(&mut child, Duration::from_secs(20));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(early, None, "2>{name}: the worker ended before SIGTERM");
        assert_eq!(code, Some(0), "2>{name}: the worker's exit code");
    }
}
