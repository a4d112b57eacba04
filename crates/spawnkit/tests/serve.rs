//! The spawn server through `spawnkit::Client`, with real servers: one running on a thread of
//! this test process (`Server::run`), and private servers forked from it
//! (`PrivateServer::start`). The child's view is read from inside it, by the probe.

mod common;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use common::{probe, State, TempDir};
use spawnkit::serve::{auth, frame, Key};
use spawnkit::{
    Client, Command, ErrorKind, ExitStatus, PrivateServer, Server, ServerOptions, Signal, Stdio,
};

/// A server on a thread of this process, stopped on drop.
struct ThreadServer {
    socket: PathBuf,
    stopper: spawnkit::serve::Stopper,
    counts: std::sync::Arc<spawnkit::serve::Counts>,
    thread: Option<std::thread::JoinHandle<spawnkit::Result<()>>>,
    _dir: TempDir,
}

impl ThreadServer {
    fn start() -> ThreadServer {
        let dir = TempDir::new("serve");
        let socket = dir.join("s.sock");
        let server = Server::bind(Some(&socket), None, ServerOptions::default()).expect("bind");
        let stopper = server.stopper();
        let counts = server.counts();
        let thread = Some(std::thread::spawn(move || server.run()));
        ThreadServer { socket, stopper, counts, thread, _dir: dir }
    }

    fn client(&self) -> Client {
        Client::connect(&self.socket).expect("connect")
    }

    fn key(&self) -> Key {
        Key::read_file(&spawnkit::serve::key_path_for(&self.socket)).expect("key")
    }
}

impl Drop for ThreadServer {
    fn drop(&mut self) {
        self.stopper.stop();
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread").expect("server run");
        }
    }
}

/// The probe with these arguments.
fn probe_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new(probe());
    cmd.args(args);
    cmd
}

/// A client of `server` whose children learn their status from Exit frames, as on a kernel
/// before 6.15.
fn exit_frames_client(server: &ThreadServer) -> Client {
    let mut client = server.client();
    client.use_exit_frames(true);
    client
}

/// A child of `client` that sleeps a minute, waited for on a thread of its own (which reads
/// its Exit frame from the connection), once that thread is in its wait; its pid.
fn sleeper_waited_on_a_thread(
    client: &mut Client,
) -> (i32, std::thread::JoinHandle<spawnkit::Result<ExitStatus>>) {
    let mut child = client.spawn(&probe_cmd(&["sleep", "60"])).unwrap();
    let pid = child.id() as i32;
    let waiter = std::thread::spawn(move || child.wait());
    std::thread::sleep(Duration::from_millis(100));
    (pid, waiter)
}

/// Kill the child `pid` of [`sleeper_waited_on_a_thread`] (it runs: the server has not
/// reaped it) and check that its thread's wait learns so.
fn kill_waited(pid: i32, waiter: std::thread::JoinHandle<spawnkit::Result<ExitStatus>>) {
    assert!(!waiter.is_finished(), "the wait returned before its child ended");
    // SAFETY: kill takes integers.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    assert_eq!(waiter.join().unwrap().unwrap().signal(), Some(libc::SIGKILL));
}

fn probe_state_via(client: &mut Client, configure: impl FnOnce(&mut Command)) -> State {
    let mut cmd = Command::new(probe());
    cmd.arg("state").stdout(Stdio::Pipe);
    configure(&mut cmd);
    let mut child = client.spawn(&cmd).expect("spawn via server");
    assert!(child.is_remote());
    let out = child.communicate(None, Some(Duration::from_secs(20))).expect("communicate");
    assert!(out.status.success(), "probe ended with {}", out.status);
    State::parse(&String::from_utf8(out.stdout).expect("utf-8"))
}

#[test]
fn the_child_has_the_clients_cwd_env_and_fds_and_the_servers_parent() {
    let mut server = PrivateServer::start().expect("private server");
    let server_pid = server.pid();
    let dir = TempDir::new("serve-fds");
    let file = std::fs::File::create(dir.join("passed")).unwrap();
    let st = probe_state_via(server.client(), |cmd| {
        cmd.env("SPAWNKIT_SERVE_TEST", "client-side").fd(5, file.as_raw_fd());
    });
    assert_eq!(st.int("ppid") as u32, server_pid, "the parent is the server");
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(st.get("cwd"), cwd.display().to_string(), "the client's cwd");
    assert_eq!(st.env.get("SPAWNKIT_SERVE_TEST").map(String::as_str), Some("client-side"));
    // The whole environment is this process's (PATH as an example of an inherited one).
    assert_eq!(st.env.get("PATH").cloned(), std::env::var("PATH").ok());
    let fd5 = st.fd(5).expect("fd 5 passed");
    assert!(fd5.target.ends_with("/passed"), "fd 5 is {}", fd5.target);
    // Nothing but 0-2 and the mapped fd: the server's own fds do not leak.
    let mut fds = st.fd_numbers();
    fds.retain(|&fd| fd > 2);
    assert_eq!(fds, vec![5], "child fds: {}", st.get("fds"));
    // Inherited stdin/stderr are this process's own, passed by SCM_RIGHTS.
    let ours = std::fs::read_link("/proc/self/fd/2").unwrap();
    assert_eq!(st.fd(2).unwrap().target, ours.display().to_string());
}

#[test]
fn pipes_statuses_and_signals() {
    let server = ThreadServer::start();
    let mut client = server.client();
    // stdin and stdout pipes made by the client.
    let mut cat = Command::new(probe());
    cat.arg("cat").stdin(Stdio::Pipe).stdout(Stdio::Pipe);
    let mut child = client.spawn(&cat).unwrap();
    let out = child.communicate(Some(b"through the server"), None).unwrap();
    assert_eq!(out.stdout, b"through the server");
    assert_eq!(out.status, ExitStatus::Exited(0));
    // Exit codes and deaths by signal.
    let mut exit7 = Command::new(probe());
    exit7.args(["exit", "7"]);
    assert_eq!(client.spawn(&exit7).unwrap().wait().unwrap(), ExitStatus::Exited(7));
    let mut killself = Command::new(probe());
    killself.args(["kill", "15"]);
    let st = client.spawn(&killself).unwrap().wait().unwrap();
    assert_eq!(st.signal(), Some(libc::SIGTERM));
    // wait_timeout, try_wait and a signal sent through the pidfd the server passed.
    let mut sleeper = Command::new(probe());
    sleeper.args(["sleep", "30"]);
    let mut child = client.spawn(&sleeper).unwrap();
    assert_eq!(child.try_wait().unwrap(), None);
    assert_eq!(child.wait_timeout(Duration::from_millis(50)).unwrap(), None);
    child.send_signal(Signal::KILL).unwrap();
    let st = child.wait_timeout(Duration::from_secs(10)).unwrap().expect("ended");
    assert_eq!(st.signal(), Some(libc::SIGKILL));
    assert_eq!(child.try_wait().unwrap(), Some(st));
}

#[test]
fn errors_carry_the_step_path_and_errno_of_a_local_spawn() {
    // A server that reaps through pidfds (on a thread here) and one with a reaper (a
    // private server, in a process of its own).
    let server = ThreadServer::start();
    errors_match_local(&mut server.client());
    let mut private = PrivateServer::start().unwrap();
    errors_match_local(private.client());
}

fn errors_match_local(client: &mut Client) {
    let cases: Vec<Command> = vec![
        {
            let mut c = Command::new("/bin/true");
            c.current_dir("/nonexistent/dir");
            c
        },
        Command::new("/no/such/prog"),
        Command::new("no-such-program-in-path"),
        {
            let mut c = Command::new("/etc/passwd");
            c.current_dir("/");
            c
        },
    ];
    for mut cmd in cases {
        let remote = client.spawn(&cmd).expect_err("must fail");
        let local = cmd.spawn().expect_err("must fail locally too");
        assert_eq!(remote.to_string(), local.to_string());
        assert_eq!(remote.step(), local.step());
        assert_eq!(remote.raw_os_error(), local.raw_os_error());
        assert_eq!(remote.kind(), local.kind());
        assert_eq!(remote.exit_code(), local.exit_code());
        assert_eq!(remote.is_in_child(), local.is_in_child());
    }
    // The connection is still good after errors.
    assert!(client.spawn(&Command::new("/bin/true")).unwrap().wait().unwrap().success());
}

#[test]
fn the_gate_refuses_what_would_be_the_servers() {
    let server = ThreadServer::start();
    let mut client = server.client();
    let mut keep_fds = Command::new("/bin/true");
    keep_fds.close_other_fds(false);
    let e = client.spawn(&keep_fds).unwrap_err();
    assert_eq!((e.kind(), e.step()), (ErrorKind::Unsupported, "serve"), "{e}");
    // A relative cwd: the Client resolves it against its own (here a missing directory, so
    // chdir fails naming the joined path); a request that still carries one is refused.
    let mut relative = Command::new("/bin/true");
    relative.current_dir("relative/dir");
    let e = client.spawn(&relative).unwrap_err();
    let joined = std::env::current_dir().unwrap().join("relative/dir");
    assert_eq!((e.step(), e.raw_os_error()), ("chdir", Some(libc::ENOENT)), "{e}");
    assert!(e.to_string().contains(&*joined.to_string_lossy()), "{e}");
    relative.stdin(Stdio::Null).stdout(Stdio::Null).stderr(Stdio::Null).env_clear();
    let (body, fds) = relative.to_wire().unwrap();
    assert!(fds.is_empty());
    let mut raw = authenticated(&server);
    let h = frame::Header {
        len: body.len() as u32,
        kind: frame::Kind::Spawn,
        flags: 0,
        nfds: 0,
        id: 7,
    };
    raw.write_all(&[&h.encode()[..], &body].concat()).unwrap();
    let mut rh = [0u8; frame::HEADER_LEN];
    raw.read_exact(&mut rh).unwrap();
    let rh = frame::Header::decode(&rh).unwrap();
    assert_eq!(rh.kind, frame::Kind::Error);
    let mut why = vec![0u8; rh.len as usize];
    raw.read_exact(&mut why).unwrap();
    let why = String::from_utf8_lossy(&why);
    assert!(why.contains("relative path would resolve"), "{why}");
    let mut lock = Command::new("/bin/true");
    lock.lock(spawnkit::Lock { path: "/tmp/x.lock".into(), shared: false, timeout: None });
    let e = client.spawn(&lock).unwrap_err();
    assert!(e.to_string().contains("stall the server"), "{e}");
    // A fd to pass that is not open: refused here, and the connection is still good.
    let mut closed_fd = Command::new("/bin/true");
    closed_fd.stdout(Stdio::Fd(987));
    let e = client.spawn(&closed_fd).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
    assert!(client.spawn(&Command::new("/bin/true")).unwrap().wait().unwrap().success());
}

