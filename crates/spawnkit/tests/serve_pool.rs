//! The spawn server's pool of children made ahead of time (`ServerOptions::pool`): a child
//! woken from the pool sees what a child cloned for the request sees (read from inside it by
//! the probe, beside one from a server without a pool), parked children die with the server,
//! and the children the server started outlive it.

mod common;
mod parked;

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::{probe, State, TempDir};
use parked::{parked, wait_pool_full};
use spawnkit::{Command, PrivateServer, SigSet, Signal, Stdio};

/// Dead: gone, or a zombie.
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z"),
    }
}

fn state_via(server: &mut PrivateServer, configure: impl Fn(&mut Command)) -> State {
    let mut cmd = Command::new(probe());
    cmd.arg("state").stdout(Stdio::Pipe);
    configure(&mut cmd);
    let mut child = server.client().spawn(&cmd).expect("spawn via server");
    let out = child.communicate(None, Some(Duration::from_secs(20))).expect("communicate");
    assert!(out.status.success(), "probe ended with {}", out.status);
    State::parse(&String::from_utf8(out.stdout).expect("utf-8"))
}

#[test]
fn a_pool_child_sees_what_a_cloned_child_sees() {
    let mut pooled = PrivateServer::start_with_pool(Some(2)).expect("private server");
    let mut cloned = PrivateServer::start_with_pool(Some(0)).expect("private server");
    let ready = wait_pool_full(pooled.pid());
    assert!(parked(cloned.pid()).is_empty(), "a server without a pool parks nothing");
    // An fd opened after the pool children were made: it must reach the child all the same.
    let dir = TempDir::new("pool-fds");
    let file = std::fs::File::create(dir.join("passed")).unwrap();
    let configure = |cmd: &mut Command| {
        cmd.env("SPAWNKIT_POOL_TEST", "1").fd(5, file.as_raw_fd()).umask(0o027);
    };
    let a = state_via(&mut pooled, configure);
    let b = state_via(&mut cloned, configure);
    assert!(ready.contains(&(a.int("pid") as u32)), "the child was not one of {ready:?}");
    assert_eq!(a.int("ppid") as u32, pooled.pid(), "the parent is the server");
    assert_eq!(b.int("ppid") as u32, cloned.pid());
    // Nothing of the server's leaks in: its fds (the pool child shared its fd table while
    // parked), its all-blocked mask (the parked child's), its death signal (the parked
    // child's), its handlers.
    assert_eq!(a.fd_numbers(), vec![0, 1, 2, 5], "child fds: {}", a.get("fds"));
    assert!(a.fd(5).unwrap().target.ends_with("/passed"));
    assert_eq!(a.hex("sigblk"), 0);
    assert_eq!(a.int("pdeathsig"), 0);
    for key in [
        "cwd",
        "umask",
        "sigblk",
        "sigign",
        "sigcgt",
        "uid",
        "gid",
        "groups",
        "nnp",
        "cpus_allowed",
        "nice",
        "pgid",
        "sid",
        "fds",
    ] {
        if key == "fds" {
            assert_eq!(a.fd_numbers(), b.fd_numbers());
            continue;
        }
        if key == "pgid" || key == "sid" {
            // Relative to each server.
            assert_eq!(a.int(key) == pooled.pid() as i64, b.int(key) == cloned.pid() as i64);
            continue;
        }
        assert_eq!(a.get(key), b.get(key), "{key} differs from a cloned child's");
    }
    for (k, v) in &b.map {
        if k.starts_with("limit.") {
            assert_eq!(a.get(k), v, "{k}");
        }
    }
    assert_eq!(a.env, b.env);
    // A mask and a death signal the request asks for are the request's, not the parked
    // child's.
    let masked = state_via(&mut pooled, |cmd| {
        cmd.signal_mask(SigSet::empty().with(Signal::USR1)).parent_death_signal(Signal::TERM);
    });
    assert_eq!(masked.hex("sigblk"), 1 << (libc::SIGUSR1 - 1));
    assert_eq!(masked.int("pdeathsig"), libc::SIGTERM as i64);
    // A command that keeps its signals (no restore_signals) and defaults one of its own: the
    // same dispositions from a pool child (which set the server's ignored signals, SIGPIPE
    // and SIGXFSZ to SIG_DFL before it parked) as from a clone made for the request.
    let keep = |cmd: &mut Command| {
        cmd.restore_signals(false).signal_default(Signal::USR2);
    };
    let ready = wait_pool_full(pooled.pid());
    let (a, b) = (state_via(&mut pooled, keep), state_via(&mut cloned, keep));
    assert!(ready.contains(&(a.int("pid") as u32)), "the child was not one of {ready:?}");
    for key in ["sigign", "sigcgt"] {
        assert_eq!(a.get(key), b.get(key), "{key} differs from a cloned child's");
    }
    // The private server ignores SIGINT; its child does not (this test process does not).
    assert_eq!(a.hex("sigign") & (1 << (libc::SIGINT - 1)), 0, "{}", a.get("sigign"));
}

