//! The tokio face (feature `tokio`): what tokio's own tokio/tests/process_*.rs assert of
//! `tokio::process`, written for `spawnkit::tokio`, plus what is ours: no SIGCHLD handler and
//! no thread for waiting.
#![cfg(feature = "tokio")]

mod common;

use std::time::{Duration, Instant};

use spawnkit::tokio::{spawn_many, CommandExt};
use spawnkit::{Command, ExitStatus, Signal, Stdio};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    c
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

// process_smoke.rs: the exit status, and id() gone once waited for.
#[tokio::test]
async fn smoke_exit_status_and_id() {
    let mut child = sh("exit 2").spawn_async().unwrap();
    assert!(child.id().is_some());
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(2));
    assert_eq!(child.id(), None);
    assert_eq!(child.wait().await.unwrap(), status, "a second wait gives the same status");
}

// process_arg0.rs: argv[0] as set.
#[tokio::test]
async fn arg0() {
    let out = sh("echo $0").arg0("test_string").output_async().await.unwrap();
    assert_eq!(out.stdout, b"test_string\n");
}

// process_issue_42.rs: many children spawned from many tasks at once all complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_spawns_all_complete() {
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            tokio::spawn(async move {
                let mut cmd = sh(&format!("echo {i}"));
                cmd.stdout(Stdio::Pipe);
                let out = cmd.spawn_async().unwrap().wait_with_output().await.unwrap();
                assert_eq!(out.stdout, format!("{i}\n").into_bytes());
                out.status
            })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap().success());
    }
}

// process_issue_2174.rs: writing to the stdin of a child that has exited fails (EPIPE)
// instead of hanging.
#[tokio::test]
async fn writing_to_a_dead_childs_stdin_fails_instead_of_hanging() {
    let mut child = Command::new("true").stdin(Stdio::Pipe).spawn_async().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    child.wait().await.unwrap();
    let data = vec![0u8; 1 << 20];
    let r = tokio::time::timeout(Duration::from_secs(10), stdin.write_all(&data)).await;
    let err = r.expect("the write hung").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
}

// process_kill_after_wait.rs: kill after the child was waited for is fine.
#[tokio::test]
async fn kill_after_wait_is_ok() {
    let mut child = Command::new("true").spawn_async().unwrap();
    child.wait().await.unwrap();
    child.kill().await.unwrap();
    child.start_kill().unwrap();
}

// process_kill_on_drop.rs: dropping the handle kills the child (not what it started).
#[tokio::test]
async fn kill_on_drop_kills_the_child_only() {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "sh -c 'sleep 1; echo child ran' & sleep 5; echo hello from beyond the grave"])
        .kill_on_drop(true)
        .stdout(Stdio::Pipe);
    let mut child = cmd.spawn_async().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut out = child.stdout.take().unwrap();
    let started = Instant::now();
    drop(child);
    assert!(started.elapsed() < Duration::from_millis(200), "drop must not block");
    let mut msg = String::new();
    out.read_to_string(&mut msg).await.unwrap();
    assert_eq!(msg, "child ran\n");
}

// process_change_of_runtime.rs: spawned in one runtime, waited for in another.
#[test]
fn spawned_and_waited_in_different_runtimes() {
    let mut child = tokio::runtime::Runtime::new().unwrap().block_on(async {
        Command::new("true").stdin(Stdio::Pipe).stdout(Stdio::Null).spawn_async().unwrap()
    });
    let status = tokio::runtime::Runtime::new().unwrap().block_on(child.wait()).unwrap();
    assert!(status.success());
}

// process_raw_handle.rs (Windows there): the handle's pid is the child's own.
#[tokio::test]
async fn the_id_is_the_childs_pid() {
    let mut child = sh("echo $$").stdout(Stdio::Pipe).spawn_async().unwrap();
    let pid = child.id().unwrap();
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).await.unwrap();
    assert_eq!(out.trim(), pid.to_string());
    child.wait().await.unwrap();
}

// A signal death, and kill() on a running child.
#[tokio::test]
async fn kill_and_signals() {
    let mut child = Command::new("sleep").arg("30").spawn_async().unwrap();
    child.send_signal(Signal::new(libc::SIGTERM).unwrap()).unwrap();
    assert_eq!(
        child.wait().await.unwrap(),
        ExitStatus::Signaled { signal: libc::SIGTERM, core_dumped: false }
    );
    let mut child = Command::new("sleep").arg("30").spawn_async().unwrap();
    assert_eq!(child.try_wait().unwrap(), None);
    child.kill().await.unwrap();
    assert_eq!(child.try_wait().unwrap().and_then(ExitStatus::signal), Some(libc::SIGKILL));
}