#[test]
fn many_requests_in_flight_from_one_thread() {
    let server = ThreadServer::start();
    let mut client = server.client();
    let cmds: Vec<Command> = (0..64)
        .map(|i| {
            let mut c = Command::new(probe());
            c.args(["exit", &(i % 50).to_string()]);
            c
        })
        .collect();
    let children = client.spawn_many(&cmds, 16).unwrap();
    for (i, child) in children.into_iter().enumerate() {
        let st = child.unwrap().wait().unwrap();
        assert_eq!(st, ExitStatus::Exited((i % 50) as i32));
    }
    // submit/receive by hand: ids answered once each.
    let mut ids: Vec<u64> = (0..20).map(|_| client.submit(&cmds[3]).unwrap()).collect();
    assert_eq!(client.in_flight(), 20);
    let mut got = Vec::new();
    while client.in_flight() > 0 {
        let (id, child) = client.receive().unwrap();
        assert_eq!(child.unwrap().wait().unwrap(), ExitStatus::Exited(3));
        got.push(id);
    }
    got.sort_unstable();
    ids.sort_unstable();
    assert_eq!(got, ids);
}

/// `Client::wake` (a Wake frame ahead of a request a caller is still preparing): a request
/// right after it, a request long after it (the server's window has run out), and a wake
/// while requests are in flight (nothing sent) are all answered as ever, and the frames stay
/// in step (the answers match their requests).
#[test]
fn wake_ahead_of_requests() {
    let server = ThreadServer::start();
    let mut client = server.client();
    let exit = |code: i32| {
        let mut c = Command::new(probe());
        c.args(["exit", &code.to_string()]);
        c
    };
    client.wake().unwrap();
    assert_eq!(client.spawn(&exit(3)).unwrap().wait().unwrap(), ExitStatus::Exited(3));
    client.wake().unwrap();
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(client.spawn(&exit(4)).unwrap().wait().unwrap(), ExitStatus::Exited(4));
    let id = client.submit(&exit(5)).unwrap();
    client.wake().unwrap();
    assert_eq!(client.receive_id(id).unwrap().wait().unwrap(), ExitStatus::Exited(5));
    client.wake().unwrap();
    client.wake().unwrap();
    assert_eq!(client.spawn(&exit(6)).unwrap().wait().unwrap(), ExitStatus::Exited(6));
}

/// Where the client sends Wake frames, counted by the server (frames are read in order, so
/// once an answer is back every frame sent before its request has been counted): one before
/// a lone blocking request; none before a request while another is in flight, nor for a
/// `wake()` then; one for a `wake()` with nothing in flight, and a request long after it
/// sends its own; none of its own for a request right after a `wake()` (within 60 µs: tried
/// until it happens once, as a loaded machine may take longer between the two).
#[test]
fn wake_frames_where_the_client_sends_them() {
    let server = ThreadServer::start();
    let mut client = server.client();
    let cmd = Command::new("/bin/true");
    let wakes = || server.counts.wakes();
    let w0 = wakes();
    assert!(client.spawn(&cmd).unwrap().wait().unwrap().success());
    assert_eq!(wakes(), w0 + 1, "one Wake before a lone request");
    let a = client.submit(&cmd).unwrap(); // lone: a Wake
    let b = client.submit(&cmd).unwrap(); // `a` in flight: none
    client.wake().unwrap(); // both in flight: none
    for id in [a, b] {
        assert!(client.receive_id(id).unwrap().wait().unwrap().success());
    }
    // One more lone request (a Wake) whose answer means every frame before it was read.
    assert!(client.spawn(&cmd).unwrap().wait().unwrap().success());
    assert_eq!(wakes(), w0 + 3, "none while a request is in flight");
    // A wake() with nothing in flight sends one; a request well after it (its 60 µs gone)
    // sends its own.
    client.wake().unwrap();
    std::thread::sleep(Duration::from_millis(2));
    assert!(client.spawn(&cmd).unwrap().wait().unwrap().success());
    assert_eq!(wakes(), w0 + 5, "wake() sends one, and a request long after it its own");
    let mut spared = 0;
    for _ in 0..50 {
        let before = wakes();
        client.wake().unwrap();
        assert!(client.spawn(&cmd).unwrap().wait().unwrap().success());
        let sent = wakes() - before;
        assert!(sent == 1 || sent == 2, "{sent} Wake frames for a wake() and a request");
        spared += usize::from(sent == 1);
        if spared > 0 {
            break;
        }
    }
    assert!(spared > 0, "a request right after wake() sent a Wake of its own every time");
}

/// An event loop's way: the connection's fd (`AsRawFd`) becomes readable when answers
/// come, `poll_answers` reads them without ever blocking and lists every answer waiting (also
/// ones a blocking call read for others), and `receive_id` then returns at once.
#[test]
fn answers_polled_when_the_socket_is_readable() {
    let mut server = PrivateServer::start().expect("private server");
    let client = server.client();
    assert!(!client.uses_exit_frames());
    assert_eq!(client.poll_answers().unwrap(), Vec::<u64>::new(), "nothing in flight");
    let fd = client.as_raw_fd();
    let cmds: Vec<Command> = (0..8)
        .map(|i| {
            let mut c = Command::new(probe());
            c.args(["exit", &i.to_string()]);
            c
        })
        .collect();
    let ids: Vec<u64> = cmds.iter().map(|c| client.submit(c).unwrap()).collect();
    let mut answered: Vec<u64> = Vec::new();
    while answered.len() < ids.len() {
        let before = answered.len();
        let [ready] = spawnkit::process::poll_readable([fd], 10_000).unwrap();
        assert!(ready, "answers did not come within 10 s");
        answered = client.poll_answers().unwrap();
        assert!(answered.len() >= before, "an answer waiting was dropped from the list");
    }
    answered.sort_unstable();
    assert_eq!(answered, ids);
    // Nothing left to read: the socket is not readable and polling does not block.
    assert_eq!(spawnkit::process::poll_readable([fd], 0).unwrap(), [false]);
    assert_eq!(client.poll_answers().unwrap().len(), ids.len());
    for (i, id) in ids.iter().enumerate().rev() {
        let mut child = client.receive_id(*id).unwrap();
        assert_eq!(child.wait().unwrap(), ExitStatus::Exited(i as i32));
        assert_eq!(client.poll_answers().unwrap().len(), i, "taken answers leave the list");
    }
    // An answer a blocking call read while waiting for its own is listed too.
    let first = client.submit(&cmds[1]).unwrap();
    let second = client.submit(&cmds[2]).unwrap();
    let mut child = client.receive_id(second).unwrap();
    assert_eq!(child.wait().unwrap(), ExitStatus::Exited(2));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while client.poll_answers().unwrap() != [first] {
        assert!(std::time::Instant::now() < deadline, "the first answer is never listed");
        spawnkit::process::poll_readable([fd], 100).unwrap();
    }
    assert_eq!(client.receive_id(first).unwrap().wait().unwrap(), ExitStatus::Exited(1));
}

/// `submit_many` sends one frame for many commands (the same one repeated, and others with
/// pipes of their own): every child is the one asked for. In `spawn_many`, a command over
/// the protocol's limits is its own item's error and the others of its batch still run.
/// Against a server on a thread (one spawning thread, answers one by one) and a private
/// server (spawner threads, a frame's answers coalesced into SpawnedMany).
fn batched_requests_and_answers(client: &mut Client) {
    let same = {
        let mut c = Command::new(probe());
        c.args(["exit", "7"]);
        c
    };
    let ids = client.submit_many(std::iter::repeat_n(&same, 40)).unwrap();
    assert_eq!(ids.len(), 40);
    assert_eq!(client.in_flight(), 40);
    for id in ids {
        assert_eq!(client.receive_id(id).unwrap().wait().unwrap(), ExitStatus::Exited(7));
    }
    let mut cmds: Vec<Command> = (0..30)
        .map(|i| {
            let mut c = Command::new("/bin/sh");
            c.args(["-c", &format!("echo item-{i}; exit {}", i % 4)]).stdout(Stdio::Pipe);
            c
        })
        .collect();
    cmds[11] = Command::new(probe());
    cmds[11].arg("x".repeat(5 << 20)); // over the 4 MiB frame limit
    let children = client.spawn_many(&cmds, 16).unwrap();
    for (i, child) in children.into_iter().enumerate() {
        if i == 11 {
            let Err(e) = child else { panic!("an oversized command is its own error") };
            assert_eq!(e.step(), "encode", "{e}");
            continue;
        }
        let out = child.unwrap().communicate(None, Some(Duration::from_secs(20))).unwrap();
        assert_eq!(out.stdout, format!("item-{i}\n").as_bytes());
        assert_eq!(out.status, ExitStatus::Exited(i as i32 % 4));
    }
    // A command just under the frame limit alone: too large for a batch entry's header, it
    // goes as a plain Spawn and the connection goes on.
    let near_limit = |fill: usize| {
        let mut c = Command::new(probe());
        c.args(["exit", "5"]).current_dir("/").env_clear();
        c.stdin(Stdio::Fd(0)).stdout(Stdio::Fd(1)).stderr(Stdio::Fd(2));
        c.arg("y".repeat(fill));
        c
    };
    let target = spawnkit::serve::frame::MAX_BODY - 2;
    let over = near_limit(target).to_wire().unwrap().0.len() - target;
    let near = near_limit(target - over);
    assert_eq!(near.to_wire().unwrap().0.len(), target);
    let ids = client.submit_many([&near]).unwrap();
    // The server got it whole: the kernel refuses a 4 MiB argument (E2BIG at execve), as it
    // would locally; the connection is fine.
    let Err(e) = client.receive_id(ids[0]) else { panic!("a 4 MiB argument cannot be exec'd") };
    assert_eq!((e.step(), e.raw_os_error()), ("execve", Some(libc::E2BIG)), "{e}");
    assert_eq!(client.spawn(&same).unwrap().wait().unwrap(), ExitStatus::Exited(7));
    assert_eq!(client.in_flight(), 0);
}

#[test]
fn batched_requests_and_answers_thread_server() {
    let server = ThreadServer::start();
    batched_requests_and_answers(&mut server.client());
}

#[test]
fn batched_requests_and_answers_private_server() {
    let mut server = PrivateServer::start().expect("private server");
    batched_requests_and_answers(server.client());
}

