//! `spawnkit serve` as a real process, driven by `spawnkit run --via`, by `spawnkit::Client`,
//! and by hostile raw clients; its fds, children and RSS read from /proc/PID.

mod common;
#[path = "../../spawnkit/tests/parked/mod.rs"]
mod parked;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child as StdChild, Command as StdCommand, Stdio as StdStdio};
use std::time::{Duration, Instant};

use common::fixtures::{is_root, probe};
use common::{spawnkit_bin, spawnkit_cmd, Res};
use spawnkit::serve::{auth, frame, key_path_for, Key};
use spawnkit::{Client, Command, ExitStatus};

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("spawnkit-serve-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        TempDir(p)
    }
    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `spawnkit serve` process, killed (SIGKILL) on drop if still running.
struct Serve {
    proc: StdChild,
    socket: PathBuf,
    dir: TempDir,
}

impl Serve {
    fn start(extra: &[&str]) -> Serve {
        let dir = TempDir::new("srv");
        let socket = dir.join("s.sock");
        Serve::start_at(dir, socket, extra)
    }

    fn start_at(dir: TempDir, socket: PathBuf, extra: &[&str]) -> Serve {
        Serve::start_with(dir, socket, extra, |_| {})
    }

    /// With `configure` applied to the `spawnkit serve` command first.
    fn start_with(
        dir: TempDir,
        socket: PathBuf,
        extra: &[&str],
        configure: impl FnOnce(&mut StdCommand),
    ) -> Serve {
        let mut cmd = spawnkit_cmd(["serve", "--socket"]);
        configure(&mut cmd);
        let mut proc = cmd
            .arg(&socket)
            .args(extra)
            .env("SPAWNKIT_SERVER_ONLY", "1")
            .current_dir("/")
            .stdin(StdStdio::null())
            .stdout(StdStdio::piped())
            .stderr(StdStdio::inherit())
            .spawn()
            .expect("spawnkit serve");
        let mut line = String::new();
        BufReader::new(proc.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), socket.display().to_string(), "serve prints its socket");
        Serve { proc, socket, dir }
    }

    fn pid(&self) -> u32 {
        self.proc.id()
    }

    fn key(&self) -> Key {
        Key::read_file(&key_path_for(&self.socket)).unwrap()
    }

    fn client(&self) -> Client {
        Client::connect(&self.socket).expect("connect")
    }

    fn fd_count(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map(|d| d.count()).unwrap_or(0)
    }

    /// The server's children (running or zombie), of every thread of it, but for the
    /// children parked in its pool.
    fn children(&self) -> Vec<u32> {
        let pid = self.pid();
        parked::all_children(pid).into_iter().filter(|&c| !parked::is_parked(pid, c)).collect()
    }

    fn parked_children(&self) -> Vec<u32> {
        parked::parked(self.pid())
    }

    fn all_children(&self) -> Vec<u32> {
        parked::all_children(self.pid())
    }

    /// Wait (up to 10 s) until at least `n` children are parked in the server's pool.
    #[track_caller]
    fn wait_parked(&self, n: usize) -> Vec<u32> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let p = self.parked_children();
            if p.len() >= n {
                return p;
            }
            assert!(Instant::now() < deadline, "{} children parked, not {n}", p.len());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[track_caller]
    fn wait_pool_full(&self) -> Vec<u32> {
        parked::wait_pool_full(self.pid())
    }

    fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }

    /// The server's fd count once it is quiet: no children, and the count steady (a client
    /// that just closed is noticed by the server a moment later).
    fn quiet_fds(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = usize::MAX;
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let n = self.fd_count();
            if (self.children().is_empty() && n == last) || Instant::now() > deadline {
                return n;
            }
            last = n;
        }
    }

    /// Wait until the server has no children and `fds` fds (what reaping leaves).
    #[track_caller]
    fn settles_at(&self, fds: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.children().is_empty() && self.fd_count() == fds {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "server did not settle: children {:?}, fds {} (want {fds}): {:?}",
            self.children(),
            self.fd_count(),
            std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map(|d| d
                .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .collect::<Vec<_>>())
        );
    }

    #[track_caller]
    fn still_serves(&self) {
        let out = self.client().spawn(&Command::new("/bin/true")).unwrap().wait().unwrap();
        assert!(out.success());
        assert!(self.alive());
    }

    fn alive(&self) -> bool {
        std::path::Path::new(&format!("/proc/{}/fd", self.pid())).exists()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.proc.kill();
        let _ = self.proc.wait();
    }
}

fn via(s: &Serve, args: &[&str]) -> Res {
    let mut cmd = spawnkit_cmd(["run", "--via"]);
    cmd.arg(&s.socket).arg("--").args(args);
    Res::of(&mut cmd)
}

fn parse_state(out: &str) -> BTreeMap<String, String> {
    out.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect()
}

#[test]
fn run_via_spawns_with_the_clients_cwd_and_env_under_the_server() {
    let s = Serve::start(&[]);
    let probe = probe();
    let probe = probe.to_str().unwrap();
    let dir = TempDir::new("cwd");
    let out = spawnkit_cmd(["run", "--via"])
        .arg(&s.socket)
        .args(["--", probe, "state"])
        .current_dir(&dir.0)
        .env("SPAWNKIT_CLIENT_ONLY", "yes")
        .stdin(StdStdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let st = parse_state(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(st["ppid"], s.pid().to_string(), "the parent is the server");
    assert_eq!(st["cwd"], dir.0.display().to_string(), "the client's cwd");
    assert_eq!(st.get("env.SPAWNKIT_CLIENT_ONLY").map(String::as_str), Some("yes"));
    assert!(!st.contains_key("env.SPAWNKIT_SERVER_ONLY"), "the server's environment leaked");
    // --cwd and statuses.
    via(&s, &["/bin/sh", "-c", "exit 7"]).code(7);
    via(&s, &[probe, "kill", "9"]).code(128 + 9);
    let r = via(&s, &["/no/such/prog"]);
    r.code(127).stderr_has("/no/such/prog");
    via(&s, &["/bin/true"]).code(0);
    // Failures print what a local run prints, with its exit code.
    for args in [
        &["--cwd", "/nonexistent", "--", "/bin/true"][..],
        &["--", "/etc/passwd"],
        &["--", "no-such-prog-x"],
    ] {
        let local = Res::of(spawnkit_cmd(["run"]).args(args));
        let remote = Res::of(spawnkit_cmd(["run", "--via"]).arg(&s.socket).args(args));
        assert_eq!((remote.code, &remote.stderr), (local.code, &local.stderr), "{args:?}");
    }
    // SPAWNKIT_SERVER and --key-file.
    let r = Res::of(
        spawnkit_cmd(["run", "--", "/bin/sh", "-c", "echo $PPID"])
            .env("SPAWNKIT_SERVER", &s.socket),
    );
    assert_eq!(r.stdout.trim(), s.pid().to_string(), "{r:?}");
    let other_key = s.dir.join("copy.key");
    std::fs::copy(key_path_for(&s.socket), &other_key).unwrap();
    let r = Res::of(
        spawnkit_cmd(["run", "--via"]).arg(&s.socket).arg("--key-file").arg(&other_key).args([
            "--",
            "/bin/echo",
            "keyed",
        ]),
    );
    assert_eq!(r.stdout, "keyed\n", "{r:?}");
    Key::generate().unwrap().write_file(&other_key).unwrap();
    let r = Res::of(
        spawnkit_cmd(["run", "--via"]).arg(&s.socket).arg("--key-file").arg(&other_key).args([
            "--",
            "/bin/echo",
            "keyed",
        ]),
    );
    r.code(125).stderr_has("refused the key");
}

#[test]
fn run_via_forwards_signals() {
    let s = Serve::start(&[]);
    let base = s.quiet_fds();
    let probe = probe();
    let mut run = spawnkit_cmd(["run", "--via"])
        .arg(&s.socket)
        .arg("--")
        .arg(&probe)
        .args(["sleep", "30"])
        .stdin(StdStdio::null())
        .spawn()
        .unwrap();
    // Wait for the probe to be the server's child, then TERM the client.
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.children().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(s.children().len(), 1);
    unsafe_free_kill(run.id(), libc::SIGTERM);
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");
    s.settles_at(base); // the child's pidfd closes once it is reaped, the connection with run
}

fn unsafe_free_kill(pid: u32, sig: i32) {
    let ok = StdCommand::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().unwrap();
    assert!(ok.success());
}

// ------------------------------------------------------------------------------------------
// Hostile clients.
// ------------------------------------------------------------------------------------------

fn header(kind: frame::Kind, len: u32, nfds: u8, id: u64) -> [u8; 16] {
    frame::Header { len, kind, flags: 0, nfds, id }.encode()
}

/// Connect and read the challenge.
fn connect(s: &Serve) -> (UnixStream, [u8; 32]) {
    let mut c = UnixStream::connect(&s.socket).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 48];
    c.read_exact(&mut b).unwrap();
    (c, b[16..].try_into().unwrap())
}

/// Connect and authenticate with the right key.
fn authenticated(s: &Serve) -> UnixStream {
    let (mut c, ns) = connect(s);
    let (answer, _) = auth::client_answer(&s.key(), &ns).unwrap();
    c.write_all(&header(frame::Kind::Answer, 64, 0, 0)).unwrap();
    c.write_all(&answer).unwrap();
    let mut w = [0u8; 48];
    c.read_exact(&mut w).unwrap();
    assert_eq!(w[5], frame::Kind::Welcome as u8);
    c
}

/// The server closed the connection (after at most one reply frame).
#[track_caller]
fn closed(c: &mut UnixStream) {
    let mut rest = Vec::new();
    match c.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.len() < 4096, "server kept talking: {} bytes", rest.len()),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET), "{e}"),
    }
}

/// One sendmsg(2) of `bytes` with `fds` as SCM_RIGHTS and `flags` (MSG_NOSIGNAL added):
/// the bytes sent, or the error.
fn sendmsg_fds(
    sock: &UnixStream,
    bytes: &[u8],
    fds: &[RawFd],
    flags: i32,
) -> std::io::Result<usize> {
    let mut cmsg = [0u64; 64];
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut _, iov_len: bytes.len() };
    // SAFETY: a zeroed msghdr is valid; its pointers are set to live locals below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    // SAFETY: CMSG_* compute offsets inside `cmsg` (512 bytes, enough for these few fds).
    unsafe {
        let space = libc::CMSG_SPACE((fds.len() * 4) as u32) as usize;
        msg.msg_control = cmsg.as_mut_ptr().cast();
        msg.msg_controllen = space;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN((fds.len() * 4) as u32) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), fds.len() * 4);
    }
    // SAFETY: `msg` points at live buffers.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, flags | libc::MSG_NOSIGNAL) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// sendmsg with `fds` as SCM_RIGHTS, all of `bytes` at once.
fn send_fds(sock: &UnixStream, bytes: &[u8], fds: &[RawFd]) {
    assert_eq!(sendmsg_fds(sock, bytes, fds, 0).unwrap(), bytes.len());
}

