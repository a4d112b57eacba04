//! Stress: many threads spawning at once while other threads open and close inheritable
//! (non-close-on-exec) fds, and one thread grows and shrinks the environment (which makes
//! libc reallocate and free the `environ` array the children inherit from). No child may
//! ever see an fd beyond 0, 1, 2; no spawn may fail; every child is waited for and exits 0;
//! no zombie is left, and no fd of the parent is leaked.
//!
//! One test function: it looks at every child and fd of this process.

mod common;

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{children_of_self, probe, set_cloexec, zombie_children};
use spawnkit::{Command, Stdio, Strategy};

const SPAWNERS: usize = 8;
const PER_THREAD: usize = 500;
const CHURNERS: usize = 2;

#[test]
fn spawn_from_many_threads_while_fds_churn() {
    let probe = probe();
    let fds_before = common::open_fds();
    let stop = Arc::new(AtomicBool::new(false));
    let churned = Arc::new(AtomicU64::new(0));

    let churners: Vec<_> = (0..CHURNERS)
        .map(|_| {
            let (stop, churned) = (stop.clone(), churned.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let f = std::fs::File::open("/dev/null").unwrap();
                    // Inheritable from here until the drop: a close_other_fds bug would leak it.
                    set_cloexec(f.as_raw_fd(), false);
                    drop(f);
                    churned.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    let env_churner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Edition 2021: set_var/remove_var take std's environment lock, as does the
                // copy spawnkit makes of the environment.
                let name = format!("SPAWNKIT_STRESS_{}", i % 200);
                if (i / 200).is_multiple_of(2) {
                    std::env::set_var(&name, "x".repeat((i % 50) as usize));
                } else {
                    std::env::remove_var(&name);
                }
                i += 1;
            }
            i
        })
    };

    let spawners: Vec<_> = (0..SPAWNERS)
        .map(|t| {
            let probe = probe.clone();
            std::thread::spawn(move || {
                let strategy = Strategy::ALL[t % Strategy::ALL.len()];
                let mut cmd = Command::new(&probe);
                cmd.arg("fds")
                    .strategy(strategy)
                    .stdin(Stdio::Null)
                    .stdout(Stdio::Pipe)
                    .stderr(Stdio::Null);
                for i in 0..PER_THREAD {
                    let out = cmd
                        .output()
                        .unwrap_or_else(|e| panic!("thread {t} ({strategy}) spawn {i}: {e}"));
                    assert!(
                        out.status.success(),
                        "thread {t} ({strategy}) child {i}: {}",
                        out.status
                    );
                    assert_eq!(
                        String::from_utf8_lossy(&out.stdout),
                        "0 1 2\n",
                        "thread {t} ({strategy}) child {i} saw extra fds"
                    );
                }
            })
        })
        .collect();

    let mut failures = Vec::new();
    for (t, h) in spawners.into_iter().enumerate() {
        if let Err(e) = h.join() {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!("spawner {t}: {msg}"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in churners {
        h.join().unwrap();
    }
    assert!(env_churner.join().unwrap() > 0, "the environment churn thread never ran");
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(churned.load(Ordering::Relaxed) > 0, "the fd churn threads never ran");
    assert_eq!(zombie_children(), Vec::<u32>::new(), "zombies left");
    assert_eq!(children_of_self(), [], "children left");
    assert_eq!(spawnkit::reap_orphans(), 0);
    assert_eq!(common::open_fds(), fds_before, "fds leaked (pidfds, pipes, /dev/null?)");
}