/// A batch whose second frame cannot be sent (a fd to pass is not open: nothing of that
/// frame goes out) spawns the first frame's 64 commands once, not twice, and fails only the
/// bad command.
#[test]
fn a_batch_that_fails_midway_spawns_nothing_twice() {
    let mut server = PrivateServer::start().expect("private server");
    let client = server.client();
    let dir = TempDir::new("twice");
    let log = dir.join("log");
    let mut good = Command::new("/bin/sh");
    good.args(["-c", &format!("echo x >> {}", log.display())]);
    let mut bad = Command::new("/bin/true");
    bad.stdin(Stdio::Fd(977)); // not open
    let mut cmds: Vec<&Command> = vec![&good; 64];
    cmds.push(&bad);
    let out = client.spawn_many(cmds, 100).expect("the connection holds");
    assert_eq!(out.len(), 65);
    for (i, r) in out.into_iter().enumerate() {
        match r {
            Ok(mut c) => assert!(c.wait().unwrap().success()),
            Err(e) => assert_eq!(i, 64, "only the bad command fails: {e}"),
        }
    }
    let lines = std::fs::read_to_string(&log).unwrap_or_default().lines().count();
    assert_eq!(lines, 64, "one child per good command");
    assert_eq!(client.in_flight(), 0);
}

/// Exit frames asked of a server with a reaper in a SpawnMany: every request of the frame
/// gets its own refusal (none is left waiting).
#[test]
fn exit_frames_refused_for_every_request_of_a_batch() {
    let mut server = PrivateServer::start().expect("private server");
    let client = server.client();
    client.use_exit_frames(true);
    let cmd = Command::new("/bin/true");
    let ids = client.submit_many([&cmd, &cmd, &cmd]).expect("submit_many");
    assert_eq!(ids.len(), 3);
    for id in ids {
        let Err(e) = client.receive_id(id) else { panic!("refused") };
        assert!(e.to_string().contains("Exit frames"), "{e}");
    }
    assert_eq!(client.in_flight(), 0);
}

#[test]
fn a_megabyte_request_goes_through() {
    let server = ThreadServer::start();
    let mut client = server.client();
    let mut cmd = Command::new(probe());
    cmd.args(["exit", "3"]);
    let big = "x".repeat(100 * 1024);
    for _ in 0..10 {
        cmd.arg(&big);
    }
    assert_eq!(client.spawn(&cmd).unwrap().wait().unwrap(), ExitStatus::Exited(3));
    // And the connection goes on with small ones.
    assert!(client.spawn(&Command::new("/bin/true")).unwrap().wait().unwrap().success());
}

#[test]
fn a_wrong_key_is_refused_and_the_server_goes_on() {
    let server = ThreadServer::start();
    let wrong = Key::generate().unwrap();
    let e = Client::connect_with_key(&server.socket, &wrong).unwrap_err();
    assert!(e.to_string().contains("refused the key"), "{e}");
    // A client that checks the server: a server with another key is not ours.
    let mut good = server.client();
    assert!(good.spawn(&Command::new("/bin/true")).unwrap().wait().unwrap().success());
}

fn read_challenge(s: &mut UnixStream) -> [u8; 32] {
    let mut b = [0u8; frame::HEADER_LEN + 32];
    s.read_exact(&mut b).unwrap();
    let h = frame::Header::decode(b[..16].try_into().unwrap()).unwrap();
    assert_eq!(h.kind, frame::Kind::Challenge);
    b[16..].try_into().unwrap()
}

/// A raw connection through the handshake (Welcome and the server's MAC read), for frames
/// that a `Client` would not send.
fn authenticated(server: &ThreadServer) -> UnixStream {
    let mut raw = UnixStream::connect(&server.socket).unwrap();
    let ns = read_challenge(&mut raw);
    let (answer, _) = auth::client_answer(&server.key(), &ns).unwrap();
    raw.write_all(&answer_frame(&answer)).unwrap();
    assert_eq!(outcome(&mut raw), Some(frame::Kind::Welcome));
    let mut mac = [0u8; 32];
    raw.read_exact(&mut mac).unwrap();
    raw
}

fn answer_frame(body: &[u8]) -> Vec<u8> {
    let h = frame::Header {
        len: body.len() as u32,
        kind: frame::Kind::Answer,
        flags: 0,
        nfds: 0,
        id: 0,
    };
    let mut v = h.encode().to_vec();
    v.extend_from_slice(body);
    v
}

/// What the server answers: Welcome, Failure, or nothing (EOF).
fn outcome(s: &mut UnixStream) -> Option<frame::Kind> {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut h = [0u8; frame::HEADER_LEN];
    s.read_exact(&mut h).ok()?;
    Some(frame::Header::decode(&h).ok()?.kind)
}

#[test]
fn replayed_and_reflected_answers_fail() {
    let server = ThreadServer::start();
    let key = server.key();
    // A legitimate exchange, recorded.
    let mut a = UnixStream::connect(&server.socket).unwrap();
    let ns_a = read_challenge(&mut a);
    let (answer_a, _) = auth::client_answer(&key, &ns_a).unwrap();
    a.write_all(&answer_frame(&answer_a)).unwrap();
    assert_eq!(outcome(&mut a), Some(frame::Kind::Welcome));
    // Replayed on a new connection: another nonce, so it fails.
    let mut b = UnixStream::connect(&server.socket).unwrap();
    let _ = read_challenge(&mut b);
    b.write_all(&answer_frame(&answer_a)).unwrap();
    assert_eq!(outcome(&mut b), Some(frame::Kind::Failure));
    // Reflected: the challenge sent back as the answer.
    let mut c = UnixStream::connect(&server.socket).unwrap();
    let ns_c = read_challenge(&mut c);
    let mut reflected = ns_c.to_vec();
    reflected.extend_from_slice(&ns_c);
    c.write_all(&answer_frame(&reflected)).unwrap();
    assert_eq!(outcome(&mut c), Some(frame::Kind::Failure));
    // Reflected: a server-direction MAC offered as the client's (the labels differ).
    let mut d = UnixStream::connect(&server.socket).unwrap();
    let ns_d = read_challenge(&mut d);
    let (good, nc) = auth::client_answer(&key, &ns_d).unwrap();
    let mut e = UnixStream::connect(&server.socket).unwrap();
    let ns_e = read_challenge(&mut e);
    // The server's MAC over (ns_d, nc) is obtained on d legitimately...
    d.write_all(&answer_frame(&good)).unwrap();
    let mut h = [0u8; 16];
    d.read_exact(&mut h).unwrap();
    let mut server_mac = [0u8; 32];
    d.read_exact(&mut server_mac).unwrap();
    assert!(auth::client_check(&key, &ns_d, &nc, &server_mac));
    // ... and offered back on e as if it were a client's answer over e's own nonce.
    let _ = ns_e;
    let mut forged = nc.to_vec();
    forged.extend_from_slice(&server_mac);
    e.write_all(&answer_frame(&forged)).unwrap();
    assert_eq!(outcome(&mut e), Some(frame::Kind::Failure));
}

#[test]
fn a_private_server_exits_with_its_owner() {
    let server = PrivateServer::start().expect("start");
    let pid = server.pid() as i32;
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    drop(server); // closes the alive pipe and reaps the server
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "server {pid} still there");
}

/// Arbitrary bytes where the answer to the challenge belongs, against a live server (64
/// cases): the connection ends (Failure or EOF), never with a Welcome, and the server goes on.
#[test]
fn arbitrary_bytes_to_a_live_handshake() {
    use proptest::prelude::*;
    let server = ThreadServer::start();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(64));
    let strategy = proptest::collection::vec(any::<u8>(), 0..200);
    runner
        .run(&strategy, |bytes| {
            let mut c = UnixStream::connect(&server.socket).unwrap();
            let _ = read_challenge(&mut c);
            let _ = c.write_all(&bytes);
            let _ = c.shutdown(std::net::Shutdown::Write);
            prop_assert_ne!(outcome(&mut c), Some(frame::Kind::Welcome));
            Ok(())
        })
        .unwrap();
    let mut client = server.client();
    assert!(client.spawn(&Command::new("/bin/true")).unwrap().wait().unwrap().success());
}

#[test]
fn the_faces_can_be_sent_to_threads() {
    fn send<T: Send>() {}
    send::<Client>();
    send::<PrivateServer>();
    send::<Server>();
    send::<spawnkit::Child>();
}

/// The fallback for kernels before 6.15 (no `PIDFD_INFO_EXIT`), forced: the server sends an
/// Exit frame after it reaps, and the child's waits read it from the connection.
#[test]
fn exit_frames_carry_the_status_when_asked() {
    let server = ThreadServer::start();
    let mut client = exit_frames_client(&server);
    let exit7 = probe_cmd(&["exit", "7"]);
    let sleeper = probe_cmd(&["sleep", "30"]);
    let mut a = client.spawn(&exit7).unwrap();
    let mut b = client.spawn(&sleeper).unwrap();
    assert_eq!(b.try_wait().unwrap(), None);
    assert_eq!(b.wait_timeout(Duration::from_millis(50)).unwrap(), None);
    // Frames for one child are kept for the other and for the client's own answers.
    let id = client.submit(&exit7).unwrap();
    assert_eq!(a.wait().unwrap(), ExitStatus::Exited(7));
    b.kill().unwrap();
    assert_eq!(b.wait().unwrap().signal(), Some(libc::SIGKILL));
    let mut c = client.receive_id(id).unwrap();
    assert_eq!(c.wait().unwrap(), ExitStatus::Exited(7));
    // A server with a reaper does not send them (its clients read the status from their
    // pidfds): a clear refusal.
    let mut private = PrivateServer::start().unwrap();
    private.client().use_exit_frames(true);
    let e = private.client().spawn(&exit7).unwrap_err();
    assert_eq!((e.kind(), e.step()), (ErrorKind::Unsupported, "serve"), "{e}");
}