/// A request for `touch MARKER` in wire form, with its three stdio fds.
fn touch_request(marker: &Path, id: u64, nfds_declared: Option<u8>) -> (Vec<u8>, Vec<RawFd>) {
    let mut cmd = Command::new("/usr/bin/touch");
    cmd.arg(marker).current_dir("/").env_clear();
    cmd.stdin(spawnkit::Stdio::Fd(0)).stdout(spawnkit::Stdio::Fd(1)).stderr(spawnkit::Stdio::Fd(2));
    let (body, fds) = cmd.to_wire().unwrap();
    let n = nfds_declared.unwrap_or(fds.len() as u8);
    let mut bytes = header(frame::Kind::Spawn, body.len() as u32, n, id).to_vec();
    bytes.extend_from_slice(&body);
    (bytes, fds)
}

/// Whether `path` exists within 5 s (a child's work seen from outside).
fn appears(path: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !path.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    path.exists()
}

/// An environment's wire form (the body of an Env frame): the format version, then
/// postcard's sequence of (name, value) byte strings (lengths under 128: one-byte varints).
fn env_body(vars: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Command::WIRE_VERSION.to_le_bytes().to_vec();
    b.push(vars.len() as u8);
    for (k, v) in vars {
        for part in [k, v] {
            b.push(part.len() as u8);
            b.extend_from_slice(part.as_bytes());
        }
    }
    b
}

/// `env_body` for values of any length (two-byte varints up to 16 KiB, three beyond).
fn env_body_long(vars: &[(&str, &str)]) -> Vec<u8> {
    let varint = |b: &mut Vec<u8>, mut n: usize| loop {
        if n < 0x80 {
            b.push(n as u8);
            break;
        }
        b.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    };
    let mut b = Command::WIRE_VERSION.to_le_bytes().to_vec();
    varint(&mut b, vars.len());
    for (k, v) in vars {
        for part in [k, v] {
            varint(&mut b, part.len());
            b.extend_from_slice(part.as_bytes());
        }
    }
    b
}

/// A Spawn frame flagged FLAG_CONN_ENV for `touch MARKER`, a command with no environment of
/// its own (it starts from the connection's), with its three stdio fds.
fn touch_inheriting(marker: &Path, id: u64) -> (Vec<u8>, Vec<RawFd>) {
    let mut cmd = Command::new("/usr/bin/touch");
    cmd.arg(marker).current_dir("/");
    cmd.stdin(spawnkit::Stdio::Fd(0)).stdout(spawnkit::Stdio::Fd(1)).stderr(spawnkit::Stdio::Fd(2));
    let (body, fds) = cmd.to_wire().unwrap();
    let mut bytes = header(frame::Kind::Spawn, body.len() as u32, fds.len() as u8, id).to_vec();
    bytes[6] = frame::FLAG_CONN_ENV;
    bytes.extend_from_slice(&body);
    (bytes, fds)
}