// Waiting costs a readiness event: no thread, no SIGCHLD handler, on a current-thread runtime.
// Sibling tests start threads of their own, so the count is taken in a process of its own:
// this test binary run again with only this test.
#[test]
fn waiting_starts_no_thread_and_installs_no_sigchld_handler() {
    if !common::alone("waiting_starts_no_thread_and_installs_no_sigchld_handler") {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    let before = threads();
    let statuses = rt.block_on(async {
        let mut cmds: Vec<Command> = (0..50).map(|i| sh(&format!("exit {}", i % 5))).collect();
        let children = spawn_many(cmds.iter_mut());
        let mut out = Vec::new();
        for c in children {
            out.push(c.unwrap().wait().await.unwrap().code().unwrap());
        }
        out
    });
    assert_eq!(statuses, (0..50).map(|i| i % 5).collect::<Vec<_>>());
    assert_eq!(threads(), before);
    // SAFETY-free check of the SIGCHLD disposition through /proc: not caught.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let sigcgt = status.lines().find(|l| l.starts_with("SigCgt:")).unwrap();
    let mask = u64::from_str_radix(sigcgt.split_whitespace().nth(1).unwrap(), 16).unwrap();
    assert_eq!(mask & (1 << (libc::SIGCHLD - 1)), 0, "SIGCHLD is caught: {sigcgt}");
}

// spawn_many: in order, a failure as its own item.
#[tokio::test]
async fn spawn_many_keeps_order_and_per_item_errors() {
    let mut cmds = [sh("exit 3"), Command::new("/no/such/program"), sh("exit 4")];
    let mut children = spawn_many(cmds.iter_mut());
    assert_eq!(children.len(), 3);
    assert_eq!(children[1].as_ref().err().map(|e| e.step().to_string()), Some("execve".into()));
    let last = children.pop().unwrap().unwrap().wait().await.unwrap();
    let first = children.remove(0).unwrap().wait().await.unwrap();
    assert_eq!((first.code(), last.code()), (Some(3), Some(4)));
}

// A timeout around wait is cancel-safe: the child can be waited for afterwards.
#[tokio::test]
async fn a_cancelled_wait_leaves_the_child_waitable() {
    let mut child = Command::new("sleep").arg("0.3").spawn_async().unwrap();
    assert!(tokio::time::timeout(Duration::from_millis(20), child.wait()).await.is_err());
    assert!(child.wait().await.unwrap().success());
}

// ---- The spawn server's async client (`spawnkit::tokio::Client`) ----

/// 60 requests in flight from one task, answered in order, each child its own: its exit code
/// and its output are the ones its request asked for; a bad program is that item's error.
#[tokio::test]
async fn server_spawn_many_keeps_every_request_in_flight_and_in_order() {
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    let mut cmds: Vec<Command> = (0..60)
        .map(|i| {
            let mut c = sh(&format!("echo child-{i}; exit {}", i % 7));
            c.stdout(Stdio::Pipe);
            c
        })
        .collect();
    cmds[17] = Command::new("/nonexistent/spawnkit-test-program");
    let results = client.spawn_many(&cmds).await.expect("the connection holds");
    assert_eq!(results.len(), 60);
    for (i, r) in results.into_iter().enumerate() {
        if i == 17 {
            let e = r.err().expect("a missing program is an error");
            assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
            assert_eq!(e.step(), "execve", "{e}");
            continue;
        }
        let child = r.unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert!(child.inner().is_remote());
        let out = child.wait_with_output().await.expect("output");
        assert_eq!(out.stdout, format!("child-{i}\n").as_bytes());
        assert_eq!(out.status.code(), Some(i as i32 % 7));
    }
}

/// Status requests from the async client (tokio's `Command::status` shape): how each child
/// ended, in order, a spawn's error as its item's own, a pipe refused before anything is
/// sent; the server keeps no fd for them afterwards.
#[tokio::test]
async fn server_status_and_status_many() {
    // No pool: its parked children's pidfds, made after start, would move the count.
    let mut server = spawnkit::PrivateServer::start_with_pool(Some(0)).expect("private server");
    let fds = |pid: u32| std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    assert_eq!(client.status(&sh("exit 3")).await.unwrap(), ExitStatus::Exited(3));
    let server_fds = fds(server.pid());
    let missing = client.status(&Command::new("/nonexistent/spawnkit-test-program")).await;
    let e = missing.expect_err("a missing program is an error");
    assert_eq!((e.step(), e.raw_os_error()), ("execve", Some(libc::ENOENT)), "{e}");
    let mut piped = sh("echo hi");
    piped.stdout(Stdio::Pipe);
    assert!(client.status(&piped).await.is_err(), "nothing would read the pipe");
    let mut cmds: Vec<Command> = (0..70).map(|i| sh(&format!("exit {}", i % 5))).collect();
    cmds[9] = Command::new("/nonexistent/spawnkit-test-program");
    cmds[40] = piped;
    let results = client.status_many(&cmds).await.expect("the connection holds");
    assert_eq!(results.len(), 70);
    for (i, r) in results.into_iter().enumerate() {
        match i {
            9 => assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ENOENT)),
            40 => assert!(r.is_err(), "a pipe is that item's error"),
            _ => assert_eq!(r.unwrap(), ExitStatus::Exited(i as i32 % 5), "item {i}"),
        }
    }
    // Requests answered with a child go on beside them.
    let id = client.submit(&sh("exit 0")).await.unwrap();
    let mut child = client.receive(id).await.unwrap();
    assert!(child.wait().await.unwrap().success());
    drop(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while fds(server.pid()) != server_fds {
        assert!(
            Instant::now() < deadline,
            "{} fds in the server, {server_fds} before",
            fds(server.pid())
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Eight tasks on two worker threads await status answers on one connection: an answer
/// one task reads for another wakes that task (each child's code names its task and round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_status_answers_reach_the_task_that_asked() {
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    let mut tasks = Vec::new();
    for t in 0..8 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..15 {
                let code = (t * 16 + round) % 200;
                let st = client.status(&sh(&format!("exit {code}"))).await.expect("status");
                assert_eq!(st, ExitStatus::Exited(code), "task {t} round {round}");
            }
        }));
    }
    for t in tasks {
        let r = tokio::time::timeout(Duration::from_secs(60), t).await;
        r.expect("every task was woken for its answers").expect("task");
    }
}