/// A client refuses a server run by another user, whatever key it holds, and a key file
/// another user owns (review finding: a squatted socket path with a key file root can read
/// would otherwise receive root's environment and fds).
#[test]
fn a_server_or_key_of_another_user_is_refused() {
    if spawnkit::process::geteuid() != 0 {
        return; // needs root to act as another user
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("squat");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock = dir.path().join("s.sock");
    // A listener run by nobody (it never answers: the check comes first).
    let mut squatter = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c"])
        .arg(format!(
            "import socket, time; s = socket.socket(socket.AF_UNIX); s.bind({:?}); \
             s.listen(); c, _ = s.accept(); time.sleep(5)",
            sock.to_str().unwrap()
        ))
        .spawn()
        .unwrap();
    // Until it listens: the socket's file exists from its bind, a moment before its listen
    // (a connect in between is refused, ECONNREFUSED: seen under load).
    let key = Key::generate().unwrap();
    let mut err = Client::connect_with_key(&sock, &key).unwrap_err();
    for _ in 0..200 {
        if sock.exists() && err.raw_os_error() != Some(libc::ECONNREFUSED) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        err = Client::connect_with_key(&sock, &key).unwrap_err();
    }
    assert!(err.to_string().contains("runs as uid 65534"), "{err}");
    let _ = squatter.kill();
    let _ = squatter.wait();
    // A key file of nobody's, mode 0600, is no key for us.
    let key_file = dir.path().join("k.key");
    Key::generate().unwrap().write_file_for(&key_file, Some(65534)).unwrap();
    let err = Key::read_file(&key_file).unwrap_err();
    assert!(err.to_string().contains("not owned by this user or root"), "{err}");
}

/// With --allow-uid, root refuses to create its socket and key where another user could swap
/// a path component for a symlink (review finding: a chown by path once gave any root file
/// away); the key is given to the allowed user through its open fd.
#[test]
fn allow_uid_refuses_a_socket_dir_others_can_write() {
    if spawnkit::process::geteuid() != 0 {
        return;
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = TempDir::new("allowuid");
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let opts = || spawnkit::ServerOptions { allow_uid: Some(65534), ..Default::default() };
    let err = spawnkit::Server::bind(Some(&open.join("s.sock")), None, opts()).err().unwrap();
    assert!(err.to_string().contains("must be root's"), "{err}");
    assert!(!open.join("s.sock.key").exists(), "nothing is created before the check");
    // A root-owned 0755 directory is fine; the key file is then the allowed user's.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = spawnkit::Server::bind(Some(&dir.path().join("s.sock")), None, opts()).unwrap();
    let meta = std::fs::symlink_metadata(dir.path().join("s.sock.key")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (65534, 0o600));
    drop(server);
}

/// A child's exit wakes no thread of the server but its loop: SIGCHLD, blocked in every
/// server thread, goes to the loop's signalfd (its reaper) instead of being handed to a
/// thread that would wake for it and drop it (the watchdog did, once per exit).
#[test]
fn exits_wake_no_server_thread() {
    let mut server = PrivateServer::start().unwrap();
    let pid = server.pid();
    // Context switches of the server's threads other than those that spawn or read
    // requests: the watchdog sleeps for seconds at a time.
    let idle_switches = || -> Option<u64> {
        let mut total = 0;
        let mut found = false;
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
            let dir = task.path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if !comm.starts_with("spawnkit-watchd") {
                continue;
            }
            found = true;
            total += voluntary_switches(&dir.join("status"));
        }
        found.then_some(total)
    };
    let mut cmd = Command::new("/bin/true");
    cmd.stdout(Stdio::Null).stderr(Stdio::Null);
    let client = server.client();
    // Warm up: the threads exist and have settled. (A thread takes its name once it runs:
    // under load the watchdog may not have yet; waited for.)
    client.spawn(&cmd).unwrap().wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let before = loop {
        match idle_switches() {
            Some(n) => break n,
            None if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            None => panic!("no watchdog thread in the server: nothing measured"),
        }
    };
    for _ in 0..25 {
        let ids = client.submit_many(std::iter::repeat_n(&cmd, 16)).unwrap();
        for _ in &ids {
            let (_, child) = client.receive().unwrap();
            assert!(child.unwrap().wait().unwrap().success());
        }
    }
    let woke = idle_switches().expect("the watchdog thread went away") - before;
    assert!(woke < 40, "the watchdog woke {woke} times for 400 exits");
}

/// A client waiting for its answer sleeps once per request: the server reading the request
/// (which frees send space on the socket) does not wake it. It waits in `poll` for POLLIN;
/// asleep in a blocking `recvmsg` it was woken by that read too, and went back to sleep,
/// two sleeps per request instead of one.
#[test]
fn a_waiting_client_is_woken_once_per_answer() {
    // In a process of its own: sibling tests' load (some run the test binary again) makes
    // the server answer late, and late answers are what cost a client extra sleeps.
    if !common::alone("a_waiting_client_is_woken_once_per_answer") {
        return;
    }
    let mut server = PrivateServer::start().unwrap();
    let client = server.client();
    let mut cmd = Command::new("/bin/true");
    cmd.stdout(Stdio::Null).stderr(Stdio::Null);
    let mut children = Vec::new();
    children.push(client.spawn(&cmd).unwrap()); // warm up: threads and pool exist
    let sleeps = || voluntary_switches(std::path::Path::new("/proc/thread-self/status"));
    const N: u64 = 200;
    let before = sleeps();
    for _ in 0..N {
        children.push(client.spawn(&cmd).unwrap()); // no wait: only the answers sleep
    }
    let slept = sleeps() - before;
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    // At most one sleep per answer (fewer when an answer is there before the client looks).
    assert!(slept <= N + N / 10, "{slept} sleeps for {N} answers");
}

/// The `voluntary_ctxt_switches` of a /proc `status` file (a task's sleeps so far; 0 if the
/// task is gone).
fn voluntary_switches(status: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(status).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Which of fds 0, 1, 2 a server-spawned shell finds open (`open`/`closed`), told by its
/// built-in test on /proc/$$/fd (a Rust program would find its runtime's /dev/null there).
fn open_or_closed_via(client: &mut Client) -> String {
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "r=''; for n in 0 1 2; do if [ -e /proc/$$/fd/$n ]; then r=\"$r open\"; \
         else r=\"$r closed\"; fi; done; echo $r",
    ])
    .stdout(Stdio::Pipe);
    let mut child = client.spawn(&cmd).expect("spawn via server");
    let out = child.communicate(None, Some(Duration::from_secs(20))).expect("communicate");
    assert!(out.status.success(), "sh ended with {}", out.status);
    String::from_utf8(out.stdout).expect("utf-8").trim_end().to_string()
}

/// A standard stream the client has closed (or marked close-on-exec) is closed in a
/// server-spawned child, as in a local one: never whatever holds that number in the client
/// (here the client's own connection, which took the closed fd 0), nor the server's.
#[test]
fn a_closed_or_cloexec_standard_stream_is_closed_never_the_connection() {
    if !common::alone("a_closed_or_cloexec_standard_stream_is_closed_never_the_connection") {
        return;
    }
    // SAFETY: closing this process's stdin (a process of its own, see `alone`).
    unsafe { libc::close(0) };
    let mut server = PrivateServer::start().expect("private server");
    let conn = server.client().as_raw_fd();
    assert_eq!(conn, 0, "the connection took the closed fd 0");
    assert_eq!(open_or_closed_via(server.client()), "closed open open");
    // The connection still works: nothing was written into it.
    assert_eq!(open_or_closed_via(server.client()), "closed open open");
    // A close-on-exec stderr: what a local child would not have either.
    common::set_cloexec(2, true);
    let seen = open_or_closed_via(server.client());
    common::set_cloexec(2, false);
    assert_eq!(seen, "closed open closed");
}

/// A relative cwd is the client's, as for a local spawn: resolved against the client's
/// working directory, not the server's.
#[test]
fn a_relative_cwd_is_the_clients() {
    if !common::alone("a_relative_cwd_is_the_clients") {
        return;
    }
    let dir = TempDir::new("serve-relcwd");
    std::fs::create_dir(dir.join("sub")).unwrap();
    let mut server = PrivateServer::start().expect("private server");
    std::env::set_current_dir(dir.path()).unwrap();
    let st = probe_state_via(server.client(), |cmd| {
        cmd.current_dir("sub");
    });
    let want = std::fs::canonicalize(dir.join("sub")).unwrap();
    assert_eq!(st.get("cwd"), want.display().to_string());
    // An empty one fails as chdir("") fails locally.
    let err = server.client().spawn(Command::new(probe()).current_dir("")).unwrap_err();
    let local = Command::new(probe()).current_dir("").spawn().unwrap_err();
    assert_eq!(err.to_string(), local.to_string());
}

/// The server's own ignored signals are not its children's: a server started with `&` from a
/// script ignores SIGINT and SIGQUIT, and a child that inherited that could not be
/// interrupted. A served child has them at their default action, as the probe reads them.
#[test]
fn the_servers_ignored_signals_are_not_its_childrens() {
    if !common::alone("the_servers_ignored_signals_are_not_its_childrens") {
        return;
    }
    for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGUSR1] {
        // SAFETY: SIG_IGN runs no code (a process of its own, see `alone`).
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    let mut server = PrivateServer::start().expect("private server");
    let st = probe_state_via(server.client(), |_| {});
    let ignored = u64::from_str_radix(st.get("sigign"), 16).unwrap();
    for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGUSR1] {
        assert_eq!(ignored & (1 << (sig - 1)), 0, "signal {sig} ignored: {ignored:#x}");
    }
    // And through a server on a thread of this process (the same Looper, another start).
    let server = ThreadServer::start();
    let st = probe_state_via(&mut server.client(), |_| {});
    assert_eq!(u64::from_str_radix(st.get("sigign"), 16).unwrap() & 0x206, 0);
}

/// What `Server::bind` makes is removed again when the rest fails or when the server is
/// dropped without running, an existing file is never deleted to make room for a key unless
/// it is a key file (0600, 32 bytes), and the key file cannot be the socket.
#[test]
fn binding_leaves_nothing_behind_and_deletes_no_file_of_yours() {
    let dir = TempDir::new("serve-bind");
    let opts = ServerOptions::default;
    // The bind fails (no such directory): the key written first is removed again.
    let key = dir.join("k");
    let e =
        Server::bind(Some(&dir.join("nodir/s.sock")), Some(&key), opts()).err().expect("refused");
    assert_eq!(e.step(), "bind", "{e}");
    assert!(!key.exists(), "the key file was left behind");
    // The same path for both: refused before anything is made.
    let same = dir.join("same");
    let e = Server::bind(Some(&same), Some(&same), opts()).err().expect("refused");
    assert!(e.to_string().contains("same path"), "{e}");
    assert!(!same.exists());
    // Bound, then dropped without running: both files go.
    let sock = dir.join("s.sock");
    let server = Server::bind(Some(&sock), None, opts()).unwrap();
    let key_file = spawnkit::serve::key_path_for(&sock);
    assert!(sock.exists() && key_file.exists());
    drop(server);
    assert!(!sock.exists() && !key_file.exists(), "a dropped server left its files");
    // A file of yours at the key path is kept and the bind refused.
    let yours = dir.join("yours.key");
    std::fs::write(&yours, b"keep").unwrap();
    let e = Server::bind(Some(&sock), Some(&yours), opts()).err().expect("refused");
    assert!(e.to_string().contains("is not a key file"), "{e}");
    assert_eq!(std::fs::read(&yours).unwrap(), b"keep");
    assert!(!sock.exists());
    // A key file left by an earlier server is replaced (a restart).
    Key::generate().unwrap().write_file(&key_file).unwrap();
    let old = std::fs::read(&key_file).unwrap();
    let server = Server::bind(Some(&sock), None, opts()).unwrap();
    assert_ne!(std::fs::read(&key_file).unwrap(), old, "a fresh key");
    drop(server);
}