#[test]
fn hostile_clients_are_cut_off_and_leave_nothing_behind() {
    let s = Serve::start(&[]);
    s.still_serves();
    let base = s.quiet_fds();
    let dir = TempDir::new("hostile");
    let marker = dir.join("spawned");
    let check = |what: &str| {
        s.settles_at(base);
        assert!(!marker.exists(), "{what}: something was spawned");
        s.still_serves();
        s.settles_at(base);
    };

    // No key: connects, hears the challenge, says nothing, leaves.
    let (c, _) = connect(&s);
    drop(c);
    check("no key");
    // Wrong key.
    let (mut c, ns) = connect(&s);
    let (answer, _) = auth::client_answer(&Key::generate().unwrap(), &ns).unwrap();
    c.write_all(&header(frame::Kind::Answer, 64, 0, 0)).unwrap();
    c.write_all(&answer).unwrap();
    closed(&mut c);
    check("wrong key");
    // Truncated handshake: half an answer, then EOF.
    let (mut c, _) = connect(&s);
    c.write_all(&header(frame::Kind::Answer, 64, 0, 0)).unwrap();
    c.write_all(&[0; 10]).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    closed(&mut c);
    check("truncated answer");
    // Oversized: a length over the limit, refused before any body.
    let (mut c, _) = connect(&s);
    c.write_all(&header(frame::Kind::Answer, 0xFFFF_FFF0, 0, 0)).unwrap();
    closed(&mut c);
    check("oversized answer");
    let mut c = authenticated(&s);
    c.write_all(&header(frame::Kind::Spawn, frame::MAX_BODY as u32 + 1, 0, 1)).unwrap();
    closed(&mut c);
    check("oversized request");
    // Malformed: another version, an unknown kind, a request before authenticating.
    for bad in [
        {
            let mut h = header(frame::Kind::Answer, 64, 0, 0);
            h[4] = 9;
            h
        },
        {
            let mut h = header(frame::Kind::Answer, 64, 0, 0);
            h[5] = 200;
            h
        },
        header(frame::Kind::Wake, 0, 0, 0), // before the handshake
    ] {
        let (mut c, _) = connect(&s);
        c.write_all(&bad).unwrap();
        closed(&mut c);
        check("malformed header");
    }
    let (mut c, _) = connect(&s);
    let (req, fds) = touch_request(&marker, 1, None);
    send_fds(&c, &req, &fds);
    closed(&mut c);
    check("request before the handshake (with fds)");
    // Malformed request body: an error reply, then the connection closes.
    let mut c = authenticated(&s);
    // The format version this build reads, then bytes that do not decode.
    let junk = [&Command::WIRE_VERSION.to_le_bytes()[..], b"\xff\xff\xff\xff\xff\xff\xff\xff\xff"]
        .concat();
    c.write_all(&header(frame::Kind::Spawn, junk.len() as u32, 0, 5)).unwrap();
    c.write_all(&junk).unwrap();
    closed(&mut c);
    check("malformed command");
    // Truncated request: half a body, then EOF.
    let mut c = authenticated(&s);
    let (req, fds) = touch_request(&marker, 2, None);
    send_fds(&c, &req[..req.len() / 2], &fds);
    c.shutdown(std::net::Shutdown::Write).unwrap();
    closed(&mut c);
    check("truncated request");
    // Fd flooding: more fds than the request declares.
    let mut c = authenticated(&s);
    let (req, mut fds) = touch_request(&marker, 3, None);
    fds.extend([0, 1, 2, 0, 1]);
    send_fds(&c, &req, &fds);
    closed(&mut c);
    check("fd flood");
    // Fewer fds than declared.
    let mut c = authenticated(&s);
    let (req, fds) = touch_request(&marker, 4, Some(5));
    send_fds(&c, &req, &fds);
    closed(&mut c);
    check("fds missing");
    // Fds alone with a partial header, then the rest never comes.
    let mut c = authenticated(&s);
    send_fds(&c, &[16], &[0, 1, 2]);
    c.shutdown(std::net::Shutdown::Write).unwrap();
    closed(&mut c);
    check("fds with a stub");
    // SpawnMany: an entry cut short, an entry that declares more fds than were passed, fds
    // no entry declares, and one good entry beside a bad one: each closes the connection
    // with nothing spawned (a frame is spawned whole or not at all).
    let many = |entries: &[(Vec<u8>, u8)], nfds: u8, id: u64| {
        let mut body = Vec::new();
        for (b, n) in entries {
            body.extend_from_slice(&(b.len() as u32).to_le_bytes());
            body.push(*n);
            body.extend_from_slice(b);
        }
        let mut bytes = header(frame::Kind::SpawnMany, body.len() as u32, nfds, id).to_vec();
        bytes.extend_from_slice(&body);
        bytes
    };
    // The same, with fds named by index among the frame's (FLAG_FD_INDEX).
    let many_indexed = |entries: &[(Vec<u8>, Vec<u8>)], nfds: u8, id: u64| {
        let mut body = Vec::new();
        for (b, indices) in entries {
            body.extend_from_slice(&(b.len() as u32).to_le_bytes());
            body.push(indices.len() as u8);
            body.extend_from_slice(indices);
            body.extend_from_slice(b);
        }
        let mut bytes = header(frame::Kind::SpawnMany, body.len() as u32, nfds, id).to_vec();
        bytes[6] = frame::FLAG_FD_INDEX;
        bytes.extend_from_slice(&body);
        bytes
    };
    let (good, good_fds) = touch_request(&marker, 0, None);
    let good_body = good[16..].to_vec();
    let n = good_fds.len() as u8;
    let junk = [&Command::WIRE_VERSION.to_le_bytes()[..], b"\xff\xff\xff\xff"].concat();
    let cases: Vec<(&str, Vec<u8>, Vec<RawFd>)> = vec![
        (
            "many: an entry cut short",
            {
                let mut b = many(&[(good_body.clone(), n)], n, 20);
                let len = b.len();
                b.truncate(len - 7);
                let body_len = (len - 7 - 16) as u32;
                b[..4].copy_from_slice(&body_len.to_le_bytes());
                b
            },
            good_fds.clone(),
        ),
        (
            "many: fds declared by an entry, not passed",
            many(&[(good_body.clone(), n + 2)], n, 21),
            good_fds.clone(),
        ),
        (
            "many: fds no entry declares",
            {
                let mut fds_b = many(&[(good_body.clone(), 0)], n, 22);
                fds_b[7] = n;
                fds_b
            },
            good_fds.clone(),
        ),
        (
            "many: a good entry beside a malformed one",
            many(&[(good_body.clone(), n), (junk, 0)], n, 23),
            good_fds.clone(),
        ),
        ("many: no entry at all", many(&[], 0, 24), vec![]),
        (
            "many: a repeat with no entry before it (then a good entry)",
            {
                let mut b = many(&[], 0, 25);
                b.extend_from_slice(&frame::REPEAT_ENTRY.to_le_bytes());
                b.push(n);
                b.extend_from_slice(&(good_body.len() as u32).to_le_bytes());
                b.push(n);
                b.extend_from_slice(&good_body);
                let body_len = (b.len() - 16) as u32;
                b[..4].copy_from_slice(&body_len.to_le_bytes());
                b[7] = 2 * n;
                b
            },
            good_fds.iter().chain(&good_fds).copied().collect(),
        ),
        (
            "many: repeats that add up to more than a frame may carry",
            {
                // 64 entries of a 70 kB command: 4.5 MB to decode from a 70 kB frame.
                let mut cmd = Command::new("/usr/bin/touch");
                cmd.arg(&marker).arg("x".repeat(70_000)).current_dir("/").env_clear();
                let (body, _) = cmd.to_wire().unwrap();
                let mut b = many(&[(body, 0)], 0, 26);
                for _ in 0..63 {
                    b.extend_from_slice(&frame::REPEAT_ENTRY.to_le_bytes());
                    b.push(0);
                }
                let body_len = (b.len() - 16) as u32;
                b[..4].copy_from_slice(&body_len.to_le_bytes());
                b
            },
            vec![],
        ),
    ];
    // Env frames (the connection's environment): with fds, malformed, with bytes after the
    // environment; and a request flagged to use the connection's environment before any.
    let env_frame = |body: &[u8]| {
        let mut b = header(frame::Kind::Env, body.len() as u32, 0, 0).to_vec();
        b.extend_from_slice(body);
        b
    };
    let good_env = env_body(&[("A", "from-env"), ("PATH", "/usr/bin:/bin")]);
    let (flagged, flagged_fds) = touch_inheriting(&marker, 27);
    let cases: Vec<(&str, Vec<u8>, Vec<RawFd>)> = cases
        .into_iter()
        .chain([
            ("env: fds beside an Env frame", env_frame(&good_env), vec![0, 1]),
            (
                "env: fds declared by an Env frame",
                {
                    let mut b = env_frame(&good_env);
                    b[7] = 2;
                    b
                },
                vec![0, 1],
            ),
            (
                "env: malformed",
                env_frame(
                    &[
                        &Command::WIRE_VERSION.to_le_bytes()[..],
                        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff",
                    ]
                    .concat(),
                ),
                vec![],
            ),
            ("env: another format version", env_frame(&[9, 0, 0]), vec![]),
            (
                "env: bytes after the environment",
                env_frame(&[good_env.as_slice(), b"x"].concat()),
                vec![],
            ),
            (
                "env: 200,000 empty pairs (a 400 kB frame, 9.6 MB once decoded)",
                env_frame(&{
                    let mut b = Command::WIRE_VERSION.to_le_bytes().to_vec();
                    b.extend_from_slice(&[0xc0, 0x9a, 0x0c]); // varint 200,000
                    b.resize(b.len() + 400_000, 0);
                    b
                }),
                vec![],
            ),
            (
                "wake: with a body",
                {
                    let mut b = header(frame::Kind::Wake, 4, 0, 0).to_vec();
                    b.extend_from_slice(b"wake");
                    b
                },
                vec![],
            ),
            ("wake: with fds", header(frame::Kind::Wake, 0, 2, 0).to_vec(), vec![0, 1]),
            (
                "wake: with flags",
                {
                    let mut b = header(frame::Kind::Wake, 0, 0, 0);
                    b[6] = 1;
                    b.to_vec()
                },
                vec![],
            ),
            ("wake: with an id", header(frame::Kind::Wake, 0, 0, 7).to_vec(), vec![]),
            (
                "many, fds by index: an index beyond the frame's fds",
                many_indexed(&[(good_body.clone(), (1..=n).collect())], n, 29),
                good_fds.clone(),
            ),
            (
                "many, fds by index: a fd of the frame that no entry names",
                many_indexed(&[(good_body.clone(), (0..n).collect())], n + 1, 30),
                good_fds.iter().chain(&[0]).copied().collect(),
            ),
            (
                "many, fds by index: indices cut short",
                {
                    let mut b = many_indexed(&[(vec![], (0..n).collect())], n, 31);
                    b.truncate(b.len() - 1);
                    let body_len = (b.len() - 16) as u32;
                    b[..4].copy_from_slice(&body_len.to_le_bytes());
                    b
                },
                good_fds.clone(),
            ),
            (
                "many, fds by index: a good entry, then one naming the fds twice over",
                many_indexed(
                    &[
                        (good_body.clone(), (0..n).collect()),
                        (good_body.clone(), (0..n).chain(0..n).collect()),
                    ],
                    n,
                    32,
                ),
                good_fds.clone(),
            ),
            ("env: a flagged request with no Env before it", flagged.clone(), flagged_fds.clone()),
            (
                "env: a flagged SpawnMany with no Env before it",
                {
                    let body = &flagged[16..];
                    let n = flagged_fds.len() as u8;
                    let mut b = many(&[(body.to_vec(), n)], n, 28);
                    b[6] = frame::FLAG_CONN_ENV;
                    b
                },
                flagged_fds.clone(),
            ),
        ])
        .collect();
    for (what, bytes, fds) in cases {
        let mut c = authenticated(&s);
        send_fds(&c, &bytes, &fds);
        closed(&mut c);
        check(what);
    }
    // The connection's environment counts toward a SpawnMany's budget once per entry that
    // takes it, as if each carried it: 64 entries taking 100 kB are 6.4 MB asked of a 1 kB
    // frame (refused, nothing spawned); 30 are 3 MB (spawned).
    let big = "x".repeat(100_000);
    let taking = |entries: usize, id: u64| {
        let mut cmd = Command::new("/usr/bin/touch");
        cmd.arg(&marker).current_dir("/");
        cmd.stdin(spawnkit::Stdio::Null).stdout(spawnkit::Stdio::Null);
        cmd.stderr(spawnkit::Stdio::Null);
        let (body, fds) = cmd.to_wire().unwrap();
        assert!(fds.is_empty());
        let mut m = many(&[(body, 0)], 0, id);
        for _ in 1..entries {
            m.extend_from_slice(&frame::REPEAT_ENTRY.to_le_bytes());
            m.push(0);
        }
        let body_len = (m.len() - 16) as u32;
        m[..4].copy_from_slice(&body_len.to_le_bytes());
        m[6] = frame::FLAG_CONN_ENV;
        m
    };
    let mut c = authenticated(&s);
    send_fds(&c, &env_frame(&env_body_long(&[("BIG", &big)])), &[]);
    send_fds(&c, &taking(64, 60), &[]);
    closed(&mut c);
    check("env: 64 entries taking a 100 kB environment");
    let mut c = authenticated(&s);
    send_fds(&c, &env_frame(&env_body_long(&[("BIG", &big)])), &[]);
    send_fds(&c, &taking(30, 70), &[]);
    for _ in 0..30 {
        let mut reply = [0u8; 20];
        c.read_exact(&mut reply).unwrap();
        assert_eq!(reply[5], frame::Kind::Spawned as u8, "30 entries taking 100 kB: 3 MB");
    }
    drop(c);
    assert!(appears(&marker), "the 30 entries ran");
    std::fs::remove_file(&marker).unwrap();
    s.settles_at(base);
    // A well-formed SpawnMany of two: both spawn; the answers come as Spawned frames or one
    // SpawnedMany (this raw client did not ask for batched answers: two Spawned).
    let marker2 = dir.join("spawned-2");
    let (second, second_fds) = touch_request(&marker2, 0, None);
    let mut c = authenticated(&s);
    let mut fds = good_fds.clone();
    fds.extend_from_slice(&second_fds);
    let bytes = many(&[(good_body.clone(), n), (second[16..].to_vec(), n)], 2 * n, 30);
    send_fds(&c, &bytes, &fds);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let mut reply = [0u8; 20];
        c.read_exact(&mut reply).unwrap();
        assert_eq!(reply[5], frame::Kind::Spawned as u8, "unbatched answers to a raw client");
        ids.push(u64::from_le_bytes(reply[8..16].try_into().unwrap()));
    }
    ids.sort_unstable();
    assert_eq!(ids, [30, 31], "ids follow the frame's, one per entry");
    // A repeat entry spawns the entry before it again, with fds of its own: a command that
    // writes to its stdout, then two repeats, each entry with a pipe of its own as stdout:
    // three children, one line in each pipe.
    let pipes: Vec<(std::fs::File, std::fs::File)> = (0..3)
        .map(|_| {
            let (r, w) = std::io::pipe().unwrap();
            (
                std::fs::File::from(std::os::fd::OwnedFd::from(r)),
                std::fs::File::from(std::os::fd::OwnedFd::from(w)),
            )
        })
        .collect();
    let mut echo = Command::new("/bin/sh");
    echo.args(["-c", "echo x"]).current_dir("/").env_clear();
    echo.stdin(spawnkit::Stdio::Fd(0)).stderr(spawnkit::Stdio::Fd(2));
    echo.stdout(spawnkit::Stdio::Fd(pipes[0].1.as_raw_fd()));
    let (echo_body, echo_fds) = echo.to_wire().unwrap();
    let at = echo_fds.iter().position(|&fd| fd == pipes[0].1.as_raw_fd()).unwrap();
    let k = echo_fds.len() as u8;
    let mut bytes = many(&[(echo_body, k)], 3 * k, 40);
    let mut fds = echo_fds.clone();
    for p in &pipes[1..] {
        bytes.extend_from_slice(&frame::REPEAT_ENTRY.to_le_bytes());
        bytes.push(k);
        let mut own = echo_fds.clone();
        own[at] = p.1.as_raw_fd();
        fds.extend(own);
    }
    let body_len = (bytes.len() - 16) as u32;
    bytes[..4].copy_from_slice(&body_len.to_le_bytes());
    send_fds(&c, &bytes, &fds);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let mut reply = [0u8; 20];
        c.read_exact(&mut reply).unwrap();
        assert_eq!(reply[5], frame::Kind::Spawned as u8, "a repeat is spawned as its own");
        ids.push(u64::from_le_bytes(reply[8..16].try_into().unwrap()));
    }
    ids.sort_unstable();
    assert_eq!(ids, [40, 41, 42], "one answer per entry, repeats included");
    for (i, (r, w)) in pipes.into_iter().enumerate() {
        drop(w);
        let mut out = String::new();
        let mut r = r;
        r.read_to_string(&mut out).unwrap();
        assert_eq!(out, "x\n", "entry {i}'s stdout: its own pipe, one child");
    }
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(marker.exists() && marker2.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(marker.exists() && marker2.exists(), "both entries spawned");
    std::fs::remove_file(&marker).unwrap();
    s.settles_at(base);
    // The well-formed request does spawn (the marker proves the checks above meant it).
    let mut c = authenticated(&s);
    let (req, fds) = touch_request(&marker, 9, None);
    send_fds(&c, &req, &fds);
    let mut reply = [0u8; 20];
    c.read_exact(&mut reply).unwrap();
    assert_eq!(reply[5], frame::Kind::Spawned as u8);
    drop(c);
    assert!(appears(&marker));
    std::fs::remove_file(&marker).unwrap();
    s.settles_at(base);
    // Wake frames (a request follows): no answer of their own; the request after them is
    // answered as ever, and so is one after a Wake that nothing followed for a while.
    let mut c = authenticated(&s);
    send_fds(&c, &header(frame::Kind::Wake, 0, 0, 0), &[]);
    std::thread::sleep(Duration::from_millis(5));
    send_fds(&c, &header(frame::Kind::Wake, 0, 0, 0), &[]);
    let (req, fds) = touch_request(&marker, 45, None);
    send_fds(&c, &req, &fds);
    let mut reply = [0u8; 20];
    c.read_exact(&mut reply).unwrap();
    assert_eq!(reply[5], frame::Kind::Spawned as u8, "the request after Wake frames");
    assert_eq!(u64::from_le_bytes(reply[8..16].try_into().unwrap()), 45, "no answer to a Wake");
    // A Wake that nothing follows keeps the server polling for 100 us, not for good: its
    // threads' CPU over the next 300 ms stays far below 300 ms.
    let cpu_ns = || -> u64 {
        let dir = format!("/proc/{}/task", s.proc.id());
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
            .filter_map(|l| l.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()))
            .sum()
    };
    let before = cpu_ns();
    assert!(before > 0, "the server's CPU time is readable");
    send_fds(&c, &header(frame::Kind::Wake, 0, 0, 0), &[]);
    std::thread::sleep(Duration::from_millis(300));
    let spent = cpu_ns() - before;
    assert!(spent < 50_000_000, "the server spent {spent} ns after a lone Wake");
    // Nor does a stream of them keep it polling: a Wake every 80 us for 300 ms, which would
    // keep a window open all along, costs it at most its budget (a fifth of a CPU) and the
    // frames' own handling.
    let before = cpu_ns();
    let end = Instant::now() + Duration::from_millis(300);
    let mut next = Instant::now();
    while Instant::now() < end {
        if Instant::now() >= next {
            send_fds(&c, &header(frame::Kind::Wake, 0, 0, 0), &[]);
            next += Duration::from_micros(80);
        }
        std::hint::spin_loop();
    }
    let spent = cpu_ns() - before;
    assert!(spent < 150_000_000, "the server spent {spent} ns in 300 ms of Wake frames");
    drop(c);
    assert!(appears(&marker));
    std::fs::remove_file(&marker).unwrap();
    s.settles_at(base);
    // An Env frame, then a flagged request with no environment of its own: the child has
    // the Env frame's (and nothing of the server's); the frame itself gets no answer.
    let mut c = authenticated(&s);
    send_fds(&c, &env_frame(&good_env), &[]);
    let (req, fds) = touch_inheriting(&marker, 50);
    send_fds(&c, &req, &fds);
    let mut reply = [0u8; 20];
    c.read_exact(&mut reply).unwrap();
    assert_eq!(reply[5], frame::Kind::Spawned as u8, "a flagged request after an Env frame");
    assert_eq!(u64::from_le_bytes(reply[8..16].try_into().unwrap()), 50);
    let seen = dir.join("env-seen");
    let mut sh = Command::new("/bin/sh");
    sh.args(["-c", "echo \"$A:$PATH:${HOME-unset}\" > \"$0\""]).arg(&seen).current_dir("/");
    sh.stdin(spawnkit::Stdio::Fd(0)).stdout(spawnkit::Stdio::Fd(1)).stderr(spawnkit::Stdio::Fd(2));
    let (body, fds) = sh.to_wire().unwrap();
    let mut bytes = header(frame::Kind::Spawn, body.len() as u32, fds.len() as u8, 51).to_vec();
    bytes[6] = frame::FLAG_CONN_ENV;
    bytes.extend_from_slice(&body);
    send_fds(&c, &bytes, &fds);
    c.read_exact(&mut reply).unwrap();
    assert_eq!(reply[5], frame::Kind::Spawned as u8);
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(marker.exists() && std::fs::read_to_string(&seen).is_ok_and(|t| t.ends_with('\n')))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(marker.exists(), "the flagged touch ran");
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "from-env:/usr/bin:/bin:unset\n");
    s.settles_at(base);
}