/// A status answer that another task reads wakes the task that asked (current-thread
/// runtime, so it is deterministic): task A awaits a status; its answer arrives while the
/// runtime is blocked; B's first poll reads the socket, A's answer with it. The socket is
/// drained by then, so A's readiness wait is not woken: only the client's notice of answers
/// read can wake A.
#[tokio::test]
async fn server_status_answer_read_by_another_task_wakes_the_asker() {
    use std::future::Future;
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    let a_client = client.clone();
    let a = tokio::spawn(async move { a_client.status(&sh("exit 7")).await });
    // Let A send and go to sleep (its child not ended yet).
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    // A's answer comes while nobody turns the reactor.
    std::thread::sleep(Duration::from_millis(300));
    // B: one poll, which reads the socket (A's answer) and waits for its own child.
    let long = sh("sleep 5");
    let mut b = std::pin::pin!(client.status(&long));
    std::future::poll_fn(|cx| {
        assert!(b.as_mut().poll(cx).is_pending());
        std::task::Poll::Ready(())
    })
    .await;
    let r = tokio::time::timeout(Duration::from_secs(2), a).await;
    let st = r.expect("A was never woken for the answer B read").expect("task");
    assert_eq!(st.unwrap(), ExitStatus::Exited(7));
}

/// A fd that is not open, in the middle of a status_many: that item's error (EBADF), the
/// others' statuses in order, and the connection goes on.
#[tokio::test]
async fn server_status_many_bad_fd_is_its_items_error() {
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    let mut cmds: Vec<Command> = (0..70).map(|i| sh(&format!("exit {}", i % 5))).collect();
    cmds[10].stdin(Stdio::Fd(987));
    cmds[66].stdin(Stdio::Fd(987));
    let results = client.status_many(&cmds).await.expect("the connection holds");
    for (i, r) in results.into_iter().enumerate() {
        match i {
            10 | 66 => {
                let e = r.unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
            }
            _ => assert_eq!(r.unwrap(), ExitStatus::Exited(i as i32 % 5), "item {i}"),
        }
    }
    assert_eq!(client.status(&sh("exit 2")).await.unwrap(), ExitStatus::Exited(2));
    assert_eq!(server.client().in_flight(), 0);
}