/// A socket path too long for a Unix socket address says so (std gives no errno: it read
/// "Input/output error" before), and a client that finds no server names the socket, not
/// the key file it did not get to read.
#[test]
fn socket_path_errors_name_what_is_wrong() {
    let dir = TempDir::new("serve-path");
    let long = dir.join(&"x".repeat(120));
    let e = Server::bind(Some(&long), None, ServerOptions::default()).err().expect("refused");
    assert!(e.to_string().contains("a Unix socket path holds at most 107"), "{e}");
    let e = Client::connect(&long).unwrap_err();
    assert!(e.to_string().contains("a Unix socket path holds at most 107"), "{e}");
    let missing = dir.join("missing.sock");
    let e = Client::connect(&missing).unwrap_err();
    assert_eq!((e.step(), e.raw_os_error()), ("connect", Some(libc::ENOENT)), "{e}");
    assert!(e.to_string().contains("missing.sock\""), "{e}");
}

/// A client turned away by `--max-clients` is told so (a Failure in place of the
/// challenge), not just closed on.
#[test]
fn a_client_over_max_clients_is_told_why() {
    let dir = TempDir::new("serve-max");
    let sock = dir.join("s.sock");
    let opts = ServerOptions { max_clients: Some(1), ..ServerOptions::default() };
    let server = Server::bind(Some(&sock), None, opts).unwrap();
    let stopper = server.stopper();
    let t = std::thread::spawn(move || server.run());
    let mut first = Client::connect(&sock).unwrap();
    let e = Client::connect(&sock).unwrap_err();
    assert!(e.to_string().contains("--max-clients 1"), "{e}");
    assert!(first.spawn(&Command::new("/bin/true")).unwrap().wait().unwrap().success());
    drop(first);
    stopper.stop();
    t.join().unwrap().unwrap();
}

/// Waits past any meaning (`Duration::MAX`) are taken as very long ones, not added to a clock
/// reading until it overflows (a panic in the server's loop before).
#[test]
fn huge_timeouts_are_very_long_not_a_panic() {
    let dir = TempDir::new("serve-huge");
    let sock = dir.join("s.sock");
    let opts = ServerOptions {
        frame_timeout: Some(Duration::MAX),
        idle_exit: Some(Duration::MAX),
        exec_timeout: Some(Duration::MAX),
        ..ServerOptions::default()
    };
    let server = Server::bind(Some(&sock), None, opts).unwrap();
    let stopper = server.stopper();
    let t = std::thread::spawn(move || server.run());
    let mut client = Client::connect(&sock).unwrap();
    // A request left half sent: the loop computes its deadline from frame_timeout.
    let mut raw = UnixStream::connect(&sock).unwrap();
    let _ = read_challenge(&mut raw);
    raw.write_all(&[0u8; 7]).unwrap();
    assert!(client.spawn(&Command::new("/bin/true")).unwrap().wait().unwrap().success());
    drop((client, raw));
    stopper.stop();
    t.join().expect("no panic in the server").unwrap();
}