/// A request left half sent (a header alone, then half a body) is cut off after
/// `--frame-timeout`, with its fds closed; a client that keeps still between whole frames is
/// not.
#[test]
fn a_stalled_half_frame_is_cut_off() {
    let s = Serve::start(&["--frame-timeout", "0.3"]);
    s.still_serves();
    let base = s.quiet_fds();
    let dir = TempDir::new("stall");
    let marker = dir.join("spawned");
    let (req, fds) = touch_request(&marker, 1, None);
    let mut header_only = authenticated(&s);
    header_only.write_all(&req[..16]).unwrap();
    let mut half = authenticated(&s);
    send_fds(&half, &req[..req.len() / 2], &fds);
    let mut idle = authenticated(&s);
    for c in [&header_only, &half] {
        // Without the timeout this would wait forever: fail instead.
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    }
    let t = Instant::now();
    closed(&mut header_only);
    closed(&mut half);
    assert!(t.elapsed() < Duration::from_secs(10), "cut off after about 0.3 s");
    assert!(!marker.exists());
    s.settles_at(base + 1); // the idle client's connection
                            // The idle client is still served after the timeout.
    std::thread::sleep(Duration::from_millis(500));
    let (req, fds) = touch_request(&marker, 2, None);
    send_fds(&idle, &req, &fds);
    let mut reply = [0u8; 20];
    idle.read_exact(&mut reply).unwrap();
    assert_eq!(reply[5], frame::Kind::Spawned as u8);
    drop(idle);
    s.settles_at(base);
}

/// A client that stops its child between the clone and the exec (SIGSTOP to the pid) does
/// not hold the server's spawning thread: after `--exec-timeout` the server kills that child,
/// the request fails with an error that says so, and the server goes on serving. The child's
/// pre-exec window is widened with 4,000 bind mounts so this test can catch it in time.
#[test]
fn a_child_stopped_before_its_exec_is_killed() {
    if !is_root() {
        eprintln!("skipped: needs root (the bind mounts that widen the window)");
        return;
    }
    let s = Serve::start(&["--exec-timeout", "0.5"]);
    s.still_serves();
    let base = s.quiet_fds();
    let server_exe = std::fs::read_link(format!("/proc/{}/exe", s.pid())).unwrap();
    let dir = TempDir::new("prexec");
    let pid = s.pid();
    let server_mnt = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap();
    let stopper = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
            for t in tasks.flatten() {
                let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                for c in kids.split_whitespace().filter_map(|c| c.parse::<i32>().ok()) {
                    // Still the server's image: it has not exec'd yet; in a mount namespace
                    // of its own: the request's child, not one parked in the server's pool.
                    if std::fs::read_link(format!("/proc/{c}/exe")).ok().as_ref()
                        == Some(&server_exe)
                        && std::fs::read_link(format!("/proc/{c}/ns/mnt")).ok().as_ref()
                            != Some(&server_mnt)
                    {
                        // SAFETY: a signal to a pid just read, the server's child.
                        unsafe { libc::kill(c, libc::SIGSTOP) };
                        return Some(c);
                    }
                }
            }
        }
        None
    });
    let mut cmd = Command::new("/bin/true");
    for _ in 0..4000 {
        cmd.ro_bind(&dir.0, &dir.0);
    }
    let mut client = s.client();
    let parked = s.wait_parked(1);
    let t = Instant::now();
    let r = client.spawn(&cmd);
    let stopped = stopper.join().unwrap();
    assert!(stopped.is_some(), "the test caught the child before its exec");
    let Err(e) = r else { panic!("a child stopped before its exec cannot have started") };
    assert!(e.to_string().contains("did not reach execve"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "killed after about 0.5 s");
    // The children parked in the pool of the same spawning thread wait for requests: the
    // watchdog left them alone.
    let now = s.parked_children();
    assert!(parked.iter().all(|p| now.contains(p)), "parked {parked:?}, now {now:?}");
    s.still_serves();
    drop(client);
    s.settles_at(base);
}

/// A request the gate refuses (no cwd): an Error reply, cheap, no fds.
fn refused_request(id: u64) -> Vec<u8> {
    let mut cmd = Command::new("/bin/true");
    cmd.env_clear();
    let (body, fds) = cmd.to_wire().unwrap();
    assert!(fds.is_empty());
    let mut bytes = header(frame::Kind::Spawn, body.len() as u32, 0, id).to_vec();
    bytes.extend_from_slice(&body);
    bytes
}

/// Read up to `want` whole replies; how many came before EOF or the read timeout.
fn read_replies(c: &mut UnixStream, want: usize) -> usize {
    let mut got = 0;
    let mut h = [0u8; 16];
    while got < want {
        if c.read_exact(&mut h).is_err() {
            break;
        }
        let len = u32::from_le_bytes(h[..4].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len];
        if c.read_exact(&mut body).is_err() {
            break;
        }
        got += 1;
    }
    got
}

/// The half-frame clock measures one frame, not the connection: a client streaming requests
/// for 4 s, its bursts cut mid-frame all the time, is not cut off at `--frame-timeout 1`;
/// nor is a client whose replies waited (backpressure) when it catches up: the server was
/// behind, not the client.
#[test]
fn busy_clients_are_not_cut_off_by_the_frame_timeout() {
    let s = Serve::start(&["--frame-timeout", "1"]);
    // Streaming, replies read as they come.
    let mut c = authenticated(&s);
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let one = refused_request(1);
    let w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk: Vec<u8> = (0..100).flat_map(|_| one.clone()).collect();
        let t = Instant::now();
        let mut sent = 0usize;
        while t.elapsed() < Duration::from_secs(4) {
            if (&w).write_all(&chunk).is_err() {
                return (sent, false);
            }
            sent += 100;
        }
        (sent, true)
    });
    let mut got = 0;
    while !writer.is_finished() {
        if read_replies(&mut c, 1) == 0 {
            break;
        }
        got += 1;
    }
    let (sent, ok) = writer.join().unwrap();
    assert!(ok, "streaming client cut off after {sent} requests, {got} replies");
    drop(c);
    // Backpressure: 20,000 requests sent at once, replies left unread for 1.5 s (under the
    // 2 s timeout, which also closes a client that takes none of its replies for that long),
    // then read: before the fix the half-frame clock had run all along and cut it off.
    let s = Serve::start(&["--frame-timeout", "2"]);
    let mut c = authenticated(&s);
    let n = 20_000usize;
    let all: Vec<u8> = (0..n).flat_map(|i| refused_request(i as u64 + 1)).collect();
    let w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || (&w).write_all(&all).is_ok());
    std::thread::sleep(Duration::from_millis(1500));
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let got = read_replies(&mut c, n);
    assert_eq!((got, writer.join().unwrap()), (n, true), "every reply, the connection kept");
    // A client that takes none of its replies for longer than the timeout is closed.
    let mut c = authenticated(&s);
    let all: Vec<u8> = (0..n).flat_map(|i| refused_request(i as u64 + 1)).collect();
    let w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || (&w).write_all(&all).is_ok());
    std::thread::sleep(Duration::from_secs(4));
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let got = read_replies(&mut c, n);
    let _ = writer.join();
    assert!(got < n, "a client that read nothing for 4 s was closed ({got} replies)");
}

/// The watchdog kills only a child that has not exec'd (it shares the server's memory): a
/// running `spawnkit run -- sleep 30` started by the same server (whose executable is the
/// server's own) is left alone while another spawn is held up. A lock path that is a FIFO
/// does not hold the spawn at all: it is refused at once.
#[test]
fn the_watchdog_spares_exec_d_children_and_a_fifo_lock_holds_nothing() {
    let s = Serve::start(&["--exec-timeout", "0.3"]);
    s.still_serves();
    let dir = TempDir::new("wd");
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut client = s.client();
    let mut victim = Command::new(spawnkit_bin());
    victim.args(["run", "--", "/bin/sleep", "30"]).env_clear().current_dir("/");
    let mut v = client.spawn(&victim).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(v.try_wait().unwrap().is_none(), "the spawnkit child runs");
    let mut stall = Command::new("/bin/true");
    stall.lock(spawnkit::Lock { path: fifo.clone(), shared: false, timeout: Some(Duration::ZERO) });
    let t = Instant::now();
    let Err(e) = client.spawn(&stall) else { panic!("a FIFO is no lock") };
    assert!(t.elapsed() < Duration::from_secs(5), "refused at once, not held: {e}");
    assert!(e.to_string().contains("regular file or a directory"), "{e}");
    std::thread::sleep(Duration::from_secs(1)); // a few watchdog rounds
    assert!(v.try_wait().unwrap().is_none(), "the exec'd spawnkit child was not killed");
    v.kill().unwrap();
    v.wait().unwrap();
}