#[test]
fn parked_children_die_with_the_server_and_started_ones_live_on() {
    let mut server = PrivateServer::start_with_pool(Some(2)).expect("private server");
    let spid = server.pid();
    let before = wait_pool_full(spid);
    let mut sleeper = Command::new(probe());
    sleeper.args(["sleep", "30"]);
    let mut child = server.client().spawn(&sleeper).expect("spawn");
    let cpid = child.id();
    assert!(before.contains(&cpid), "the sleeper was not one of {before:?}");
    let parked_now = wait_pool_full(spid);
    assert!(!parked_now.contains(&cpid), "the sleeper has exec'd: it is parked no more");
    // The server dies hard: no chance to retire its pool.
    // SAFETY: a signal to our own private server's pid (its pidfd keeps the pid ours).
    assert_eq!(unsafe { libc::kill(spid as libc::pid_t, libc::SIGKILL) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !parked_now.iter().all(|&p| dead(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    for p in &parked_now {
        assert!(dead(*p), "parked child {p} outlived the server");
    }
    // The child it started is its client's: its death signal was cleared on waking.
    assert!(!dead(cpid), "the started child died with the server");
    child.kill().unwrap();
    drop(server);
}

/// A signal sent to a parked child (its signals all blocked while it waits) is not left
/// pending for the program a later request runs in it: that program starts with nothing
/// pending, as in a child cloned for the request. SIGUSR1 left pending would kill each one.
#[test]
fn a_signal_sent_to_a_parked_child_does_not_reach_a_later_request() {
    let mut server = PrivateServer::start().expect("private server");
    let pid = server.pid();
    let parked = wait_pool_full(pid);
    for &c in &parked {
        // SAFETY: kill takes integers.
        assert_eq!(unsafe { libc::kill(c as libc::pid_t, libc::SIGUSR1) }, 0);
    }
    // One request per parked child (and one more): each woken child runs `true`.
    let mut cmd = Command::new("/bin/true");
    cmd.stdout(Stdio::Null).stderr(Stdio::Null);
    for _ in 0..=parked.len() {
        let status = server.client().spawn(&cmd).unwrap().wait().unwrap();
        assert!(status.success(), "a request's program ended with {status}");
    }
}

/// A lone request the pool cannot serve (its clone carries a namespace) is cloned by a
/// spawner thread, never by the loop thread: the loop would otherwise be held until that
/// child's exec, however long its namespace setup takes, with every other client waiting.
#[test]
fn an_isolated_lone_request_is_not_cloned_on_the_loop_thread() {
    let mut server = PrivateServer::start().expect("private server");
    let pid = server.pid();
    wait_pool_full(pid);
    let mut cmd = Command::new("/bin/sleep");
    cmd.arg("5").private_network(true).stdout(Stdio::Null);
    let mut child = server.client().spawn(&cmd).expect("spawn via server");
    let child_pid = child.id();
    // The thread that made it lists it among its children.
    let maker = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .any(|p| p.parse::<u32>() == Ok(child_pid))
        })
        .map(|t| t.file_name().to_string_lossy().parse::<u32>().unwrap());
    child.kill().unwrap();
    child.wait().unwrap();
    let maker = maker.expect("the child among some server thread's children");
    assert_ne!(maker, pid, "the loop thread cloned an isolated request itself");
}

/// The requests of one SpawnMany frame are cloned, each of them, whether they ask for
/// `Child`s or statuses: every child parked before is still parked after, and none of the
/// frame's children is one of them. A parked child serves a request that came
/// alone; one of several would hold the loop thread in its exec while the frame's other
/// requests wait (and the refill that follows costs more than the clone it saved).
#[test]
fn the_requests_of_one_frame_leave_the_parked_children_parked() {
    let mut server = PrivateServer::start_with_pool(Some(2)).expect("private server");
    let before = wait_pool_full(server.pid());
    let mut cmd = Command::new("/bin/true");
    cmd.stdout(Stdio::Null);
    let cmds = [&cmd; 8];
    for status in [true, false] {
        let client = server.client();
        let pids: Vec<u32> = if status {
            let ids = client.submit_status_many(cmds.iter().copied()).expect("submit");
            for _ in &ids {
                let st = client.receive_status().expect("answer").1.expect("status");
                assert!(st.success(), "{st}");
            }
            Vec::new()
        } else {
            let ids = client.submit_many(cmds.iter().copied()).expect("submit");
            let children: Vec<_> =
                ids.iter().map(|_| client.receive().expect("answer").1.expect("spawned")).collect();
            children
                .into_iter()
                .map(|mut c| {
                    let pid = c.id();
                    assert!(c.wait().expect("wait").success());
                    pid
                })
                .collect()
        };
        for pid in &pids {
            assert!(!before.contains(pid), "a parked child ({pid}) served one of the frame's");
        }
        // Still parked, each of them (a late refill may have added more: none goes but by
        // serving a request, or with the server).
        let now = parked(server.pid());
        let used: Vec<&u32> = before.iter().filter(|p| !now.contains(p)).collect();
        assert!(used.is_empty(), "status requests: {status}: parked children used: {used:?}");
    }
}