/// A server removes only the files it made, while they are still the ones it made: after
/// another server took the path (here: the socket and key removed and a second server bound
/// there), dropping the first leaves the second's socket and key alone. A bind that fails
/// leaves no key and no temporary file.
#[test]
fn a_server_removes_only_its_own_files() {
    let dir = TempDir::new("serve-own");
    let sock = dir.join("s.sock");
    let key = spawnkit::serve::key_path_for(&sock);
    let a = Server::bind(Some(&sock), None, ServerOptions::default()).unwrap();
    std::fs::remove_file(&sock).unwrap();
    std::fs::remove_file(&key).unwrap();
    let b = Server::bind(Some(&sock), None, ServerOptions::default()).unwrap();
    drop(a);
    assert!(sock.exists() && key.exists(), "the first server removed the second's files");
    drop(b);
    assert!(!sock.exists() && !key.exists());
    let e = Server::bind(Some(&dir.join("nodir/s.sock")), Some(&key), ServerOptions::default())
        .err()
        .expect("refused");
    assert_eq!(e.step(), "bind", "{e}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A fd the caller names that is this client's own connection (the number was closed and
/// the connection took it) is refused, as a local spawn refuses a closed fd (EBADF): the
/// child never gets the connection.
#[test]
fn a_client_never_passes_its_own_connection() {
    let server = ThreadServer::start();
    let mut client = server.client();
    let conn = client.as_raw_fd();
    let mut cmd = Command::new("/bin/true");
    cmd.stdin(Stdio::Fd(conn));
    let e = client.spawn(&cmd).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
    let mut mapped = Command::new("/bin/true");
    mapped.fd(5, conn);
    assert_eq!(client.spawn(&mapped).unwrap_err().raw_os_error(), Some(libc::EBADF));
    // The connection is still in step.
    assert!(client.spawn(&Command::new("/bin/true")).unwrap().wait().unwrap().success());
}

/// The environment travels once per connection (an Env frame) and then by reference: every
/// change the caller makes between requests still reaches the next child, and a batch that
/// mixes inherited, cleared and given environments gives each child its own.
#[test]
fn the_connections_environment_follows_every_change() {
    if !common::alone("the_connections_environment_follows_every_change") {
        return;
    }
    let mut server = PrivateServer::start().expect("private server");
    let client = server.client();
    let env_of = |client: &mut Client, configure: &dyn Fn(&mut Command)| {
        probe_state_via(client, |cmd| configure(cmd)).env
    };
    let inherit = |_: &mut Command| {};
    let name = "SPAWNKIT_CONN_ENV_TEST";
    assert_eq!(env_of(client, &inherit).get(name), None);
    for value in ["one", "two", "two", "three"] {
        std::env::set_var(name, value);
        assert_eq!(env_of(client, &inherit).get(name).map(String::as_str), Some(value));
    }
    std::env::set_var("SPAWNKIT_CONN_ENV_NEW", "new");
    let env = env_of(client, &inherit);
    assert_eq!(env.get("SPAWNKIT_CONN_ENV_NEW").map(String::as_str), Some("new"));
    assert_eq!(env.get(name).map(String::as_str), Some("three"));
    std::env::remove_var(name);
    let env = env_of(client, &inherit);
    assert_eq!(env.get(name), None, "a removed variable is gone");
    assert_eq!(env.get("SPAWNKIT_CONN_ENV_NEW").map(String::as_str), Some("new"));
    // Changes of the command itself apply on top of the connection's environment.
    let env = env_of(client, &|c| {
        c.env("EXTRA", "1").env_remove("SPAWNKIT_CONN_ENV_NEW");
    });
    assert_eq!(env.get("EXTRA").map(String::as_str), Some("1"));
    assert_eq!(env.get("SPAWNKIT_CONN_ENV_NEW"), None);
    // A command's own base environment, alone and then again: the connection's from then
    // on, and an inherited one afterwards is this process's again.
    for _ in 0..2 {
        let env = env_of(client, &|c| {
            c.base_env([("ONLY", "base")]);
        });
        assert_eq!(env.get("ONLY").map(String::as_str), Some("base"));
        assert_eq!(env.get("PATH"), None, "nothing but the base: {env:?}");
    }
    let env = env_of(client, &inherit);
    assert_eq!(env.get("ONLY"), None);
    assert_eq!(env.get("SPAWNKIT_CONN_ENV_NEW").map(String::as_str), Some("new"));
    // One batch: inherited, cleared, given, inherited again, given the same as inherited.
    std::env::set_var(name, "batch");
    let ours: Vec<(String, String)> = std::env::vars().collect();
    let mut cmds: Vec<Command> = (0..5)
        .map(|_| {
            let mut c = Command::new(probe());
            c.arg("state").stdout(Stdio::Pipe);
            c
        })
        .collect();
    cmds[1].env_clear().env("X", "1");
    cmds[2].base_env([("B", "2")]);
    cmds[4].base_env(ours.iter().map(|(k, v)| (k, v)));
    let children = client.spawn_many(&cmds, 16).unwrap();
    let envs: Vec<_> = children
        .into_iter()
        .map(|c| {
            let out = c.unwrap().communicate(None, Some(Duration::from_secs(20))).unwrap();
            State::parse(&String::from_utf8_lossy(&out.stdout)).env
        })
        .collect();
    for i in [0, 3, 4] {
        assert_eq!(envs[i].get(name).map(String::as_str), Some("batch"), "child {i}");
        assert_eq!(envs[i].len(), ours.len(), "child {i}: {:?}", envs[i]);
    }
    assert_eq!(envs[1].iter().collect::<Vec<_>>(), [(&"X".to_string(), &"1".to_string())]);
    assert_eq!(envs[2].iter().collect::<Vec<_>>(), [(&"B".to_string(), &"2".to_string())]);
    // A batch whose first command has a base of its own: it is the connection's for that
    // call, and the inherited ones after it go with theirs inline.
    let mut cmds: Vec<Command> = (0..3)
        .map(|_| {
            let mut c = Command::new(probe());
            c.arg("state").stdout(Stdio::Pipe);
            c
        })
        .collect();
    cmds[0].base_env([("FIRST", "own")]);
    let envs: Vec<_> = client
        .spawn_many(&cmds, 16)
        .unwrap()
        .into_iter()
        .map(|c| {
            let out = c.unwrap().communicate(None, Some(Duration::from_secs(20))).unwrap();
            State::parse(&String::from_utf8_lossy(&out.stdout)).env
        })
        .collect();
    assert_eq!(envs[0].iter().collect::<Vec<_>>(), [(&"FIRST".to_string(), &"own".to_string())]);
    for env in &envs[1..] {
        assert_eq!(env.get(name).map(String::as_str), Some("batch"));
        assert_eq!(env.get("FIRST"), None);
    }
    std::env::remove_var(name);
    std::env::remove_var("SPAWNKIT_CONN_ENV_NEW");
    // A large environment: each entry of a batch that takes it counts it toward the frame's
    // budget, so 30 children of a 200 kB environment (6 MB) go in more than one frame.
    let big = "b".repeat(100_000);
    std::env::set_var("SPAWNKIT_CONN_ENV_BIG1", &big);
    std::env::set_var("SPAWNKIT_CONN_ENV_BIG2", &big);
    let mut sh = Command::new("/bin/sh");
    sh.args(["-c", "echo ${#SPAWNKIT_CONN_ENV_BIG1}.${#SPAWNKIT_CONN_ENV_BIG2}"]);
    sh.stdout(Stdio::Pipe);
    let many: Vec<&Command> = std::iter::repeat_n(&sh, 30).collect();
    for child in client.spawn_many(many, 64).unwrap() {
        let out = child.unwrap().communicate(None, Some(Duration::from_secs(20))).unwrap();
        assert_eq!(out.stdout, b"100000.100000\n");
    }
    std::env::remove_var("SPAWNKIT_CONN_ENV_BIG1");
    std::env::remove_var("SPAWNKIT_CONN_ENV_BIG2");
    // An environment the server will not hold (300,000 variables, 2.4 MB: ~24 MB decoded,
    // and no exec could take it): the error names it, and the connection is then closed.
    let mut huge = Command::new("/bin/true");
    huge.base_env((0..300_000).map(|i| (format!("V{i}"), String::new())));
    let err = client.spawn(&huge).unwrap_err();
    assert!(err.to_string().contains("environment over the protocol's limits"), "{err}");
    assert!(client.spawn(&Command::new("/bin/true")).is_err(), "the connection is closed");
}

/// `process::pidfd_open` and `process::pidfd_exit_status` (what a client of a server reads
/// for a child it did not reap): no status while the process is unreaped, its status once
/// its parent (here std's `Child`) has reaped it.
#[test]
fn pidfd_exit_status_after_the_parent_reaps() {
    if !spawnkit::serve::kernel_has_pidfd_exit_info() {
        return; // before Linux 6.15 the kernel records no exit status in the pidfd
    }
    let mut child = std::process::Command::new(probe()).args(["exit", "3"]).spawn().unwrap();
    let pidfd = spawnkit::process::pidfd_open(child.id() as i32).unwrap();
    let mut polled = spawnkit::process::poll_readable([pidfd.as_raw_fd()], 10_000).unwrap();
    assert_eq!(polled, [true], "the child exits");
    let fd = std::os::fd::AsFd::as_fd(&pidfd);
    assert_eq!(spawnkit::process::pidfd_exit_status(fd).unwrap(), None, "exited, not reaped");
    assert_eq!(child.wait().unwrap().code(), Some(3));
    polled = spawnkit::process::poll_readable([pidfd.as_raw_fd()], 0).unwrap();
    assert_eq!(polled, [true]);
    assert_eq!(spawnkit::process::pidfd_exit_status(fd).unwrap(), Some(ExitStatus::Exited(3)));
}

/// Status requests through a server that reaps its own children (a `Server` on a thread of
/// a bigger program, or a kernel before 6.15): the same answers as through one whose kernel
/// reaps them.
#[test]
fn status_requests_through_a_server_that_reaps() {
    let server = ThreadServer::start();
    let mut client = server.client();
    let mut exit7 = Command::new(probe());
    exit7.args(["exit", "7"]);
    assert_eq!(client.status(&exit7).unwrap(), ExitStatus::Exited(7));
    let mut killself = Command::new(probe());
    killself.args(["kill", "15"]);
    let missing = Command::new("/no/such/program");
    let all = client.status_many([&exit7, &killself, &missing, &exit7], 2).unwrap();
    assert_eq!(*all[0].as_ref().unwrap(), ExitStatus::Exited(7));
    assert_eq!(all[1].as_ref().unwrap().signal(), Some(libc::SIGTERM));
    assert_eq!(all[2].as_ref().unwrap_err().raw_os_error(), Some(libc::ENOENT));
    assert_eq!(*all[3].as_ref().unwrap(), ExitStatus::Exited(7));
}

/// A batch of status requests is answered in one message once its last child has ended:
/// the waiting client sleeps about once per batch, not once per child.
#[test]
fn a_status_batch_wakes_its_client_about_once() {
    if !common::alone("a_status_batch_wakes_its_client_about_once") {
        return;
    }
    let mut server = PrivateServer::start().unwrap();
    let client = server.client();
    let mut cmd = Command::new("/bin/true");
    cmd.stdout(Stdio::Null).stderr(Stdio::Null);
    assert!(client.status(&cmd).unwrap().success()); // warm up: threads and pool exist
    let sleeps = || voluntary_switches(std::path::Path::new("/proc/thread-self/status"));
    const BATCHES: u64 = 30;
    let before = sleeps();
    for _ in 0..BATCHES {
        client.submit_status_many(std::iter::repeat_n(&cmd, 16)).unwrap();
        for _ in 0..16 {
            assert!(client.receive_status().unwrap().1.unwrap().success());
        }
    }
    let slept = sleeps() - before;
    // Answered child by child, 16 children would cost up to 16 sleeps each batch.
    assert!(slept <= 2 * BATCHES, "{slept} sleeps for {BATCHES} batches of 16");
}

/// A thread waiting on the connection holds up no other thread. With Exit frames (a kernel
/// before 6.15), a child's `wait` reads its status from the connection; a status request
/// waits there for its child's end. Both used to wait in `poll` holding the connection's
/// lock, so another thread's spawn, or another child's wait, waited for that child to end.
#[test]
fn a_wait_on_the_connection_holds_up_no_other_thread() {
    let server = ThreadServer::start();
    let mut client = exit_frames_client(&server);
    let exit7 = probe_cmd(&["exit", "7"]);
    // A thread waits for a long child's Exit frame.
    let (long_pid, waiter) = sleeper_waited_on_a_thread(&mut client);
    // Meanwhile three threads spawn, one by one, and each waits for its own children.
    let client = std::sync::Arc::new(std::sync::Mutex::new(client));
    let (tx, rx) = std::sync::mpsc::channel();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (client, tx) = (client.clone(), tx.clone());
            std::thread::spawn(move || {
                let exit7 = probe_cmd(&["exit", "7"]);
                for _ in 0..20 {
                    let child = client.lock().unwrap().spawn(&exit7);
                    tx.send(child.and_then(|mut c| c.wait())).unwrap();
                }
            })
        })
        .collect();
    for _ in 0..60 {
        let status = rx.recv_timeout(Duration::from_secs(20)).expect("held up by another wait");
        assert_eq!(status.unwrap(), ExitStatus::Exited(7));
    }
    for w in workers {
        w.join().unwrap();
    }
    assert!(!waiter.is_finished(), "the long child's wait returned before it ended");
    // A status request waiting for its child's end (one that reads its stdin until EOF)
    // holds up no child's wait.
    let done = client.lock().unwrap().spawn(&exit7).unwrap();
    let (r, w) = std::io::pipe().unwrap();
    let mut cat = probe_cmd(&["cat"]);
    cat.stdin(Stdio::Owned(r.into())).stdout(Stdio::Null);
    let status_client = client.clone();
    let status = std::thread::spawn(move || status_client.lock().unwrap().status(&cat));
    std::thread::sleep(Duration::from_millis(100));
    let (tx, rx) = std::sync::mpsc::channel();
    let done_waiter = std::thread::spawn(move || {
        let mut done = done;
        tx.send(done.wait()).unwrap();
    });
    let s = rx.recv_timeout(Duration::from_secs(20)).expect("held up by a status request");
    assert_eq!(s.unwrap(), ExitStatus::Exited(7));
    done_waiter.join().unwrap();
    assert!(!status.is_finished(), "the status request returned before its child ended");
    drop(w); // its child reads EOF and ends
    assert!(status.join().unwrap().unwrap().success());
    // And the long child's wait gets its status when it ends.
    kill_waited(long_pid, waiter);
}

/// A process that traces `pids` (PTRACE_SEIZE) and holds them until its stdin ends, and
/// its first line: "seized", or "refused: errno N" where ptrace is not allowed.
fn seize(pids: &[u32]) -> (std::process::Child, String) {
    let mut tracer = std::process::Command::new("python3")
        .args([
            "-c",
            "import ctypes, sys\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             for pid in sys.argv[1:]:\n\
             \x20   if libc.ptrace(0x4206, int(pid), None, None) != 0:\n\
             \x20       print('refused: errno %d' % ctypes.get_errno(), flush=True)\n\
             \x20       sys.exit(0)\n\
             print('seized', flush=True)\n\
             sys.stdin.read()\n",
        ])
        .args(pids.iter().map(|p| p.to_string()))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(tracer.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    (tracer, line)
}

/// A server that reaps its own children (a server on a thread, as here; every server on a
/// kernel before 6.15) does not spin on a child it cannot reap yet: a child traced by
/// another process that has ended stays a zombie, its pidfd readable, until its tracer
/// lets it go; only then can the server reap it. Meanwhile the server looks at it again
/// from time to time, not in a loop, less often as it ages, and when the tracer is gone it is
/// reaped and its client learns how it ended.
#[test]
fn a_traced_zombie_does_not_spin_the_server() {
    // In a process of its own: the process's CPU time is the server's.
    if !common::alone("a_traced_zombie_does_not_spin_the_server") {
        return;
    }
    let server = ThreadServer::start();
    let mut client = server.client();
    let mut sleeper = Command::new(probe());
    sleeper.args(["sleep", "60"]);
    let mut child = client.spawn(&sleeper).unwrap();
    let pid = child.id();
    // Another process traces it (PTRACE_SEIZE), says so, and holds it until its stdin ends.
    let (mut tracer, line) = seize(&[pid]);
    if line.starts_with("refused") {
        // No ptrace here (Yama's ptrace_scope, a seccomp filter, a sandbox): nothing to test.
        eprintln!("skipped: PTRACE_SEIZE {}", line.trim());
        child.kill().unwrap();
        assert!(tracer.wait().unwrap().success());
        return;
    }
    assert_eq!(line.trim(), "seized");
    child.kill().unwrap();
    // Its pidfd turns readable (it has ended); it is a zombie the server cannot reap.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap().split(' ').nth(2)
        != Some("Z")
    {
        assert!(std::time::Instant::now() < deadline, "the child never became a zombie");
        std::thread::sleep(Duration::from_millis(5));
    }
    let cpu = || {
        // SAFETY: a zeroed rusage is valid (integers only).
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes one rusage struct.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) }, 0);
        let t = |v: libc::timeval| Duration::new(v.tv_sec as u64, v.tv_usec as u32 * 1000);
        t(u.ru_utime) + t(u.ru_stime)
    };
    let switches = || {
        // SAFETY: as in `cpu`.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes one rusage struct.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) }, 0);
        u.ru_nvcsw
    };
    let before = cpu();
    std::thread::sleep(Duration::from_millis(500));
    let used = cpu() - before;
    assert_eq!(child.try_wait().unwrap(), None, "reaped while traced");
    // Spinning, the server's thread would use about all of the 500 ms.
    assert!(used < Duration::from_millis(150), "the server used {used:?} of CPU in 500 ms");
    // And it looks less and less often (at least every 100 ms once it is old): the next
    // 500 ms take about ten sleeps of this process, not the 500 of a look a millisecond.
    let (before, n0) = (cpu(), switches());
    std::thread::sleep(Duration::from_millis(500));
    let (used, woke) = (cpu() - before, switches() - n0);
    assert!(woke < 100, "the server woke {woke} times in 500 ms (used {used:?} of CPU)");
    // The tracer goes: the server reaps the child, and the client learns how it ended.
    drop(tracer.stdin.take());
    assert!(tracer.wait().unwrap().success());
    let status = child.wait_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(status.and_then(|s| s.signal()), Some(libc::SIGKILL));
}