#[test]
fn a_killed_client_leaves_no_fd_or_zombie() {
    let s = Serve::start(&[]);
    s.still_serves();
    let base = s.quiet_fds();
    let probe = probe();
    // A request sent, then the client gone before reading the reply.
    for _ in 0..5 {
        let c = authenticated(&s);
        let mut cmd = Command::new(&probe);
        cmd.args(["sleep", "0.2"]).current_dir("/").env_clear();
        cmd.stdin(spawnkit::Stdio::Fd(0))
            .stdout(spawnkit::Stdio::Fd(1))
            .stderr(spawnkit::Stdio::Fd(2));
        let (body, fds) = cmd.to_wire().unwrap();
        let mut bytes = header(frame::Kind::Spawn, body.len() as u32, fds.len() as u8, 1).to_vec();
        bytes.extend_from_slice(&body);
        send_fds(&c, &bytes, &fds);
        drop(c);
    }
    // A `spawnkit run --via` killed with SIGKILL while its child runs.
    let mut run = spawnkit_cmd(["run", "--via"])
        .arg(&s.socket)
        .arg("--")
        .arg(&probe)
        .args(["sleep", "0.3"])
        .stdin(StdStdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    run.kill().unwrap();
    run.wait().unwrap();
    s.settles_at(base);
    s.still_serves();
}

#[test]
fn a_client_that_never_reads_its_replies_is_held_back() {
    let s = Serve::start(&[]);
    s.still_serves();
    let base = s.quiet_fds();
    let c = authenticated(&s);
    c.set_nonblocking(true).unwrap();
    let mut cmd = Command::new("/bin/true");
    cmd.current_dir("/").env_clear();
    cmd.stdin(spawnkit::Stdio::Fd(0)).stdout(spawnkit::Stdio::Fd(1)).stderr(spawnkit::Stdio::Fd(2));
    let (body, fds) = cmd.to_wire().unwrap();
    let mut frame = header(frame::Kind::Spawn, body.len() as u32, fds.len() as u8, 1).to_vec();
    frame.extend_from_slice(&body);
    // Requests until the socket pushes back (the server stops reading a client whose
    // replies wait), within a bound.
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if !try_send_fds(&c, &frame, &fds) {
            std::thread::sleep(Duration::from_millis(100));
            if !try_send_fds(&c, &frame, &fds) {
                break;
            }
        }
        sent += 1;
    }
    assert!(Instant::now() < deadline, "the server kept reading ({sent} requests)");
    eprintln!("held back after {sent} requests, server fds {} (base {base})", s.fd_count());
    // Meanwhile others are served, and the server holds a bounded number of fds.
    s.still_serves();
    assert!(s.fd_count() < base + 2000, "{} fds after {sent} requests", s.fd_count());
    drop(c);
    s.settles_at(base);
    s.still_serves();
}

/// sendmsg with MSG_DONTWAIT; false on EAGAIN.
fn try_send_fds(sock: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> bool {
    let n = match sendmsg_fds(sock, bytes, fds, libc::MSG_DONTWAIT) {
        Ok(n) => n,
        Err(e) => {
            assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "{e}");
            return false;
        }
    };
    // A partial send leaves the stream mid-frame: finish it blocking.
    if n < bytes.len() {
        sock.set_nonblocking(false).unwrap();
        (&*sock).write_all(&bytes[n..]).unwrap();
        sock.set_nonblocking(true).unwrap();
    }
    true
}

#[test]
fn another_uid_is_refused_before_a_byte() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    // Everything else open to nobody: a reachable socket and a key it can read.
    let dir = TempDir::new("uid");
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let socket = dir.join("s.sock");
    let s = Serve::start_at(dir, socket.clone(), &[]);
    std::fs::set_permissions(&socket, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let key = s.dir.join("nobody.key");
    std::fs::copy(key_path_for(&socket), &key).unwrap();
    std::os::unix::fs::chown(&key, Some(65534), Some(65534)).unwrap();
    let marker = s.dir.join("spawned");
    let base = s.quiet_fds();
    let out = StdCommand::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", spawnkit_bin(), "run", "--via"])
        .arg(&socket)
        .arg("--key-file")
        .arg(&key)
        .args(["--", "/usr/bin/touch"])
        .arg(&marker)
        .stdin(StdStdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("closed the connection"), "{out:?}");
    assert!(!marker.exists());
    s.settles_at(base);
    s.still_serves();
}