/// A status request whose future is dropped (a timeout) leaves nothing behind: its child
/// runs on and ends, its answer is dropped when it comes, and the connection serves on.
#[tokio::test]
async fn server_status_abandoned_leaves_no_answer_behind() {
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    let marker = common::TempDir::new("status-abandoned");
    let done = marker.path().join("done");
    let script = format!("sleep 0.3; : > {}", done.display());
    let sleeper = sh(&script);
    let cancelled = tokio::time::timeout(Duration::from_millis(50), client.status(&sleeper));
    assert!(cancelled.await.is_err(), "the child still sleeps");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done.exists() {
        assert!(Instant::now() < deadline, "the abandoned child ran on and ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Its answer arrives and is dropped while this one is awaited.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(client.status(&sh("exit 4")).await.unwrap(), ExitStatus::Exited(4));
    assert_eq!(server.client().in_flight(), 0, "nothing pending or kept");
}

/// Eight tasks on two worker threads share one connection: every answer reaches the task
/// that asked (the child's output names its task and round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_client_shared_by_many_tasks() {
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    let mut tasks = Vec::new();
    for t in 0..8 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..15 {
                let mut cmd = Command::new("echo");
                cmd.arg(format!("{t}/{round}")).stdout(Stdio::Pipe);
                let child = client.spawn(&cmd).await.expect("spawn via server");
                let out = child.wait_with_output().await.expect("output");
                assert_eq!(out.stdout, format!("{t}/{round}\n").as_bytes());
                assert!(out.status.success());
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
}

/// Waiting for an answer never blocks the runtime's one thread: with the server stopped
/// (SIGSTOP), a timer on the same current-thread runtime still fires; once it continues,
/// the same request is answered.
#[tokio::test(flavor = "current_thread")]
async fn server_answers_are_awaited_without_blocking_the_thread() {
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let pid = server.pid() as libc::pid_t;
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    // SAFETY: signals to the private server's own pid (our child, not yet reaped).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let mut cmd = Command::new("true");
    let id = client.submit(&cmd).await.expect("the request fits in the socket");
    let waited = tokio::time::timeout(Duration::from_millis(300), client.receive(id)).await;
    assert!(waited.is_err(), "no answer from a stopped server, and the timer still fired");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let mut child = client.receive(id).await.expect("answered once the server runs");
    assert!(child.wait().await.unwrap().success());
    assert!(cmd.status_async().await.unwrap().success(), "a local spawn beside it");
}

/// Requests larger than the socket holds (300 × 96 KiB of environment, ~28 MiB) go out in
/// parts while answers are read: nothing is lost, and the children see the whole variable.
#[tokio::test]
async fn server_requests_larger_than_the_socket_go_through() {
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    let big = "x".repeat(96 * 1024);
    let cmds: Vec<Command> = (0..300)
        .map(|_| {
            let mut c = sh("test ${#BIG} -eq 98304");
            c.env("BIG", &big);
            c
        })
        .collect();
    let results = client.spawn_many(&cmds).await.expect("the connection holds");
    assert_eq!(results.len(), 300);
    for r in results {
        let mut child = r.expect("spawned");
        assert!(child.wait().await.unwrap().success(), "the child saw all 98304 bytes");
    }
}

/// A command whose environment is `kib` KiB (more than a Unix socket holds).
fn big_env_command(kib: usize) -> Command {
    let mut c = Command::new("true");
    let v = "y".repeat(100 * 1024);
    for i in 0..kib / 100 {
        c.env(format!("BIG{i}"), &v);
    }
    c
}

fn signal(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: a signal to the private server's own pid (our child, not yet reaped).
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// One request larger than the socket, from one task, with nothing else going on: its tail
/// goes out before the answer is awaited (else the server, holding half a frame, never
/// answers). With the server stopped first, so the socket surely fills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_one_request_larger_than_the_socket() {
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let pid = server.pid() as libc::pid_t;
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    for kib in [800, 2000] {
        let cmd = big_env_command(kib);
        let r = tokio::time::timeout(Duration::from_secs(20), client.spawn(&cmd));
        let mut child = r.await.expect("answered").expect("spawned");
        assert!(child.wait().await.unwrap().success());
    }
    signal(pid, libc::SIGSTOP);
    let c2 = client.clone();
    let t = tokio::spawn(async move { c2.spawn(&big_env_command(800)).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    signal(pid, libc::SIGCONT);
    let r = tokio::time::timeout(Duration::from_secs(20), t).await;
    r.expect("an 800 KiB request is answered").expect("task").expect("spawned");
}

/// A receive cancelled (by a timeout) while another task waits does not strand that task;
/// nor does a submit cancelled while the socket is full.
#[tokio::test(flavor = "current_thread")]
async fn server_cancelled_waits_strand_no_other_task() {
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let pid = server.pid() as libc::pid_t;
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    signal(pid, libc::SIGSTOP);
    let c2 = client.clone();
    let a = tokio::spawn(async move { c2.spawn(&Command::new("true")).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(100)).await; // A waits for its answer
    let id = client.submit(&Command::new("true")).await.unwrap();
    let cancelled = tokio::time::timeout(Duration::from_millis(100), client.receive(id)).await;
    assert!(cancelled.is_err(), "a stopped server does not answer");
    let big = big_env_command(300);
    let mut timed_out = false;
    for _ in 0..10 {
        if tokio::time::timeout(Duration::from_millis(100), client.submit(&big)).await.is_err() {
            timed_out = true;
            break;
        }
    }
    assert!(timed_out, "the socket filled and a submit was cancelled");
    signal(pid, libc::SIGCONT);
    let r = tokio::time::timeout(Duration::from_secs(20), a).await;
    r.expect("task A was woken").expect("task").expect("spawned");
    // The connection is still usable afterwards.
    let mut child = client.spawn(&Command::new("true")).await.expect("spawn after");
    assert!(child.wait().await.unwrap().success());
}

/// Two tasks submitting into a full socket are both woken when it drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_two_submitters_on_a_full_socket() {
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let pid = server.pid() as libc::pid_t;
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    signal(pid, libc::SIGSTOP);
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            let cmds: Vec<Command> = (0..3).map(|_| big_env_command(300)).collect();
            c.spawn_many(&cmds).await.map(|v| v.into_iter().filter(|r| r.is_ok()).count())
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    signal(pid, libc::SIGCONT);
    for (i, t) in tasks.into_iter().enumerate() {
        let r = tokio::time::timeout(Duration::from_secs(20), t).await;
        let n = r.unwrap_or_else(|_| panic!("submitter {i} was woken")).expect("task");
        assert_eq!(n.expect("the connection holds"), 3);
    }
}

/// Remote children dropped unwaited go to this process's orphan list; a private server
/// forked afterwards must not take that list's fd numbers for its own (it closes what it
/// inherits, and its spawns reap orphans): 40 spawns with pipes through it all work.
#[tokio::test]
async fn remote_children_dropped_unwaited_do_not_reach_a_later_server() {
    let mut first = spawnkit::PrivateServer::start().expect("private server");
    let client = spawnkit::tokio::Client::new(first.client()).expect("async client");
    for _ in 0..20 {
        drop(client.spawn(&sh("sleep 0.3")).await.expect("spawn"));
    }
    let mut second = spawnkit::PrivateServer::start().expect("second private server");
    let c2 = spawnkit::tokio::Client::new(second.client()).expect("async client");
    for i in 0..40 {
        let mut cmd = Command::new("echo");
        cmd.arg(format!("n{i}")).stdout(Stdio::Pipe);
        let out = c2.spawn(&cmd).await.expect("spawn").wait_with_output().await.expect("out");
        assert_eq!(out.stdout, format!("n{i}\n").as_bytes());
    }
}

/// The async spawn_many sends its commands in batches (one message per frame); a command
/// whose fd cannot be passed fails alone, and every other command of its frame runs once.
#[tokio::test]
async fn server_spawn_many_batches_fail_one_item_alone() {
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    let dir = std::env::temp_dir().join(format!("spawnkit-tokio-batch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log");
    let _ = std::fs::remove_file(&log);
    let good = sh(&format!("echo x >> {}", log.display()));
    let mut bad = Command::new("true");
    bad.stdin(Stdio::Fd(977)); // not open in this process
    let mut cmds: Vec<&Command> = vec![&good; 90];
    cmds[70] = &bad;
    let results = client.spawn_many(cmds).await.expect("the connection holds");
    assert_eq!(results.len(), 90);
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(mut c) => assert!(c.wait().await.unwrap().success(), "item {i}"),
            Err(e) => assert_eq!(i, 70, "only the bad command fails: {e}"),
        }
    }
    let lines = std::fs::read_to_string(&log).unwrap_or_default().lines().count();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(lines, 89, "each good command ran once");
}

/// `start_async`: the clone on the calling task, the exec awaited through the reactor. The
/// child sees its command; a missing program is the same error as `spawn_async`'s; the
/// future holds no borrow of the command (it goes to `tokio::spawn`).
#[tokio::test(flavor = "current_thread")]
async fn start_async_output_errors_and_tasks() {
    let mut cmd = sh("echo \"$0 $SPAWNKIT_T\"; pwd");
    cmd.arg0("started").env("SPAWNKIT_T", "env").current_dir("/").stdout(Stdio::Pipe);
    let fut = cmd.start_async();
    drop(cmd);
    let out = tokio::spawn(fut).await.unwrap().unwrap().wait_with_output().await.unwrap();
    assert_eq!(out.stdout, b"started env\n/\n");
    let late =
        Command::new("/nonexistent/spawnkit-test-program").start_async().await.err().unwrap();
    let now = Command::new("/nonexistent/spawnkit-test-program").spawn_async().err().unwrap();
    assert_eq!(late.raw_os_error(), Some(libc::ENOENT), "{late}");
    assert_eq!(late.to_string(), now.to_string());
}

/// 64 children starting at once on one thread: every start resolves, in any order of
/// completion, to its own child, and no thread is made for it (counted in a process of its
/// own, as above: sibling tests start threads).
#[test]
fn start_async_many_in_flight_on_one_thread() {
    if !common::alone("start_async_many_in_flight_on_one_thread") {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    rt.block_on(many_starts_on_one_thread());
}

async fn many_starts_on_one_thread() {
    let before = threads();
    let starts: Vec<_> = (0..64)
        .map(|i| {
            let mut c = sh(&format!("echo {i}; exit {}", i % 4));
            c.stdout(Stdio::Pipe);
            c.start_async()
        })
        .collect();
    let mut set = tokio::task::JoinSet::new();
    for (i, s) in starts.into_iter().enumerate() {
        set.spawn(async move {
            let out = s.await.unwrap().wait_with_output().await.unwrap();
            assert_eq!(out.stdout, format!("{i}\n").as_bytes());
            assert_eq!(out.status.code(), Some(i as i32 % 4));
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    assert_eq!(threads(), before, "no thread was made for starting or waiting");
}

/// A start dropped before it resolved: its child still runs and is reaped later; with
/// kill_on_drop it is killed. (The children run under names of their own, symlinks to sleep
/// and true, so other tests' children running meanwhile do not count.)
#[tokio::test(flavor = "current_thread")]
async fn start_async_dropped_unresolved() {
    let dir = std::env::temp_dir().join(format!("spawnkit-startdrop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (sleeper, quick) = (dir.join("skdropsleep"), dir.join("skdroptrue"));
    for (link, to) in [(&sleeper, "/bin/sleep"), (&quick, "/bin/true")] {
        let _ = std::fs::remove_file(link);
        std::os::unix::fs::symlink(to, link).unwrap();
    }
    let fut = Command::new(&sleeper).arg("30").kill_on_drop(true).start_async();
    drop(fut);
    let fut = Command::new(&quick).start_async();
    drop(fut);
    let me = std::process::id().to_string();
    let ours = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
            .filter(|st| st.contains("(skdropsleep)") || st.contains("(skdroptrue)"))
            .filter(|st| {
                st.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)) == Some(&me)
            })
            .collect::<Vec<_>>()
    };
    let t = Instant::now();
    loop {
        spawnkit::reap_orphans();
        let left = ours();
        if left.is_empty() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "children left: {left:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Near the fd limit `spawn_many` starts every child that one spawn after another would
/// have: a start not yet collected holds a pipe besides its pidfd, and when fds run out the
/// ones held are collected (each child then holds only its pidfd) and the start tried again.
#[tokio::test]
async fn spawn_many_near_the_fd_limit_starts_what_one_by_one_would() {
    if !common::alone("spawn_many_near_the_fd_limit_starts_what_one_by_one_would") {
        return;
    }
    const N: usize = 41;
    // Room for this process's fds, the N children's pidfds and two more.
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    common::set_fd_limit(open + N as u64 + 2);
    let mut cmds: Vec<Command> = (0..N).map(|_| Command::new("true")).collect();
    let children = spawn_many(cmds.iter_mut());
    let failed: Vec<String> =
        children.iter().filter_map(|c| c.as_ref().err()).map(ToString::to_string).collect();
    assert!(failed.is_empty(), "{} of {N} failed: {failed:?}", failed.len());
    for c in children {
        assert_eq!(c.unwrap().wait().await.unwrap(), ExitStatus::Exited(0));
    }
}

/// An Env frame larger than the socket's buffer goes out in part under a spawn that is then
/// cancelled (its tail waits in the client), and another task's request, with another base
/// environment, follows: each child sees its own base, and the connection stays in step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_spawn_with_a_half_sent_environment_leaves_the_next_one_its_own() {
    let dir = common::TempDir::new("tokio-env");
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let pid = server.pid() as libc::pid_t;
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    let path = std::env::var("PATH").unwrap();
    let (fa, fb) = (dir.join("a"), dir.join("b"));
    // 900 kB of environment in nine variables (each under the kernel's 128 kB per string).
    let chunk = "p".repeat(100 * 1024);
    let mut a_env: Vec<(String, String)> =
        (0..9).map(|i| (format!("PAD{i}"), chunk.clone())).collect();
    a_env.push(("MARK".into(), "a".into()));
    a_env.push(("PATH".into(), path.clone()));
    let mut a = sh("echo \"$MARK:${#PAD8}\" > \"$0\"");
    a.arg(&fa).base_env(a_env);
    let mut b = sh("echo \"$MARK:${PAD0-none}\" > \"$0\"");
    b.arg(&fb).base_env([("MARK", "b"), ("PATH", path.as_str())]);
    let mut warm = client.spawn(&sh("true")).await.unwrap();
    assert!(warm.wait().await.unwrap().success());
    // SAFETY: kill(2) of our own child, the private server.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let cut = tokio::time::timeout(Duration::from_millis(200), client.spawn(&a)).await;
    assert!(cut.is_err(), "a stopped server cannot have answered");
    let (c2, b2) = (client.clone(), b.try_clone().unwrap());
    let other = tokio::spawn(async move { c2.spawn(&b2).await?.wait().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let st = tokio::time::timeout(Duration::from_secs(20), other).await.expect("answered");
    assert!(st.unwrap().unwrap().success());
    assert_eq!(std::fs::read_to_string(&fb).unwrap(), "b:none\n");
    for _ in 0..2 {
        assert!(client.spawn(&a).await.unwrap().wait().await.unwrap().success());
        assert_eq!(std::fs::read_to_string(&fa).unwrap(), format!("a:{}\n", 100 * 1024));
        assert!(client.spawn(&b).await.unwrap().wait().await.unwrap().success());
        assert_eq!(std::fs::read_to_string(&fb).unwrap(), "b:none\n");
    }
}

/// This thread's CPU time (a current-thread runtime: its reactor runs here, so a wait that
/// spun would spin on this thread; other tests' threads are not counted).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A server's child is known to have ended at its reap, by the server: its pidfd is readable
/// from its exit on. With the server stopped after the child's exit, `wait` sleeps until the
/// server runs again and reaps it (the reactor's next edge), and no thread spins meanwhile.
#[tokio::test]
async fn waiting_for_a_server_child_sleeps_until_the_server_has_reaped_it() {
    let mut server = spawnkit::PrivateServer::start().expect("private server");
    let client = spawnkit::tokio::Client::new(server.client()).expect("async client");
    let mut child = client.spawn(sh("sleep 0.1").stdout(Stdio::Null)).await.expect("spawn");
    let pid = server.pid() as i32;
    // SAFETY: kill of our own server child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // Resumed by another process: a spinning wait could starve a thread of this one.
    let mut resume = std::process::Command::new("sh")
        .args(["-c", &format!("sleep 0.6; kill -CONT {pid}")])
        .spawn()
        .expect("the resumer");
    let (t0, c0) = (Instant::now(), thread_cpu());
    // Bounded: a wait that missed the hang-up fails the test rather than hanging it.
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    let (waited, cpu) = (t0.elapsed(), thread_cpu() - c0);
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    resume.wait().expect("the resumer");
    assert_eq!(status.expect("ended within 10 s").expect("wait"), ExitStatus::Exited(0));
    assert!(waited >= Duration::from_millis(500), "{waited:?}");
    assert!(cpu < Duration::from_millis(150), "the wait spun: {cpu:?} of CPU in {waited:?}");
    drop(server);
}