/// A server with a reaper (a private server) leaves a child traced by another process that
/// has ended a zombie until its tracer lets it go (its real parent cannot reap it before),
/// then reaps it at the SIGCHLD the kernel sends it then: a plain request's client learns
/// how it ended through its pidfd, and a status request is answered.
#[test]
fn a_server_with_a_reaper_reaps_a_traced_child_once_its_tracer_lets_go() {
    let mut server = PrivateServer::start().expect("private server");
    let server_pid = server.pid();
    let client = server.client();
    let mut plain = Command::new(probe());
    plain.args(["sleep", "61"]).stdout(Stdio::Null);
    let mut child = client.spawn(&plain).unwrap();
    let mut traced_status = Command::new(probe());
    traced_status.args(["sleep", "62"]).stdout(Stdio::Null);
    let id = client.submit_status_many([&traced_status]).unwrap()[0];
    // The status request's child, found by its arguments among the server's children.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status_pid = loop {
        let found = common::children_of(server_pid).into_iter().map(|(p, _)| p).find(|p| {
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            cmdline.ends_with(b"sleep\x0062\x00")
        });
        if let Some(p) = found {
            break p;
        }
        assert!(std::time::Instant::now() < deadline, "the status child never ran");
        std::thread::sleep(Duration::from_millis(5));
    };
    let pids = [child.id(), status_pid];
    // Another process traces both (PTRACE_SEIZE), says so, and holds them until its stdin
    // ends.
    let (mut tracer, line) = seize(&pids);
    for pid in pids {
        // SAFETY: kill takes integers; both are the server's children, not reaped yet.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    if line.starts_with("refused") {
        // No ptrace here (Yama's ptrace_scope, a seccomp filter, a sandbox): nothing to test.
        eprintln!("skipped: PTRACE_SEIZE {}", line.trim());
        assert!(tracer.wait().unwrap().success());
        return;
    }
    assert_eq!(line.trim(), "seized");
    let zombie = |pid: u32| common::proc_state(pid) == Some('Z');
    assert!(
        common::wait_until(Duration::from_secs(10), || pids.iter().all(|&p| zombie(p))),
        "both ended and wait, zombies"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(pids.iter().all(|&p| zombie(p)), "reaped while traced");
    assert_eq!(child.try_wait().unwrap(), None, "reaped while traced");
    // The tracer goes: the server reaps both.
    drop(tracer.stdin.take());
    assert!(tracer.wait().unwrap().success());
    let status = child.wait_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(status.and_then(|s| s.signal()), Some(libc::SIGKILL));
    let (answered, st) = client.receive_status().unwrap();
    assert_eq!((answered, st.unwrap().signal()), (id, Some(libc::SIGKILL)));
}