#[test]
fn allow_uid_runs_the_child_as_the_peer_and_refuses_root_powers() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = TempDir::new("allow");
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let socket = dir.join("s.sock");
    let s = Serve::start_at(dir, socket.clone(), &["--allow-uid", "65534"]);
    let probe = probe();
    let run = |extra: &[&str], args: &[&str]| {
        let out = StdCommand::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                spawnkit_bin(),
                "run",
                "--via",
            ])
            .arg(&socket)
            .args(extra)
            .arg("--")
            .args(args)
            .current_dir("/")
            .stdin(StdStdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let p = probe.to_str().unwrap();
    let (code, out, err) = run(&[], &[p, "state"]);
    assert_eq!(code, Some(0), "{err}");
    let st = parse_state(&out);
    assert_eq!(st["ppid"], s.pid().to_string());
    assert!(st["uid"].starts_with("65534"), "uid {}", st["uid"]);
    // What the request leaves unset is the peer's own, not the root server's: its resource
    // limits and its niceness (review finding: the child had root's hard limits).
    let out = StdCommand::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "prlimit", "--nofile=64:64"])
        .args(["--memlock=0:0", "nice", "-n", "5", spawnkit_bin(), "run", "--via"])
        .arg(&socket)
        .args(["--", p, "state"])
        .current_dir("/")
        .stdin(StdStdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st = parse_state(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(st["limit.NOFILE"], "64:64");
    assert_eq!(st["limit.MEMLOCK"], "0:0");
    // `nice -n 5` adds to this test's own niceness (CI runs at 0; a developer may run the
    // suite under `nice`).
    let own: i32 = std::fs::read_to_string("/proc/self/stat")
        .unwrap()
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(16)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(st["nice"], (own + 5).min(19).to_string());
    // The chdir is checked with the peer's rights, not root's: a directory behind a
    // root-only one is out of reach.
    let hidden = s.dir.join("root-only");
    std::fs::create_dir_all(hidden.join("open")).unwrap();
    std::fs::set_permissions(&hidden, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let cwd = hidden.join("open");
    let (code, _, err) = run(&["--cwd", cwd.to_str().unwrap()], &["/bin/true"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("chdir") && err.contains("Permission denied"), "{err}");
    for extra in [
        &["--uid", "0"][..],
        &["--nice", "-5"],
        &["--unshare", "mount"],
        &["--chroot", "/"],
        &["--rlimit", "nofile=99999999"],
    ] {
        let (code, _, err) = run(extra, &["/bin/true"]);
        assert_eq!(code, Some(125), "{extra:?} must be refused: {err}");
        assert!(err.contains("serve"), "{extra:?}: {err}");
    }
}

/// A root server's `--allow-uid` request served by a pool child: the child made by root
/// before the request takes the peer's filesystem ids when woken, so its chdir is checked with
/// the peer's rights.
#[test]
fn allow_uid_through_a_pool_child() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = TempDir::new("allowpool");
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let socket = dir.join("s.sock");
    let s = Serve::start_at(dir, socket.clone(), &["--allow-uid", "65534", "--pool", "1"]);
    let hidden = s.dir.join("root-only");
    std::fs::create_dir_all(hidden.join("open")).unwrap();
    std::fs::set_permissions(&hidden, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let cwd = hidden.join("open");
    let run = |args: &[&str]| {
        StdCommand::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", spawnkit_bin()])
            .args(["run", "--via"])
            .arg(&socket)
            .args(args)
            .current_dir("/")
            .stdin(StdStdio::null())
            .output()
            .unwrap()
    };
    let p = probe();
    // One parked child per spawning thread (the loop's and a spawner thread's): another
    // uid's request goes to a spawner thread.
    let parked = s.wait_pool_full();
    let out = run(&["--", p.to_str().unwrap(), "state"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st = parse_state(&String::from_utf8_lossy(&out.stdout));
    assert!(parked.contains(&st["pid"].parse().unwrap()), "not a pool child: {parked:?}");
    assert!(st["uid"].starts_with("65534"), "uid {}", st["uid"]);
    assert_eq!(st["groups"], "");
    // The chdir as the peer: refused behind a root-only directory.
    let parked = s.wait_pool_full();
    let out = run(&["--cwd", cwd.to_str().unwrap(), "--", "/bin/true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("chdir") && err.contains("Permission denied"), "{err}");
    let now = s.parked_children();
    assert!(parked.iter().any(|p| !now.contains(p)), "a pool child served it");
}

/// A parked pool child that a client stops (SIGSTOP to a pid it guessed) before a request
/// wakes it: the watchdog kills it once the request has waited `--exec-timeout`, and the
/// request is served by a clone instead; a parked child killed outright is simply skipped.
/// Nothing is left behind either way.
#[test]
fn a_stopped_or_killed_pool_child_does_not_lose_a_request() {
    let s = Serve::start(&["--exec-timeout", "0.5", "--pool", "1"]);
    let base = s.quiet_fds();
    // One parked child per spawning thread: stop them all, so the request wakes a stopped
    // one whichever thread takes it.
    let parked = s.wait_pool_full();
    for p in &parked {
        unsafe_free_kill(*p, libc::SIGSTOP);
    }
    let t = Instant::now();
    s.still_serves();
    assert!(t.elapsed() >= Duration::from_millis(400), "no stopped child was woken");
    let deadline = Instant::now() + Duration::from_secs(5);
    let gone = || parked.iter().filter(|p| !s.all_children().contains(p)).count();
    while gone() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(gone() >= 1, "the woken stopped child is gone");
    // The others, still parked (the watchdog leaves them), are killed outright: skipped.
    for p in parked.iter().filter(|p| s.all_children().contains(p)) {
        unsafe_free_kill(*p, libc::SIGKILL);
    }
    s.still_serves();
    s.wait_pool_full();
    s.settles_at(base);
}

#[test]
fn four_clients_5000_spawns_each_16_in_flight() {
    let s = Serve::start(&[]);
    // Warm up (the allocator's arenas, the epoll set's size), then measure.
    let mut c = s.client();
    let warm: Vec<Command> = (0..200).map(|_| Command::new("/bin/true")).collect();
    for ch in c.spawn_many(&warm, 16).unwrap() {
        ch.unwrap().wait().unwrap();
    }
    drop(c);
    let (fd0, rss0) = (s.quiet_fds(), s.rss_kib());
    let per_client = 5000;
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let socket = s.socket.clone();
            std::thread::spawn(move || {
                let mut client = Client::connect(&socket).unwrap();
                let mut cmd = Command::new("/bin/true");
                cmd.current_dir("/").env_clear();
                let mut running = std::collections::VecDeque::new();
                let (mut sent, mut ok) = (0, 0);
                while ok < per_client {
                    while sent < per_client && client.in_flight() + running.len() < 16 {
                        client.submit(&cmd).unwrap();
                        sent += 1;
                    }
                    if client.in_flight() > 0 {
                        running.push_back(client.receive().unwrap().1.unwrap());
                    }
                    if running.len() >= 8 || sent == per_client {
                        if let Some(mut child) = running.pop_front() {
                            assert_eq!(child.wait().unwrap(), ExitStatus::Exited(0));
                            ok += 1;
                        }
                    }
                }
                ok
            })
        })
        .collect();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, 4 * per_client, "nothing lost");
    s.settles_at(fd0);
    let rss1 = s.rss_kib();
    assert!(rss1 <= rss0 + 1024, "server RSS grew from {rss0} KiB to {rss1} KiB");
    s.still_serves();
}

#[test]
fn sigterm_stops_accepting_and_leaves_children_running() {
    let s = Serve::start(&[]);
    let key_file = key_path_for(&s.socket);
    assert_eq!(std::fs::metadata(&key_file).unwrap().len(), 32);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let mut client = s.client();
    let mut sleeper = Command::new(probe());
    sleeper.args(["sleep", "30"]);
    let mut child = client.spawn(&sleeper).unwrap();
    let mut s = s;
    unsafe_free_kill(s.pid(), libc::SIGTERM);
    let status = s.proc.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!s.socket.exists() && !key_file.exists(), "socket and key removed");
    assert_eq!(child.try_wait().unwrap(), None, "the child keeps running");
    child.kill().unwrap();
}

#[test]
fn idle_exit_and_max_clients() {
    let s = Serve::start(&["--idle-exit", "0.3", "--max-clients", "1"]);
    let a = s.client();
    // A second client is refused at once, and told why (a Failure frame in place of the
    // challenge).
    let e = Client::connect(&s.socket).unwrap_err();
    assert!(e.to_string().contains("most clients connected (--max-clients 1)"), "{e}");
    drop(a);
    let mut s = s;
    let t0 = Instant::now();
    let status = s.proc.wait().unwrap();
    assert!(status.success());
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn default_socket_dir_is_private() {
    let dir = TempDir::new("xdg");
    let run = dir.join("run");
    std::fs::create_dir(&run).unwrap();
    // A socket directory others may open is refused.
    std::fs::create_dir(run.join("spawnkit")).unwrap();
    std::fs::set_permissions(
        run.join("spawnkit"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let r = Res::of(spawnkit_cmd(["serve"]).env("XDG_RUNTIME_DIR", &run));
    r.code(125).stderr_has("only we can open");
    std::fs::set_permissions(
        run.join("spawnkit"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let mut p = spawnkit_cmd(["serve", "--idle-exit", "0.2"])
        .env("XDG_RUNTIME_DIR", &run)
        .stdout(StdStdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(p.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim_end(), run.join("spawnkit/server.sock").display().to_string());
    assert!(p.wait().unwrap().success());
    let _ = Write::flush(&mut std::io::stdout());
}

#[test]
fn pool_is_bounded_and_bad_numbers_are_one_line() {
    // A server that started anyway (without the bound) exits by itself after a second with
    // no client, so the test fails rather than hangs.
    let dir = TempDir::new("pool-bound");
    let socket = dir.join("s.sock");
    let serve = |flag: &str, value: &str| {
        let mut cmd = spawnkit_cmd(["serve", "--socket"]);
        cmd.arg(&socket).args([flag, value]).env("SPAWNKIT_SERVER_ONLY", "1");
        if flag != "--idle-exit" {
            cmd.args(["--idle-exit", "1"]);
        }
        Res::of(&mut cmd)
    };
    for value in ["65", "100000", "-1"] {
        serve("--pool", value).bad_value("--pool", value).stderr_has(&format!(
            "error: invalid value '{value}' for '--pool <N>': {value} is not in 0..=64\n"
        ));
        // The benchmark's private server takes the same bound (refused before it runs).
        Res::of(&mut spawnkit_cmd(["bench", "server", "--server-pool", value]))
            .bad_value("--server-pool", value)
            .stderr_has("is not in 0..=64");
    }
    for (flag, value, why) in [
        ("--idle-exit", "-1", "\"-1\" is negative"),
        ("--frame-timeout", "-1", "\"-1\" is negative"),
        ("--exec-timeout", "1e30", "\"1e30\" is too large: at most 1000000000 seconds"),
        ("--max-clients", "-1", "-1 is not in 1..=4294967295"),
        ("--allow-uid", "-1", "-1 is negative: a user id"),
    ] {
        serve(flag, value).bad_value(flag, value).stderr_has(why);
    }
    assert!(!socket.exists());
}

/// A stream closed when `spawnkit run --via` starts is closed in the program the server
/// spawns, as in a local run (not the /dev/null of spawnkit's own runtime, nor the server's).
#[test]
fn run_via_keeps_a_stream_closed_when_spawnkit_started_closed() {
    let s = Serve::start(&[]);
    let report = s.dir.join("report");
    let r = report.to_str().unwrap();
    let sock = s.socket.to_str().unwrap();
    let with_fd_closed = |fd: i32, args: &[&str]| -> Res {
        let mut cmd = spawnkit_cmd(["run", "--via", sock]);
        cmd.args(args);
        common::close_fd_at_exec(&mut cmd, fd);
        Res::of(&mut cmd)
    };
    for fd in 0..3 {
        let _ = std::fs::remove_file(&report);
        with_fd_closed(fd, &["--", "sh", "-c", common::OPEN_OR_CLOSED, r]).code(0);
        let seen = std::fs::read_to_string(&report).unwrap();
        let want: Vec<&str> = (0..3).map(|n| if n == fd { "closed" } else { "open" }).collect();
        assert_eq!(seen.trim_end(), want.join(" "), "fd {fd} closed");
    }
    with_fd_closed(1, &["--", "/bin/echo", "hi"]).code(1).stderr_has("Bad file descriptor");
    // A flag still sets it.
    let _ = std::fs::remove_file(&report);
    with_fd_closed(1, &["--stdout", "/dev/null", "--", "sh", "-c", common::OPEN_OR_CLOSED, r])
        .code(0);
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "open open open\n");
}

/// `spawnkit serve >&- &`: a stdout closed from the start has nobody to tell the socket's
/// path, and the server runs all the same (the path is the one it was given).
#[test]
fn serve_with_stdout_closed_from_the_start_still_serves() {
    let dir = TempDir::new("srv-closed");
    let socket = dir.join("s.sock");
    let mut cmd = spawnkit_cmd(["serve", "--socket"]);
    cmd.arg(&socket)
        .env("SPAWNKIT_SERVER_ONLY", "1")
        .current_dir("/")
        .stdin(StdStdio::null())
        .stderr(StdStdio::piped());
    common::close_fd_at_exec(&mut cmd, 1);
    let proc = cmd.spawn().expect("spawnkit serve");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() || !key_path_for(&socket).exists() {
        assert!(Instant::now() < deadline, "no socket at {}", socket.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = Serve { proc, socket, dir };
    s.still_serves();
}

/// The probe with `args`, its cwd and environment its own (nothing read from this process).
fn probe_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new(probe());
    cmd.args(args).current_dir("/").env_clear();
    cmd
}

/// Status requests (spawn and wait, the pidfd kept in the server): each is answered once,
/// with how its child ended or the local spawn's error, alone, in a batch, beside requests
/// answered with a child; the server holds no fd for them afterwards.
#[test]
fn status_requests_answer_once_with_how_the_child_ended() {
    let s = Serve::start(&[]);
    s.still_serves();
    let base = s.quiet_fds();
    let mut c = s.client();
    assert_eq!(c.status(&probe_cmd(&["exit", "7"])).unwrap(), ExitStatus::Exited(7));
    let st = c.status(&probe_cmd(&["kill", "15"])).unwrap();
    assert_eq!(st.signal(), Some(libc::SIGTERM), "{st}");
    // The child's view: the client's environment and cwd, as any request.
    let mut env_check = Command::new("/bin/sh");
    env_check.args(["-c", "test \"$SPAWNKIT_STATUS_T\" = yes && test \"$PWD\" = /tmp"]);
    env_check.env("SPAWNKIT_STATUS_T", "yes").current_dir("/tmp");
    assert_eq!(c.status(&env_check).unwrap(), ExitStatus::Exited(0));
    // A program that does not exist: the error a local spawn gives.
    let missing = Command::new("/no/such/program");
    let e = c.status(&missing).unwrap_err();
    let local = missing.try_clone().unwrap().spawn().unwrap_err();
    assert_eq!((e.step(), e.raw_os_error()), (local.step(), local.raw_os_error()), "{e}");
    // A pipe has no other end to hand back: refused before anything is sent.
    let mut piped = probe_cmd(&["exit", "0"]);
    piped.stdout(spawnkit::Stdio::Pipe);
    let e = c.status(&piped).unwrap_err();
    assert_eq!(e.kind(), spawnkit::ErrorKind::InvalidInput, "{e}");
    // A batch with a failure in it: every request answered, under its own id.
    let (ok, three, sig) =
        (probe_cmd(&["exit", "0"]), probe_cmd(&["exit", "3"]), probe_cmd(&["kill", "9"]));
    let cmds = [&ok, &three, &missing, &sig];
    let ids = c.submit_status_many(cmds).unwrap();
    let mut got = BTreeMap::new();
    for _ in 0..ids.len() {
        let (id, r) = c.receive_status().unwrap();
        assert!(got.insert(id, r).is_none(), "request {id} answered twice");
    }
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), ids);
    assert_eq!(*got[&ids[0]].as_ref().unwrap(), ExitStatus::Exited(0));
    assert_eq!(*got[&ids[1]].as_ref().unwrap(), ExitStatus::Exited(3));
    assert_eq!(got[&ids[2]].as_ref().unwrap_err().step(), local.step());
    assert_eq!(got[&ids[3]].as_ref().unwrap().signal(), Some(libc::SIGKILL));
    let e = c.receive_status().unwrap_err();
    assert_eq!(e.kind(), spawnkit::ErrorKind::InvalidInput, "nothing in flight: {e}");
    // Many, in order, with a window; the answer to an earlier request stays for
    // receive_status, and receive_id refuses a status request's id at once.
    let earlier = c.submit_status_many([&three]).unwrap()[0];
    let e = c.receive_id(earlier).unwrap_err();
    assert_eq!(e.kind(), spawnkit::ErrorKind::InvalidInput, "{e}");
    let many: Vec<Command> = (0..100).map(|i| probe_cmd(&["exit", &(i % 5).to_string()])).collect();
    let statuses = c.status_many(&many, 16).unwrap();
    for (i, st) in statuses.into_iter().enumerate() {
        assert_eq!(st.unwrap(), ExitStatus::Exited(i as i32 % 5), "item {i}");
    }
    let (id, st) = c.receive_status().unwrap();
    assert_eq!((id, st.unwrap()), (earlier, ExitStatus::Exited(3)));
    // Beside a request answered with a child: neither kind waits for the other.
    let mut child = c.spawn(&probe_cmd(&["sleep", "0.2"])).unwrap();
    let id = c.submit_status_many([&probe_cmd(&["sleep", "0.1"])]).unwrap()[0];
    let e = c.receive().unwrap_err(); // no child request in flight: at once, not a hang
    assert_eq!(e.kind(), spawnkit::ErrorKind::InvalidInput, "{e}");
    assert_eq!(c.receive_status().unwrap().0, id);
    assert!(child.wait().unwrap().success());
    drop(c);
    s.settles_at(base);
    s.still_serves();
}

/// A client gone with status requests running: the children run on, as a client's own do
/// when it drops their pidfds, and are reaped with no answer when they end; the server holds
/// no fd for them (its reaper knows them by pid) while the client is there or after, nothing
/// is left once they end, and the server serves others throughout.
#[test]
fn a_closed_connection_leaves_no_status_pidfd() {
    // No pool: its refills (a parked child's pidfd each) would move the fd count.
    let s = Serve::start(&["--pool", "0"]);
    s.still_serves();
    let base = s.quiet_fds();
    let mut c = s.client();
    let sleeper = probe_cmd(&["sleep", "30"]);
    c.submit_status_many(std::iter::repeat_n(&sleeper, 5)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.children().len() < 5 {
        assert!(Instant::now() < deadline, "children: {:?}", s.children());
        std::thread::sleep(Duration::from_millis(5));
    }
    // `base` and the connection's socket: no pidfd (nor anything else) per status child,
    // once the fds the requests passed are closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.fd_count() > base + 1 {
        let fds: Vec<_> = std::fs::read_dir(format!("/proc/{}/fd", s.pid()))
            .map(|d| d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok()).collect())
            .unwrap_or_default();
        assert!(Instant::now() < deadline, "{fds:?} for 5 status children, {base} before");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(s.children().len(), 5, "they run");
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.fd_count() > base {
        assert!(Instant::now() < deadline, "{} fds, {base} before", s.fd_count());
        std::thread::sleep(Duration::from_millis(5));
    }
    let running = s.children();
    assert_eq!(running.len(), 5, "the children run on: {running:?}");
    s.still_serves();
    for pid in running {
        unsafe_free_kill(pid, libc::SIGKILL);
    }
    s.settles_at(base);
    // Gone with requests still queued for the spawner threads (a client sends 64 and
    // closes at once): those are not started, and none started is left watched.
    for _ in 0..10 {
        let mut c = s.client();
        c.submit_status_many(std::iter::repeat_n(&sleeper, 64)).unwrap();
        drop(c);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.fd_count() > base {
        assert!(Instant::now() < deadline, "{} fds, {base} before", s.fd_count());
        std::thread::sleep(Duration::from_millis(5));
    }
    for pid in s.children() {
        unsafe_free_kill(pid, libc::SIGKILL);
    }
    s.settles_at(base);
    s.still_serves();
}

/// At most 1,024 status requests unanswered per connection: the next is refused with
/// EAGAIN and the connection goes on; once they are answered the count is back to 0.
#[test]
fn status_requests_beyond_the_cap_are_refused_then_taken_again() {
    assert_eq!(spawnkit::serve::MAX_STATUS_IN_FLIGHT % 64, 0, "whole frames below");
    // Room for the connection's bound under the server's own (half its fd limit).
    let s = serve_with_nofile(8192);
    let mut c = s.client();
    let cap = spawnkit::serve::MAX_STATUS_IN_FLIGHT;
    // Requests that fail to start are answered, and counted out, too.
    let missing: Vec<Command> = (0..cap)
        .map(|_| {
            let mut cmd = Command::new("/no/such");
            cmd.current_dir("/").env_clear();
            cmd
        })
        .collect();
    for r in c.status_many(&missing, cap).unwrap() {
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ENOENT));
    }
    // Frames of 64 with one sleeper each: the quick children's answers are held with their
    // frame's (sent when the sleeper ends), and count until then.
    let mut sleeper = Command::new("/bin/sleep");
    sleeper.arg("3").current_dir("/").env_clear();
    let quick = probe_cmd(&["exit", "0"]);
    let frame: Vec<&Command> =
        std::iter::once(&sleeper).chain(std::iter::repeat_n(&quick, 63)).collect();
    let mut ids = Vec::new();
    for _ in 0..cap / 64 {
        ids.extend(c.submit_status_many(frame.iter().copied()).unwrap());
    }
    // Until the quick ones have ended (only the 16 sleepers left), so their answers are held.
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.children().len() != cap / 64 || s.fd_count() > 64 {
        assert!(Instant::now() < deadline, "children: {:?}", s.children().len());
        std::thread::sleep(Duration::from_millis(5));
    }
    let over = c.submit_status_many([&probe_cmd(&["exit", "0"])]).unwrap()[0];
    let (id, r) = c.receive_status().unwrap();
    assert_eq!(id, over, "the refusal comes first, while the others sleep");
    let e = r.unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "{e}");
    for _ in &ids {
        assert!(c.receive_status().unwrap().1.unwrap().success());
    }
    let trues: Vec<Command> = (0..cap).map(|_| probe_cmd(&["exit", "0"])).collect();
    for st in c.status_many(&trues, cap).unwrap() {
        assert!(st.unwrap().success());
    }
}

/// Every flags byte on a valid request (status, Exit frames, batched answers, the
/// connection's environment, unknown bits, together): the server answers it or closes the
/// connection, and is left with no fd or child of it.
#[test]
fn every_flags_byte_on_a_request_leaves_nothing_behind() {
    let s = Serve::start(&[]);
    s.still_serves();
    let base = s.quiet_fds();
    let mut cmd = probe_cmd(&["exit", "0"]);
    cmd.stdin(spawnkit::Stdio::Null).stdout(spawnkit::Stdio::Null).stderr(spawnkit::Stdio::Null);
    let (body, fds) = cmd.to_wire().unwrap();
    assert!(fds.is_empty());
    for flags in 0..=u8::MAX {
        let mut c = authenticated(&s);
        let len = body.len() as u32;
        let h = frame::Header { len, kind: frame::Kind::Spawn, flags, nfds: 0, id: 1 };
        c.write_all(&h.encode()).unwrap();
        c.write_all(&body).unwrap();
        // One answer (a pidfd that comes with it is closed by a plain read), or the close.
        let mut hdr = [0u8; 16];
        if c.read_exact(&mut hdr).is_ok() {
            let n = u32::from_le_bytes(hdr[..4].try_into().unwrap()) as usize;
            let mut answer = vec![0u8; n];
            c.read_exact(&mut answer).unwrap();
            let kinds = [frame::Kind::Spawned, frame::Kind::Exit, frame::Kind::Error];
            assert!(kinds.iter().any(|k| *k as u8 == hdr[5]), "flags {flags:#x}: kind {}", hdr[5]);
            if flags & frame::FLAG_STATUS != 0 {
                assert_eq!(hdr[5], frame::Kind::Exit as u8, "flags {flags:#x}: a status answer");
            }
        }
    }
    s.settles_at(base);
    s.still_serves();
}

/// `spawnkit serve` with its fd limit (soft and hard) at `n`.
fn serve_with_nofile(n: u64) -> Serve {
    serve_with_nofile_of(n, n, &[])
}

/// `spawnkit serve` started with its fd limit at `soft` and `hard`, and `extra` arguments.
fn serve_with_nofile_of(soft: u64, hard: u64, extra: &[&str]) -> Serve {
    use std::os::unix::process::CommandExt;
    let dir = TempDir::new("srv-nofile");
    let socket = dir.join("s.sock");
    Serve::start_with(dir, socket, extra, move |cmd| {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    })
}

/// The soft and hard `Max open files` of process `pid`, from its /proc/PID/limits.
fn nofile_of(pid: u32) -> (String, String) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = text.lines().find(|l| l.starts_with("Max open files")).unwrap();
    let mut f = line["Max open files".len()..].split_whitespace();
    (f.next().unwrap().to_string(), f.next().unwrap().to_string())
}

/// Set the fd limit of process `pid` from outside, as `prlimit --pid` does.
fn set_nofile_of(pid: u32, soft: u64, hard: u64) {
    let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: prlimit reads one rlimit struct and writes nothing (old is NULL).
    let r = unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

/// `spawnkit serve` owns its process: started with a soft fd limit below its hard one, it
/// raises the soft one to the hard (so the pidfds and connections it may hold are not bound
/// by a default of 1,024), and every child it starts, from a pool or cloned, gets the limit
/// the server was given back, unless its command sets one; a status request's child too.
/// Once the server's limit is changed from outside (`prlimit --pid`), children start with it
/// as it is; a posix_spawn child (which cannot set a limit) keeps the raised one.
#[test]
fn serve_runs_on_its_hard_fd_limit_and_its_children_on_the_one_it_was_given() {
    let p = probe();
    let p = p.to_str().unwrap();
    let limit_of = |s: &Serve, run: &[&str]| {
        let mut cmd = spawnkit_cmd(["run"]);
        let r = Res::of(cmd.args(run).arg("--via").arg(&s.socket).args(["--", p, "state"]));
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        parse_state(&r.stdout)["limit.NOFILE"].clone()
    };
    // With pools (children made after the raise), and without (each child cloned for it).
    for extra in [&[][..], &["--pool", "0"][..]] {
        let s = serve_with_nofile_of(256, 4096, extra);
        s.still_serves();
        assert_eq!(nofile_of(s.pid()), ("4096".into(), "4096".into()));
        for _ in 0..6 {
            assert_eq!(limit_of(&s, &[]), "256:4096", "{extra:?}");
        }
        assert_eq!(limit_of(&s, &["--rlimit", "nofile=300:2048"]), "300:2048");
        assert_eq!(limit_of(&s, &["--strategy", "fork-exec"]), "256:4096");
        assert_eq!(limit_of(&s, &["--strategy", "posix-spawn"]), "4096:4096");
        // A status request's child, through the library's client.
        let mut c = s.client();
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "[ \"$(ulimit -Sn):$(ulimit -Hn)\" = 256:4096 ]"]);
        assert_eq!(c.status(cmd.current_dir("/").env_clear()).unwrap(), ExitStatus::Exited(0));
        if !extra.is_empty() {
            // Changed from outside: children start with the limit as it is now (cloned ones:
            // a parked child copied the limit when it was made, as docs/protocol.md says),
            // the hard one lowered below the raise, or soft and hard at a new equal value.
            for (soft, hard) in [(1000, 4096), (1000, 2048), (2048, 2048)] {
                set_nofile_of(s.pid(), soft, hard);
                assert_eq!(limit_of(&s, &[]), format!("{soft}:{hard}"));
                assert_eq!(limit_of(&s, &["--strategy", "fork-exec"]), format!("{soft}:{hard}"));
            }
        } else {
            // With pools: a child parked before the change copied the raised limit, so it
            // gets the given one back (never the raised one); once the pools have turned
            // over (at most --pool per spawning thread), children start with the new one.
            set_nofile_of(s.pid(), 1000, 4096);
            let seen: Vec<String> = (0..10).map(|_| limit_of(&s, &[])).collect();
            assert!(seen.iter().all(|l| l == "256:4096" || l == "1000:4096"), "{seen:?}");
            assert_eq!(seen.last().unwrap(), "1000:4096", "{seen:?}");
        }
    }
    // Started at its hard limit already: nothing raised, nothing restored.
    let t = serve_with_nofile(512);
    assert_eq!(nofile_of(t.pid()), ("512".into(), "512".into()));
    assert_eq!(limit_of(&t, &[]), "512:512");
}

/// A server at its fd limit cannot take in the fds passed with a request: the kernel drops
/// them (`MSG_CTRUNC`). Each request of that message is answered with EMFILE saying so,
/// nothing is spawned, no fd is left in the server, and the connection goes on serving.
#[test]
fn a_request_whose_fds_the_server_cannot_take_is_answered_and_the_connection_goes_on() {
    use std::os::fd::AsRawFd;
    let s = serve_with_nofile(64);
    s.still_serves();
    let base = s.quiet_fds();
    let mut c = s.client();
    // 80 open files of their own: more than the server has room for.
    let files: Vec<std::fs::File> =
        (0..80).map(|_| std::fs::File::open("/dev/null").unwrap()).collect();
    let mut many = probe_cmd(&["exit", "0"]);
    for (i, f) in files.iter().enumerate() {
        many.fd(10 + i as i32, f.as_raw_fd());
    }
    // The 80 and the three standard streams; a frame of two commands carries them once
    // (each fd once per frame, named by index by both: FLAG_FD_INDEX).
    let lost = |e: &spawnkit::Error, fds: usize| {
        e.raw_os_error() == Some(libc::EMFILE)
            && e.step() == "recvmsg"
            && e.to_string().contains(&format!("could not take in the {fds} fds"))
    };
    let e = c.spawn(&many).unwrap_err();
    assert!(lost(&e, 83), "{e}");
    // Two in one message (SpawnMany): each answered so.
    let answers = c.spawn_many([&many, &many], 16).unwrap();
    assert_eq!(answers.len(), 2);
    for a in &answers {
        assert!(a.as_ref().is_err_and(|e| lost(e, 83)), "{:?}", a.as_ref().err());
    }
    // A status request the same.
    let e = c.status(&many).unwrap_err();
    assert!(lost(&e, 83), "{e}");
    assert!(s.children().is_empty(), "nothing spawned: {:?}", s.children());
    // The connection goes on: requests with fds it can take are served.
    assert_eq!(c.status(&probe_cmd(&["exit", "3"])).unwrap(), ExitStatus::Exited(3));
    let mut few = probe_cmd(&["exit", "0"]);
    few.fd(10, files[0].as_raw_fd());
    assert!(c.spawn(&few).unwrap().wait().unwrap().success());
    // Commands that share their fds pass each once per frame: 16 in one message with the
    // same four (the three standard streams and a file) are all served, where passing 64
    // would be more than the server has room for.
    let answers = c.spawn_many(std::iter::repeat_n(&few, 16), 16).unwrap();
    assert_eq!(answers.len(), 16);
    for a in answers {
        let mut child = a.unwrap_or_else(|e| panic!("a shared fd passed per command? {e}"));
        assert!(child.wait().unwrap().success());
    }
    drop(c);
    s.settles_at(base);
    s.still_serves();
}

/// The server as a whole keeps at most half its fd limit of status children,
/// however many connections ask: beyond, EAGAIN naming the limit, and every connection
/// goes on.
#[test]
fn status_children_are_bounded_by_the_servers_fd_limit() {
    let s = serve_with_nofile(128);
    // No fd passed with them: a batch's fds must fit under the limit as they arrive.
    let null = || spawnkit::Stdio::Null;
    let mut sleeper = Command::new("/bin/sleep");
    sleeper.arg("1").current_dir("/").env_clear().stdin(null()).stdout(null()).stderr(null());
    let (mut a, mut b) = (s.client(), s.client());
    let ids = a.submit_status_many(std::iter::repeat_n(&sleeper, 40)).unwrap();
    // 64 is half of 128: the other connection gets 24 more, then a refusal.
    let more = b.submit_status_many(std::iter::repeat_n(&sleeper, 24)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.children().len() < 64 {
        assert!(Instant::now() < deadline, "{} children", s.children().len());
        std::thread::sleep(Duration::from_millis(5));
    }
    let over = b.submit_status_many([&probe_cmd(&["exit", "0"])]).unwrap()[0];
    let (id, r) = b.receive_status().unwrap();
    assert_eq!(id, over, "the refusal comes first");
    let e = r.unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "{e}");
    assert!(e.to_string().contains("fd limit"), "{e}");
    for _ in &ids {
        assert!(a.receive_status().unwrap().1.unwrap().success());
    }
    for _ in &more {
        assert!(b.receive_status().unwrap().1.unwrap().success());
    }
    assert!(b.status(&probe_cmd(&["exit", "0"])).unwrap().success(), "taken again");
    // A connection gone with its status children running: they count no more (nobody is
    // left to answer), so the bound is free for others at once, while they still run.
    let mut long = Command::new("/bin/sleep");
    long.arg("30").current_dir("/").env_clear().stdin(null()).stdout(null()).stderr(null());
    let mut gone = s.client();
    gone.submit_status_many(std::iter::repeat_n(&long, 64)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.children().len() < 64 {
        assert!(Instant::now() < deadline, "{} children", s.children().len());
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(gone);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match b.status(&probe_cmd(&["exit", "0"])) {
            Ok(st) => break assert!(st.success(), "{st}"),
            // The server may not have seen the close yet.
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("the gone connection's children still count: {e}"),
        }
    }
    assert_eq!(s.children().len(), 64, "they run on");
    for pid in s.children() {
        unsafe_free_kill(pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s.children().is_empty() {
        assert!(Instant::now() < deadline, "not reaped: {:?}", s.children());
        std::thread::sleep(Duration::from_millis(5));
    }
    // Four clients at once, 32 frames of 2 each: admitted or turned away (EAGAIN) as they
    // come, never more held than the bound, never a spawn failing for want of an fd.
    let mut short = Command::new("/bin/sleep");
    short.arg("0.3").current_dir("/").env_clear().stdin(null()).stdout(null()).stderr(null());
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (socket, short) = (s.socket.clone(), short.try_clone().unwrap());
            std::thread::spawn(move || {
                let mut c = Client::connect(&socket).unwrap();
                let mut n = 0;
                for _ in 0..32 {
                    n += c.submit_status_many([&short, &short]).unwrap().len();
                }
                let mut turned_away = 0;
                for _ in 0..n {
                    match c.receive_status().unwrap().1 {
                        Ok(st) => assert!(st.success(), "{st}"),
                        Err(e) => {
                            assert_eq!(
                                (e.step(), e.raw_os_error()),
                                ("serve", Some(libc::EAGAIN)),
                                "{e}"
                            );
                            turned_away += 1;
                        }
                    }
                }
                turned_away
            })
        })
        .collect();
    let mut most = 0;
    while clients.iter().any(|t| !t.is_finished()) {
        most = most.max(s.children().len());
        std::thread::sleep(Duration::from_millis(2));
    }
    let turned_away: usize = clients.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(most <= 64, "{most} status children held at once, at most 64");
    assert!(turned_away > 0, "256 asked at once, 64 at most held: some turned away");
    // status_many sends again what was turned away, once one of its own is answered.
    let many: Vec<Command> = (0..150).map(|_| short.try_clone().unwrap()).collect();
    for r in b.status_many(&many, 150).unwrap() {
        assert!(r.unwrap().success());
    }
    // With another connection holding 10, a message of 64 does not fit (the server admits a
    // message whole or not at all) and none of the call's own is in flight: smaller ones.
    let held = a.submit_status_many(std::iter::repeat_n(&sleeper, 10)).unwrap();
    let mut t = probe_cmd(&["exit", "0"]);
    t.stdin(null()).stdout(null()).stderr(null());
    let trues: Vec<Command> = (0..64).map(|_| t.try_clone().unwrap()).collect();
    for r in b.status_many(&trues, 64).unwrap() {
        assert!(r.unwrap().success());
    }
    for _ in &held {
        assert!(a.receive_status().unwrap().1.unwrap().success());
    }
}

/// Two requests with fds pipelined to a server at its fd limit (the server stopped while
/// they are sent): `prefix`, an Env frame sent before them fills the server's first read up
/// to 5 bytes into the first request's header, so the next read, with the rest of it and the
/// second request, loses fds while the first is still pending; `second_cut`, the second
/// request carries more fds than the server can take too. How many answers come.
fn pipelined_requests(prefix: bool, second_cut: bool) -> usize {
    use std::os::fd::AsRawFd;
    let s = serve_with_nofile(64);
    s.still_serves();
    let mut c = authenticated(&s);
    let files: Vec<std::fs::File> =
        (0..80).map(|_| std::fs::File::open("/dev/null").unwrap()).collect();
    let mut many = probe_cmd(&["exit", "0"]);
    for (i, f) in files.iter().enumerate() {
        many.fd(10 + i as i32, f.as_raw_fd());
    }
    let (body, fds) = many.to_wire().unwrap();
    let req = |id: u64| {
        let mut b = header(frame::Kind::Spawn, body.len() as u32, fds.len() as u8, id).to_vec();
        b.extend_from_slice(&body);
        b
    };
    // An Env frame of 16 KiB less 5 bytes in all: the server's first read (16 KiB of room)
    // ends 5 bytes into the first request's header.
    let mut env = Vec::new();
    for k in 16000..16400 {
        let v = "x".repeat(k);
        let e = env_body_long(&[("A", &v)]);
        if e.len() + 16 == 16 * 1024 - 5 {
            env = e;
            break;
        }
    }
    assert!(!env.is_empty());
    unsafe_free_kill(s.pid(), libc::SIGSTOP);
    if prefix {
        let mut f = header(frame::Kind::Env, env.len() as u32, 0, 0).to_vec();
        f.extend_from_slice(&env);
        send_fds(&c, &f, &[]);
    }
    send_fds(&c, &req(1), &fds);
    if second_cut {
        send_fds(&c, &req(2), &fds);
    } else {
        let (b2, f2) = probe_cmd(&["exit", "0"]).to_wire().unwrap();
        let mut b = header(frame::Kind::Spawn, b2.len() as u32, f2.len() as u8, 2).to_vec();
        b.extend_from_slice(&b2);
        send_fds(&c, &b, &f2);
    }
    unsafe_free_kill(s.pid(), libc::SIGCONT);
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    read_replies(&mut c, 2)
}

/// Each of them is answered (EMFILE, or spawned), however the reads fall.
#[test]
fn pipelined_requests_whose_fds_are_lost_are_each_answered() {
    assert_eq!(pipelined_requests(false, true), 2, "without the Env frame");
    assert_eq!(pipelined_requests(true, true), 2, "both cut, the first still pending");
    assert_eq!(pipelined_requests(true, false), 2, "the second's fds taken in");
}

/// Only Spawn and SpawnMany may lose their fds and go on: an Env or a Wake frame declaring
/// fds that were lost, or lost fds on a frame declaring none, close the connection, and
/// nothing stays behind in the server.
#[test]
fn lost_fds_on_frames_that_may_not_carry_them_close_the_connection() {
    use std::os::fd::AsRawFd;
    let s = serve_with_nofile(64);
    s.still_serves();
    let base = s.quiet_fds();
    let files: Vec<std::fs::File> =
        (0..83).map(|_| std::fs::File::open("/dev/null").unwrap()).collect();
    let raw: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
    let env = env_body(&[("A", "b")]);
    // Env declaring 83 fds.
    let mut c = authenticated(&s);
    let mut f = header(frame::Kind::Env, env.len() as u32, 83, 0).to_vec();
    f.extend_from_slice(&env);
    send_fds(&c, &f, &raw);
    closed(&mut c);
    // Wake declaring 83 fds.
    let mut c = authenticated(&s);
    send_fds(&c, &header(frame::Kind::Wake, 0, 83, 0), &raw);
    closed(&mut c);
    // A Spawn declaring none, 83 fds on it (lost); the next frame's header is refused.
    let mut c = authenticated(&s);
    let req = refused_request(1);
    let mut r = req.clone();
    r[7] = 0;
    send_fds(&c, &r, &raw);
    assert_eq!(read_replies(&mut c, 1), 1);
    send_fds(&c, &refused_request(2), &[]);
    closed(&mut c);
    s.settles_at(base);
    s.still_serves();
}