/// With Exit frames, `try_wait` reads everything that has come: a child's Exit frame queued
/// behind another request's answer (whose pidfd ends a `recvmsg`) is seen at once. (Found in
/// review: a single read took only the answer, and `try_wait` said "running".)
#[test]
fn try_wait_sees_an_exit_frame_behind_an_answer_with_fds() {
    let server = ThreadServer::start();
    let mut client = exit_frames_client(&server);
    let mut cat = probe_cmd(&["cat"]);
    cat.stdin(Stdio::Pipe).stdout(Stdio::Null);
    let mut a = client.spawn(&cat).unwrap();
    // Another request's answer (with a pidfd) comes first, and stays unread.
    let id = client.submit(&probe_cmd(&["sleep", "30"])).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(a.stdin.take()); // `a` reads EOF and ends: its Exit frame follows the answer
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{}/stat", a.id()))
        .map_or(true, |s| s.split(' ').nth(2) == Some("Z"))
    {
        assert!(std::time::Instant::now() < deadline, "the child never ended");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The server reaps it and sends its Exit frame: wait until the socket holds more than
    // the answer (a 16-byte header and the pid), unread.
    let sock = client.as_raw_fd();
    let unread = || {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int.
        assert_eq!(unsafe { libc::ioctl(sock, libc::FIONREAD, &mut n) }, 0);
        n
    };
    while unread() <= 20 {
        assert!(std::time::Instant::now() < deadline, "no Exit frame came");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(a.try_wait().unwrap(), Some(ExitStatus::Exited(0)));
    let mut b = client.receive_id(id).unwrap();
    b.kill().unwrap();
    assert_eq!(b.wait().unwrap().signal(), Some(libc::SIGKILL));
}

/// With Exit frames, a `wait_timeout` made while another thread waits on the connection
/// (for its own child) returns at its deadline, and the other wait goes on.
#[test]
fn a_wait_timeout_beside_another_threads_wait_returns_on_time() {
    let server = ThreadServer::start();
    let mut client = exit_frames_client(&server);
    let mut other = client.spawn(&probe_cmd(&["sleep", "60"])).unwrap();
    let (long_pid, waiter) = sleeper_waited_on_a_thread(&mut client);
    let start = std::time::Instant::now();
    assert_eq!(other.wait_timeout(Duration::from_millis(200)).unwrap(), None);
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(200), "returned early: {took:?}");
    assert!(took < Duration::from_secs(5), "held up: {took:?}");
    other.kill().unwrap();
    assert_eq!(other.wait().unwrap().signal(), Some(libc::SIGKILL));
    kill_waited(long_pid, waiter);
}

/// A server that reaps its own children (a server on a thread, as here; every server on a
/// kernel before 6.15) keeps each child's pidfd until the child ends. It holds at most half
/// its fd limit of them: a client that starts long-lived children and drops them is turned
/// away beyond that (EAGAIN, the reason naming the bound), rather than using up the fds the
/// server needs to take a connection, a request or a pidfd for anyone; once they end, the
/// whole bound is free again. A request that fails, or does not decode, holds nothing; of a
/// SpawnMany frame the server takes as many as there is room for.
#[test]
fn a_reaping_server_holds_at_most_half_its_fd_limit_of_children() {
    if !common::alone("a_reaping_server_holds_at_most_half_its_fd_limit_of_children") {
        return;
    }
    // Room for the server's pidfds (half), this process's own and a few in passing.
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    let soft = 2 * open + 64;
    common::set_fd_limit(soft);
    let held_max = (soft / 2) as usize;
    let server = ThreadServer::start();
    let mut client = server.client();
    let deadline = || std::time::Instant::now() + Duration::from_secs(20);
    let turned_away = |e: &spawnkit::Error| {
        e.raw_os_error() == Some(libc::EAGAIN)
            && e.step() == "serve"
            && e.to_string().contains("half its fd limit")
    };
    // Children that run until their stdin's other end closes; each dropped at once (the
    // client keeps no fd of it; the server keeps its pidfd). Started one by one until the
    // server turns one away (with `patient`, an EAGAIN is tried again until the deadline:
    // children of an earlier round may not all be reaped yet); how many.
    let fill = |client: &mut Client, stdin: &std::io::PipeReader, want: usize, patient: bool| {
        let mut cat = probe_cmd(&["cat"]);
        cat.stdin(Stdio::Fd(stdin.as_raw_fd())).stdout(Stdio::Null);
        let until = deadline();
        let mut started = 0;
        while started < want {
            match client.spawn(&cat) {
                Ok(child) => {
                    drop(child);
                    started += 1;
                }
                Err(e) if turned_away(&e) && patient && std::time::Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => {
                    assert!(turned_away(&e), "{e}");
                    break;
                }
            }
        }
        started
    };
    let (r, w) = std::io::pipe().unwrap();
    let started = fill(&mut client, &r, 2 * held_max, false);
    assert_eq!(started, held_max, "turned away after {started}, at most {held_max}");
    // Another connection is taken, and turned away alike while they run.
    let mut other = server.client();
    let e = other.spawn(&probe_cmd(&["exit", "0"])).expect_err("turned away");
    assert!(turned_away(&e), "{e}");
    // They end (EOF on their stdin), the server reaps them; meanwhile and after, a request
    // that fails is answered as it is (taken again when turned away) and holds nothing:
    // twice the bound of them.
    drop((r, w));
    let missing = Command::new("/no/such/program");
    for _ in 0..2 * held_max {
        let until = deadline();
        loop {
            let e = other.spawn(&missing).expect_err("no such program");
            if turned_away(&e) && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
            break;
        }
    }
    // The whole bound is free again: all but one taken, ...
    let (r, w) = std::io::pipe().unwrap();
    assert_eq!(fill(&mut client, &r, held_max - 1, true), held_max - 1);
    // ... a request that does not decode (it asks for the connection's environment, and
    // this connection sent none) took the last place and gave it back, ...
    let mut raw = authenticated(&server);
    let mut bare = Command::new("/bin/true");
    bare.stdin(Stdio::Null).stdout(Stdio::Null).stderr(Stdio::Null);
    let (body, fds) = bare.to_wire().unwrap();
    assert!(fds.is_empty());
    let h = frame::Header {
        len: body.len() as u32,
        kind: frame::Kind::Spawn,
        flags: frame::FLAG_CONN_ENV,
        nfds: 0,
        id: 9,
    };
    raw.write_all(&[&h.encode()[..], &body].concat()).unwrap();
    let mut answered = Vec::new();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.read_to_end(&mut answered).unwrap(); // an Error, then the close
    let rh = frame::Header::decode(answered[..frame::HEADER_LEN].try_into().unwrap()).unwrap();
    assert_eq!((rh.kind, rh.id), (frame::Kind::Error, 9));
    // ... so of a SpawnMany frame of three the first is taken and the others turned away.
    let mut cat = probe_cmd(&["cat"]);
    cat.stdin(Stdio::Fd(r.as_raw_fd())).stdout(Stdio::Null);
    let three = client.spawn_many([&cat, &cat, &cat], 3).unwrap();
    assert!(three[0].is_ok(), "{:?}", three[0].as_ref().err());
    for r in &three[1..] {
        let e = r.as_ref().expect_err("no room");
        assert!(turned_away(e), "{e}");
    }
    drop(three);
    let e = client.spawn(&probe_cmd(&["exit", "0"])).expect_err("turned away");
    assert!(turned_away(&e), "{e}");
    // And once they end, served again.
    drop((r, w));
    let mut exit7 = probe_cmd(&["exit", "7"]);
    exit7.stdout(Stdio::Null);
    let until = deadline();
    loop {
        match client.spawn(&exit7) {
            Ok(mut c) => break assert_eq!(c.wait().unwrap(), ExitStatus::Exited(7)),
            Err(e) if turned_away(&e) && std::time::Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    }
    // The requests turned away held nothing: the whole bound again, exactly.
    let (r, w) = std::io::pipe().unwrap();
    assert_eq!(fill(&mut client, &r, held_max, true), held_max);
    let e = client.spawn(&probe_cmd(&["exit", "0"])).expect_err("turned away");
    assert!(turned_away(&e), "{e}");
    drop((r, w));
}

/// Threads of this process that keep the CPUs busy until dropped (also when a failed
/// assertion unwinds: else they would spin on beside the rest of the suite).
struct Spinners(std::sync::Arc<std::sync::atomic::AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Spinners {
    fn start(n: usize) -> Spinners {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Spinners(stop, threads)
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        self.1.drain(..).for_each(|t| drop(t.join()));
    }
}

/// A fork-exec child that ends as soon as it has exec'd is handed out like any other by a
/// server that reaps every child of its process, however late the server runs again after
/// the fork: its pidfd comes with the fork (a raw `clone(CLONE_PIDFD)`), not from
/// `pidfd_open` after it, which found nothing once such a child had been reaped ("the child
/// ran and was reaped elsewhere": ~2 % of these spawns while other work kept the CPUs busy,
/// when the kernel reaped the server's children). Two spinning threads of this process keep
/// them busy here.
#[test]
fn a_fork_exec_child_that_ends_at_once_is_handed_out_by_a_server_that_reaps_all() {
    let failed = children_that_end_at_once_under_load(spawnkit::Strategy::ForkExec, 1);
    assert!(failed.is_empty(), "{} of 400 failed, the first: {}", failed.len(), failed[0]);
}

/// 400 spawns through a private server of a child that ends as soon as it has exec'd, by
/// `strategy`, `per_message` per message (1: `Client::spawn`), each waited for, beside two
/// spinning threads of this process: the spawns' errors.
fn children_that_end_at_once_under_load(
    strategy: spawnkit::Strategy,
    per_message: usize,
) -> Vec<String> {
    let mut server = PrivateServer::start().expect("private server");
    let spinners = Spinners::start(2);
    let mut cmd = Command::new(probe());
    cmd.args(["exit", "0"]).strategy(strategy).stdout(Stdio::Null);
    let client = server.client();
    let mut failed = Vec::new();
    for _ in 0..400 / per_message {
        let children = if per_message == 1 {
            vec![client.spawn(&cmd)]
        } else {
            client.spawn_many(std::iter::repeat_n(&cmd, per_message), per_message).expect("send")
        };
        for child in children {
            match child {
                Ok(mut child) => assert_eq!(child.wait().expect("wait"), ExitStatus::Exited(0)),
                Err(e) => failed.push(e.to_string()),
            }
        }
    }
    drop(spinners);
    failed
}

/// A posix-spawn child that ends at once is handed out like any other by a server with a
/// reaper, with other work keeping the CPUs busy: its pidfd (`pidfd_open` after
/// posix_spawn, by pid) is opened before the reaper may reap it, which waits meanwhile (the
/// spawn pins it). Before, ~6 % of these spawns failed with "the child ran and was reaped
/// elsewhere" (and with the kernel reaping, ~15 %).
#[test]
fn a_posix_spawn_child_that_ends_at_once_is_handed_out_by_a_server_with_a_reaper() {
    let failed = children_that_end_at_once_under_load(spawnkit::Strategy::PosixSpawn, 8);
    assert!(failed.is_empty(), "{} of 400 failed, the first: {}", failed.len(), failed[0]);
}

/// A status request's answer is its own child's status, never that of an earlier process
/// that had the same pid: children that fail before their exec (reaped by the server's
/// reaper, never registered by a spawn) go with status requests, until the pids have wrapped
/// around (`/proc/sys/kernel/pid_max` spawns, at most 40,000). A child reaped before its
/// spawn registered it must be told from one that had its pid before the spawn began.
#[test]
fn a_status_answer_is_never_that_of_an_earlier_process_with_the_pid() {
    let pid_max: usize = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    let total = pid_max.min(40_000);
    let mut server = PrivateServer::start().expect("private server");
    let mut fails = Command::new("/nonexistent/spawnkit-test-program");
    fails.stdout(Stdio::Null);
    let mut three = Command::new(probe());
    three.args(["exit", "3"]).stdout(Stdio::Null);
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let client = server.client();
        let batch: Vec<&Command> =
            (0..8).map(|i| if i % 2 == 0 { &fails } else { &three }).collect();
        for round in 0..total.div_ceil(batch.len()) {
            let ids = client.submit_status_many(batch.iter().copied()).expect("submit");
            let mut got = std::collections::HashMap::new();
            for _ in 0..batch.len() {
                let (id, st) = client.receive_status().expect("an answer");
                assert!(got.insert(id, st).is_none(), "round {round}: request {id} answered twice");
            }
            for (i, id) in ids.iter().enumerate() {
                match (i % 2, &got[id]) {
                    (0, Err(e)) => assert_eq!(e.step(), "execve", "round {round}: {e}"),
                    (1, Ok(st)) => assert_eq!(*st, ExitStatus::Exited(3), "round {round}"),
                    (_, other) => panic!("round {round}, request {i}: {other:?}"),
                }
            }
        }
        let _ = done_tx.send(server);
    });
    let server = done.recv_timeout(Duration::from_secs(300)).expect("every request answered");
    drop(server);
}

/// Status children that end as soon as they have exec'd, eight per message, while other
/// work keeps the CPUs busy: the server's reaper may reap one before the thread that spawned
/// it has registered its pid, or after. Either way each request is answered once, with its
/// own child's exit code, and no child is left a zombie.
#[test]
fn status_children_that_end_at_once_are_each_answered_with_their_own_code() {
    status_children_that_end_at_once(spawnkit::Strategy::CloneVfork);
}

/// As above, by fork-exec: its clone3 writes the spawn's pid slot as it makes the child, as
/// the clone-vfork strategy's does, so such a spawn does not hold off the reaper's other
/// reaps (it pinned the reaper before, and a child stopped before its exec held every
/// unregistered zombie of the server until it was killed).
#[test]
fn fork_exec_status_children_that_end_at_once_are_each_answered_with_their_own_code() {
    status_children_that_end_at_once(spawnkit::Strategy::ForkExec);
}

fn status_children_that_end_at_once(strategy: spawnkit::Strategy) {
    let mut server = PrivateServer::start().expect("private server");
    let spinners = Spinners::start(2);
    let cmds = common::exit_codes(8, strategy);
    let server_pid = server.pid();
    // On a thread, so that an answer never sent fails the test rather than hanging it.
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        common::status_rounds(server.client(), &cmds, 150, |_, _| {});
        let _ = done_tx.send(server);
    });
    let server = done.recv_timeout(Duration::from_secs(120)).expect("every request answered");
    drop(spinners);
    let zombies = || -> Vec<u32> {
        let server_children = common::children_of(server_pid);
        server_children.into_iter().filter(|&(_, st)| st == 'Z').map(|(p, _)| p).collect()
    };
    assert!(
        common::wait_until(Duration::from_secs(5), || zombies().is_empty()),
        "zombies left in the server: {:?}",
        zombies()
    );
    drop(server);
}

/// Status requests (bare spawns: no pidfd for the caller) and plain ones whose child has a
/// user namespace: the spawning thread writes its maps after checking, through a pidfd made
/// for that check when the caller wants none, that the child is still its own. Each child
/// sees its map.
#[test]
fn requests_with_a_user_namespace_are_served_with_their_maps() {
    let mut server = PrivateServer::start().expect("private server");
    // SAFETY: geteuid has no preconditions.
    let outside = unsafe { libc::geteuid() };
    let check =
        format!(r#"read -r a b c < /proc/self/uid_map && [ "$a $b $c" = "0 {outside} 1" ]"#);
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", &check]).user_map(spawnkit::UserMap::Root).stdout(Stdio::Null);
    let client = server.client();
    for _ in 0..10 {
        assert_eq!(client.status(&cmd).expect("a status request"), ExitStatus::Exited(0));
        let mut child = client.spawn(&cmd).expect("a plain request");
        assert_eq!(child.wait().expect("wait"), ExitStatus::Exited(0));
    }
}

/// A server's child whose status is read from its pidfd ends, for a waiter, when the pidfd
/// hangs up (the server's reap; its pidfd is readable from the exit on); one whose status
/// comes in an Exit frame (kernels before 6.15, where a pidfd may never hang up) is waited
/// for as a local child (`ends_at_hangup`, which the Python faces and event loops follow).
#[test]
fn a_server_childs_end_is_its_hangup_unless_its_status_comes_by_frame() {
    let mut cmd = Command::new(probe());
    cmd.args(["exit", "4"]).stdout(Stdio::Null);
    let mut local = cmd.spawn().expect("a local spawn");
    assert!(!local.ends_at_hangup());
    assert_eq!(local.wait().expect("wait"), ExitStatus::Exited(4));
    let mut private = PrivateServer::start().expect("private server");
    let mut child = private.client().spawn(&cmd).expect("spawn");
    assert!(child.ends_at_hangup());
    assert_eq!(child.wait().expect("wait"), ExitStatus::Exited(4));
    // Exit frames: from a server that does not reap by SIGCHLD (one on a thread).
    let server = ThreadServer::start();
    let mut child = exit_frames_client(&server).spawn(&cmd).expect("spawn");
    assert!(!child.ends_at_hangup());
    assert_eq!(child.wait().expect("wait"), ExitStatus::Exited(4));
}
