//! Method 6, the spawn server (issue 13): a spawn through a private `spawnkit::PrivateServer`
//! (forked by this process first thing, before any ballast or thread) beside raw vfork+exec
//! and spawnkit's local spawn, from a small parent and a parent holding 1 GiB touched:
//!
//! * latency, request → the tiny child's first instruction (Triplett's method, as `latency`);
//! * the calling thread's own CPU per spawn (its CPU clock: the time
//!   getrusage(RUSAGE_THREAD) reports, read up to the instant), the child waited for: for
//!   the server, 16 requests submitted in one message (`submit_many`; a second row with
//!   64, the most one message carries: "batched where the API allows"), then their 16
//!   answers received, then the 16 children waited for; and 16 status requests in one
//!   message (`submit_status_many`: spawn and wait, the server keeps the pidfds and answers
//!   with how each child ended), their 16 answers received; for the others, spawn and wait,
//!   one at a time;
//! * throughput from one calling thread: the server with up to 16 requests in flight, as
//!   status requests (8 per message as answers free room: spawn and wait, the main ratio)
//!   and through `Child`s (children not yet waited for count), vfork+exec and the local
//!   spawn in a spawn-and-wait loop; beside them the minimal pooled C server with 16 in
//!   flight and the machine's ceiling, two vfork+exec loops at once on two threads;
//! * the floor under the server's latency: one round trip over a Unix socketpair to a thread
//!   that answers at once (a request-sized write, a reply-sized read; no fds, no spawn);
//! * the design floor under it: a latency row through a minimal pooled spawn server in C
//!   (bench/floor_server.c, forked beside the private server), and what a Rust caller pays to
//!   copy its environment before it can send it (`std::env::vars_os`, timed alone);
//! * Python (bench/python_server.py, embedded): `spawnkit.subprocess.Popen` local and through a
//!   private `spawnkit.Server`, and CPython's multiprocessing forkserver start, for scale.
//!
//! Rows take turns in blocks everywhere, so noise on a shared machine hits them alike.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{CStr, OsStr};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Instant;

use spawnkit::serve::{key_path_for, Key};
use spawnkit::{Client, Command, PrivateServer, Server, ServerOptions, Stdio};

use super::latency::{LatencyRow, Size, Stats};
use super::sys::{self, Ballast, Baseline};
use super::Progress;

const SCRIPT: &str = include_str!("../../../bench/python_server.py");

/// The parent sizes of the method.
pub const SIZES: [Size; 2] = [Size::Small, Size::Touched];

/// Requests in flight from the one calling thread (CPU and throughput).
pub const IN_FLIGHT: usize = 16;

/// The most requests one message may carry (a SpawnMany frame): the CPU row "batched as
/// the API allows".
pub const BATCH_MAX: usize = spawnkit::serve::frame::MAX_BATCH_REPLY;

/// Spawns per turn of a row (latency: as the latency method's turns).
pub const BLOCK: usize = 10;

/// The Rust rows: how the tiny child is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Vfork,
    Local,
    Server,
    /// The minimal pooled server in C (latency and throughput).
    Floor,
    /// Two vfork+exec loops on two threads at once (throughput only): what the machine's
    /// CPUs make of this child with no messaging at all, the ceiling over any server.
    TwoVfork,
    /// The server's status requests (throughput only; the CPU rows have their own): spawn
    /// and wait through the server, which keeps the pidfds and answers with how each child
    /// ended.
    Status,
}

const WAYS: [Way; 3] = [Way::Vfork, Way::Local, Way::Server];

/// The throughput rows: the ways, the server's status requests, the design floor and the
/// machine's ceiling beside them.
const TP_WAYS: [Way; 6] =
    [Way::Vfork, Way::Local, Way::Server, Way::Status, Way::Floor, Way::TwoVfork];

/// The latency rows: the ways, and the design floor beside them.
const LAT_WAYS: [Way; 4] = [Way::Vfork, Way::Local, Way::Server, Way::Floor];

impl Way {
    fn id(self) -> &'static str {
        match self {
            Way::Vfork => "vfork_exec",
            Way::Local => "spawnkit_local",
            Way::Server => "spawnkit_server",
            Way::Floor => "floor_pooled_server",
            Way::TwoVfork => "ceiling_two_vfork_loops",
            Way::Status => "spawnkit_server_status",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Way::Vfork => "vfork+exec",
            Way::Local => "spawnkit local (clone-vfork)",
            Way::Server => "spawnkit private server",
            Way::Floor => "floor: minimal pooled server in C",
            Way::TwoVfork => "ceiling: two vfork+exec loops, two threads",
            Way::Status => "spawnkit private server, status requests",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Way::Vfork => "baseline",
            Way::Floor => "floor",
            Way::TwoVfork => "ceiling",
            _ => "spawnkit",
        }
    }
}

/// A row with one number per parent size (µs of CPU per spawn, or spawns per second).
#[derive(Debug, Clone)]
pub struct ValueRow {
    pub id: String,
    pub name: String,
    pub values: BTreeMap<Size, f64>,
}

/// Everything the method measured.
pub struct ServerResults {
    /// The server's pid (a private server, forked before any ballast).
    pub server_pid: u32,
    /// Latency rows, Rust then Python (kind "python"), µs.
    pub latency: Vec<LatencyRow>,
    /// The calling thread's CPU per spawn, µs.
    pub cpu: Vec<ValueRow>,
    /// Spawns per second from one calling thread (median of the samples).
    pub throughput: Vec<ValueRow>,
    /// Spawns per throughput sample.
    pub tp_spawns: usize,
    /// The socket round trip alone: latency stats and the caller's CPU per round trip.
    pub floor: BTreeMap<Size, (Stats, f64)>,
    /// The same with both threads on one CPU and on two (none with one CPU).
    pub floor_pinned: BTreeMap<Size, Pinned>,
    /// The kernel's part of [`IN_FLIGHT`] requests in one message (`batch_floor`): the
    /// caller's CPU per child, µs (none with one CPU).
    pub floor_batch: BTreeMap<Size, f64>,
    /// `std::env::vars_os().collect()` alone: what a Rust caller pays to copy its environment
    /// before sending it (safely: under std's lock), µs.
    pub env_copy: BTreeMap<Size, Stats>,
    /// What a connection costs before its first request (`None`: not measured, with a note).
    pub connection: Option<Connection>,
    /// multiprocessing's forkserver: Process(no-op).start() + join(), µs.
    pub forkserver: Option<LatencyRow>,
    pub python_version: Option<String>,
    pub notes: Vec<String>,
}

impl ServerResults {
    fn latency_min(&self, id: &str, size: Size) -> Option<f64> {
        self.latency.iter().find(|r| r.id == id)?.min(size)
    }

    fn value(rows: &[ValueRow], id: &str, size: Size) -> Option<f64> {
        rows.iter().find(|r| r.id == id)?.values.get(&size).copied()
    }

    /// A ratio of the JSON file by its key, at one parent size.
    pub fn ratio(&self, key: &str, size: Size) -> Option<f64> {
        let div = |n: Option<f64>, d: Option<f64>| match (n, d) {
            (Some(n), Some(d)) if d > 0.0 => Some(n / d),
            _ => None,
        };
        let lat = |id| self.latency_min(id, size);
        let cpu = |id| Self::value(&self.cpu, id, size);
        let tp = |id| Self::value(&self.throughput, id, size);
        match key {
            "server/vfork" => div(lat("spawnkit_server"), lat("vfork_exec")),
            // Its two factors: the server's own addition (the request, the server's wake-up
            // and its work) over spawnkit's local spawn, and that local spawn over vfork+exec.
            "latency: server/local" => div(lat("spawnkit_server"), lat("spawnkit_local")),
            "latency: local/vfork" => div(lat("spawnkit_local"), lat("vfork_exec")),
            // The design under the server row, with none of spawnkit in it (bench/
            // floor_server.c); and the same plus the copy of the environment a Rust caller
            // cannot send without (std::env::vars_os: the C client reads `environ` unlocked,
            // which only a program with one thread may).
            "floor: minimal pooled server/vfork" => {
                div(lat("floor_pooled_server"), lat("vfork_exec"))
            }
            "floor: (minimal pooled server + Rust's environment copy)/vfork" => {
                let env = self.env_copy.get(&size).map(|s| s.min_us);
                div(lat("floor_pooled_server").zip(env).map(|(a, b)| a + b), lat("vfork_exec"))
            }
            // The same server from one caller thread with 16 requests in flight: what a
            // server that spawns one request at a time, and does nothing else, gives here.
            "floor: minimal pooled server throughput/vfork_throughput" => {
                div(tp("floor_pooled_server"), tp("vfork_exec"))
            }
            // No messaging at all: two vfork+exec loops at once on two threads. No server
            // fed by one thread makes more: the ceiling over the throughput target.
            "ceiling: two vfork loops throughput/vfork_throughput" => {
                div(tp("ceiling_two_vfork_loops"), tp("vfork_exec"))
            }
            // Spawn + wait through the API made for it (status requests: the server holds the
            // pidfds and answers with the statuses), 16 per message.
            "server_caller_cpu/vfork_cpu" => div(cpu("spawnkit_server_status"), cpu("vfork_exec")),
            // The same through `Child`s (pidfds handed over, each child waited for here).
            "server_caller_cpu_children/vfork_cpu" => {
                div(cpu("spawnkit_server"), cpu("vfork_exec"))
            }
            // Spawn + wait through the API made for it (status requests, as the CPU ratio),
            // 16 in flight from the one thread.
            "server_throughput_1thread/vfork_throughput" => {
                div(tp("spawnkit_server_status"), tp("vfork_exec"))
            }
            // The same through `Child`s (pidfds handed over, each child waited for here).
            "server_throughput_children/vfork_throughput" => {
                div(tp("spawnkit_server"), tp("vfork_exec"))
            }
            "py_server/py_local" => div(lat("py_server"), lat("py_local")),
            "py_server_cpu/py_local_cpu" => div(cpu("py_server"), cpu("py_local")),
            "floor: (socket round trip + vfork)/vfork" => {
                let rtt = self.floor.get(&size).map(|f| f.0.min_us);
                div(rtt.zip(lat("vfork_exec")).map(|(a, b)| a + b), lat("vfork_exec"))
            }
            "server_caller_cpu_batch_max/vfork_cpu" => {
                div(cpu("spawnkit_server_batch_max"), cpu("vfork_exec"))
            }
            "floor: socket round trip cpu/vfork_cpu" => {
                div(self.floor.get(&size).map(|f| f.1), cpu("vfork_exec"))
            }
            // A local Popen+wait without the CPU of its spawn call, plus one socket round
            // trip: what stays the caller's however little the server's work costs it
            // (Popen's Python, the read, the wait, and sending the request and taking the
            // answer, which a spawn through a server cannot do without).
            "floor: (py_local_cpu - its spawn call + socket round trip cpu)/py_local_cpu" => {
                let rt = self.floor.get(&size).map(|f| f.1);
                let all = cpu("py_local");
                div(
                    all.zip(cpu("py_spawn_call")).zip(rt).map(|((all, call), rt)| all - call + rt),
                    all,
                )
            }
            "floor: (cross-CPU round trip + vfork)/vfork" => {
                let rtt = self.floor_pinned.get(&size).map(|p| p.across.0.min_us);
                div(rtt.zip(lat("vfork_exec")).map(|(a, b)| a + b), lat("vfork_exec"))
            }
            "floor: 16 per message, the kernel's part cpu/vfork_cpu" => {
                div(self.floor_batch.get(&size).copied(), cpu("vfork_exec"))
            }
            "floor: cross-CPU round trip cpu/vfork_cpu" => {
                div(self.floor_pinned.get(&size).map(|p| p.across.1), cpu("vfork_exec"))
            }
            // As the floor above, with the round trip of a server on another CPU: what a
            // spawn through a server that works on the other core cannot go below here.
            "floor: (py_local_cpu - its spawn call + cross-CPU round trip cpu)/py_local_cpu" => {
                let rt = self.floor_pinned.get(&size).map(|p| p.across.1);
                let all = cpu("py_local");
                div(
                    all.zip(cpu("py_spawn_call")).zip(rt).map(|((all, call), rt)| all - call + rt),
                    all,
                )
            }
            _ => None,
        }
    }
}

/// The socket round trip with both threads held to one CPU (`same`) and to two (`across`):
/// latency stats and the caller's CPU per round trip (µs); the CPUs used.
pub struct Pinned {
    pub same: (Stats, f64),
    pub across: (Stats, f64),
    pub cpus: (usize, usize),
}

/// What a connection costs before its first request: issue 13's "authentication ≤ 200 µs
/// per connection and nothing per request" (a request never authenticates again: the rows
/// above send many on one connection). Measured against a server made as `spawnkit serve`
/// makes one ([`Server::bind`]: a socket and a key file in a private directory), run on a
/// thread of this process, whose CPU clock gives the server's side.
pub struct Connection {
    /// connect(2) alone, closed at once (the server still accepts it, sends its challenge
    /// and closes it): the floor under `auth`.
    pub connect: Stats,
    /// [`Client::connect_with_key`]: connect(2), the server's uid checked (SO_PEERCRED), the
    /// mutual HMAC-SHA256 challenge-response over fresh nonces, until the client holds a
    /// proven connection (the key already read).
    pub auth: Stats,
    /// The calling thread's CPU per connection (its CPU clock), µs: `connect`'s
    /// and `auth`'s.
    pub caller_cpu_us: (f64, f64),
    /// The server's loop thread's CPU per connection (its CPU clock), µs: accepting, the
    /// peer check, the nonce, the HMACs, closing; `connect`'s and `auth`'s.
    pub server_cpu_us: Option<(f64, f64)>,
}

/// A thread's CPU clock once its work so far is counted: the thread is asleep
/// (`/proc/self/task/TID/stat` says `S`: a woken or running thread says `R`, and a
/// connection's `connect(2)` wakes the server before it returns), and the clock, read after
/// that, agrees with a reading 300 µs earlier to within 1 µs. The state is read first: a
/// clock read before it could miss work the thread did and finished in between. A thread
/// left runnable but unscheduled on a loaded machine keeps its clock still, so a still clock
/// alone is not enough. At most 2,000 tries (0.6 s); then the last reading.
fn settled(clock: libc::clockid_t, tid: libc::pid_t) -> Option<f64> {
    let mut last = sys::clock_us(clock)?;
    for _ in 0..2000 {
        std::thread::sleep(std::time::Duration::from_micros(300));
        let asleep = sys::thread_asleep(tid);
        let now = sys::clock_us(clock)?;
        if asleep && now - last < 1.0 {
            return Some(now);
        }
        last = now;
    }
    Some(last)
}

/// The target of a connection's authentication (the median of `auth`), µs.
pub const AUTH_TARGET_US: f64 = 200.0;

/// Measure [`Connection`]: the two rows take turns in blocks of [`BLOCK`] connections,
/// `runs` each; after a block the loop is given a moment to close the last one, so its CPU
/// is the block's.
fn connection_cost(dir: &Path, runs: usize) -> Result<Connection, String> {
    let sock = dir.join("auth.sock");
    let server = Server::bind(Some(&sock), None, ServerOptions::default())
        .map_err(|e| format!("a server at {}: {e}", sock.display()))?;
    let key = Key::read_file(&key_path_for(&sock)).map_err(|e| e.to_string())?;
    let stopper = server.stopper();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("auth-server".into())
        .spawn(move || {
            let _ = tid_tx.send(sys::gettid());
            server.run()
        })
        .map_err(|e| format!("a thread for the server: {e}"))?;
    let tid = tid_rx.recv().map_err(|_| "the server thread ended before it began")?;
    let clock = sys::thread_cpu_clock(&thread);
    // The server's start (binding, its threads) is not a connection's: wait until it sleeps.
    let _ = clock.and_then(|c| settled(c, tid));
    let measured = (|| {
        let mut ns = [Vec::with_capacity(runs), Vec::with_capacity(runs)];
        let mut caller = [0.0; 2];
        let mut served = [0.0; 2];
        for round in 0..runs.div_ceil(BLOCK) {
            for k in 0..2 {
                let i = (round + k) % 2;
                let s0 = clock.and_then(sys::clock_us);
                let c0 = sys::thread_cpu_us();
                for _ in 0..BLOCK.min(runs - ns[i].len()) {
                    let t0 = sys::mono_ns();
                    if i == 0 {
                        let c = UnixStream::connect(&sock).map_err(|e| format!("connect: {e}"))?;
                        ns[i].push(sys::mono_ns() - t0);
                        drop(c);
                    } else {
                        let c = Client::connect_with_key(&sock, &key).map_err(|e| e.to_string())?;
                        ns[i].push(sys::mono_ns() - t0);
                        drop(c);
                    }
                }
                caller[i] += sys::thread_cpu_us() - c0;
                // The block's last connections reach the loop after the client moved on:
                // read its clock once it has stopped moving (its work for this block done).
                let s1 = clock.and_then(|c| settled(c, tid));
                if let (Some(s0), Some(s1)) = (s0, s1) {
                    served[i] += s1 - s0;
                }
            }
        }
        let n = |i: usize| ns[i].len().max(1) as f64;
        let (nc, na) = (n(0), n(1));
        let [connect, auth] = ns;
        Ok::<_, String>(Connection {
            connect: Stats::of(connect).ok_or("no connection measured")?,
            auth: Stats::of(auth).ok_or("no connection measured")?,
            caller_cpu_us: (caller[0] / nc, caller[1] / na),
            server_cpu_us: clock.map(|_| (served[0] / nc, served[1] / na)),
        })
    })();
    stopper.stop();
    joined(measured, thread, "the server")
}

/// The ratios of the JSON file, with their targets (`<=` unless `at_least`).
pub struct Target {
    pub key: &'static str,
    pub target: f64,
    pub at_least: bool,
}

pub const RATIOS: [Target; 5] = [
    Target { key: "server/vfork", target: 1.25, at_least: false },
    Target { key: "server_caller_cpu/vfork_cpu", target: 0.15, at_least: false },
    Target { key: "server_throughput_1thread/vfork_throughput", target: 1.5, at_least: true },
    Target { key: "py_server/py_local", target: 1.10, at_least: false },
    Target { key: "py_server_cpu/py_local_cpu", target: 0.5, at_least: false },
];

/// In `other_ratios`: the caller's CPU and the rate through `Child`s (pidfds handed over and
/// waited for here; the main ratios' status requests leave the pidfds in the server),
/// the caller's CPU with as many
/// requests per message as the API allows (the main ratio keeps 16 per message), and
/// the floors under the first two ratios and the Python CPU ratio, all measured in the same
/// run: with the round trip as it falls (the answering thread is woken where the scheduler
/// puts it) and with the round trip across two CPUs (a server that works on the other core).
/// Then `server/vfork` in its two factors, from the same latency rows: what the server adds
/// to spawnkit's local spawn, and what that local spawn adds to vfork+exec.
pub const FLOORS: [&str; 16] = [
    "server_caller_cpu_children/vfork_cpu",
    "server_throughput_children/vfork_throughput",
    "server_caller_cpu_batch_max/vfork_cpu",
    "floor: (socket round trip + vfork)/vfork",
    "floor: socket round trip cpu/vfork_cpu",
    "floor: (py_local_cpu - its spawn call + socket round trip cpu)/py_local_cpu",
    "floor: (cross-CPU round trip + vfork)/vfork",
    "floor: cross-CPU round trip cpu/vfork_cpu",
    "floor: 16 per message, the kernel's part cpu/vfork_cpu",
    "floor: (py_local_cpu - its spawn call + cross-CPU round trip cpu)/py_local_cpu",
    "latency: server/local",
    "latency: local/vfork",
    "floor: minimal pooled server/vfork",
    "floor: (minimal pooled server + Rust's environment copy)/vfork",
    "floor: minimal pooled server throughput/vfork_throughput",
    "ceiling: two vfork loops throughput/vfork_throughput",
];

/// The Python rows that spawn `runs` times per parent size (bench/python_server.py).
const PY_ROWS: usize = 4;

/// How many spawns the method makes (for the progress bar); Python counts its spawns too.
pub fn planned(runs: usize, tp_iterations: usize, tp_spawns: usize, python: bool) -> usize {
    let per_size =
        WAYS.len() * (runs + runs) + TP_WAYS.len() * tp_spawns * tp_iterations + 8 * runs;
    SIZES.len() * (per_size + if python { PY_ROWS * runs } else { 0 }) + 2 * runs
}

/// The private server and the floor server, started by [`start`] before anything else of
/// the run (the floor server's failure to start only skips its row).
pub struct Early(PrivateServer, Result<sys::FloorServer, String>);

/// Fork the private server now, while this process is small and has one thread.
/// `pool`: its children made ahead of time per spawning thread (`None`: the default).
pub fn start(pool: Option<usize>) -> Result<Early, String> {
    let server =
        PrivateServer::start_with_pool(pool).map_err(|e| format!("private spawn server: {e}"))?;
    Ok(Early(server, sys::FloorServer::start()))
}

fn tiny(prog: &CStr, out_fd: RawFd) -> Command {
    let mut cmd = Command::new(OsStr::from_bytes(prog.to_bytes()));
    cmd.stdout(Stdio::Fd(out_fd));
    cmd
}

fn wait_ok(mut child: spawnkit::Child) -> Result<(), String> {
    let st = child.wait().map_err(|e| e.to_string())?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("the child ended with {st}"))
    }
}

/// One latency sample: request → the child's own clock; the wait is outside the time.
fn latency_once(
    way: Way,
    client: &mut Client,
    floor: Option<&sys::FloorServer>,
    prog: &CStr,
    r: RawFd,
    w: RawFd,
) -> Result<i64, String> {
    let mut buf = [0u8; 16];
    let t0 = sys::mono_ns();
    match way {
        Way::Vfork => {
            let pid = Baseline::VforkExec.call(prog, w)?;
            let read = sys::read_exact(r, &mut buf);
            sys::waited(sys::waitpid(pid)?)?;
            read?;
        }
        Way::Local | Way::Server => {
            let child = if way == Way::Local {
                tiny(prog, w).spawn()
            } else {
                client.spawn(&tiny(prog, w))
            }
            .map_err(|e| e.to_string())?;
            let read = sys::read_exact(r, &mut buf);
            wait_ok(child)?;
            read?;
        }
        Way::TwoVfork | Way::Status => return Err("a throughput row only".into()),
        Way::Floor => {
            let floor = floor.ok_or("no floor server")?;
            let (_, pidfd) = floor.spawn(prog, w)?;
            let read = sys::read_exact(r, &mut buf);
            sys::FloorServer::wait(pidfd);
            read?;
        }
    }
    Ok(sys::timestamp_ns(&buf) - t0)
}

/// The next status request's answer: the child ran and ended well.
fn status_ok(client: &mut Client) -> Result<(), String> {
    let st = client.receive_status().map_err(|e| e.to_string())?.1;
    let st = st.map_err(|e| e.to_string())?;
    if !st.success() {
        return Err(format!("the child ended with {st}"));
    }
    Ok(())
}

/// `n` vfork+exec spawns, each waited for before the next.
fn vfork_loop(prog: &CStr, null: RawFd, n: usize) -> Result<(), String> {
    for _ in 0..n {
        let pid = Baseline::VforkExec.call(prog, null)?;
        sys::waited(sys::waitpid(pid)?)?;
    }
    Ok(())
}

/// `n` spawns and waits with at most [`IN_FLIGHT`] at once where the way allows (the
/// servers), else one at a time: the CPU and throughput work.
fn spawn_wait(
    way: Way,
    client: &mut Client,
    floor: Option<&sys::FloorServer>,
    prog: &CStr,
    null: RawFd,
    n: usize,
) -> Result<(), String> {
    match way {
        Way::Vfork => vfork_loop(prog, null, n)?,
        Way::Local => {
            let mut cmd = tiny(prog, null);
            for _ in 0..n {
                wait_ok(cmd.spawn().map_err(|e| e.to_string())?)?;
            }
        }
        Way::Server => {
            let cmd = tiny(prog, null);
            let mut running = VecDeque::with_capacity(IN_FLIGHT);
            let (mut sent, mut done) = (0, 0);
            while done < n {
                while sent < n && client.in_flight() + running.len() < IN_FLIGHT {
                    client.submit(&cmd).map_err(|e| e.to_string())?;
                    sent += 1;
                }
                if client.in_flight() > 0 {
                    running.push_back(client.receive().map_err(|e| e.to_string())?.1);
                }
                if running.len() >= IN_FLIGHT / 2 || sent == n {
                    if let Some(c) = running.pop_front() {
                        wait_ok(c.map_err(|e| e.to_string())?)?;
                        done += 1;
                    }
                }
            }
        }
        Way::Status => {
            // Spawn and wait through the API made for it: up to IN_FLIGHT unanswered, sent
            // IN_FLIGHT / 2 per message as answers free room (as the CPU row's batches).
            let cmd = tiny(prog, null);
            let (mut sent, mut done) = (0, 0);
            while done < n {
                let room = (IN_FLIGHT - (sent - done)).min(n - sent);
                if room >= IN_FLIGHT / 2 || (room > 0 && sent + room == n) {
                    let batch = std::iter::repeat_n(&cmd, room);
                    client.submit_status_many(batch).map_err(|e| e.to_string())?;
                    sent += room;
                }
                status_ok(client)?;
                done += 1;
            }
        }
        Way::TwoVfork => {
            // Half on a second thread, half here, at once.
            let half = n / 2;
            std::thread::scope(|s| {
                let t = s.spawn(|| vfork_loop(prog, null, half));
                let here = vfork_loop(prog, null, n - half);
                t.join().map_err(|_| "the second vfork loop panicked".to_string())?.and(here)
            })?;
        }
        Way::Floor => {
            // As the server above: its answers come in order, each child waited for by its
            // pidfd (the floor server reaps it).
            let floor = floor.ok_or("no floor server")?;
            let mut running = VecDeque::with_capacity(IN_FLIGHT);
            let (mut sent, mut answered, mut done) = (0, 0, 0);
            while done < n {
                while sent < n && sent - done < IN_FLIGHT {
                    floor.submit(prog, null)?;
                    sent += 1;
                }
                if answered < sent {
                    running.push_back(floor.receive()?.1);
                    answered += 1;
                }
                if running.len() >= IN_FLIGHT / 2 || answered == n {
                    if let Some(pidfd) = running.pop_front() {
                        sys::FloorServer::wait(pidfd);
                        done += 1;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The caller's CPU for `n` spawns of the server: submit [`IN_FLIGHT`], receive them all, wait
/// for their children; the others spawn and wait one at a time.
fn cpu_block(
    way: Way,
    client: &mut Client,
    prog: &CStr,
    null: RawFd,
    n: usize,
) -> Result<f64, String> {
    if way == Way::Server {
        return cpu_batched(client, prog, null, n, IN_FLIGHT);
    }
    let c0 = sys::thread_cpu_us();
    spawn_wait(way, client, None, prog, null, n)?;
    Ok(sys::thread_cpu_us() - c0)
}

/// The caller's CPU for `n` spawns of the server, `batch` requests at a time: submitted in
/// one message (a SpawnMany frame: the batched API), their answers received, their children
/// waited for.
fn cpu_batched(
    client: &mut Client,
    prog: &CStr,
    null: RawFd,
    n: usize,
    batch: usize,
) -> Result<f64, String> {
    let cmd = tiny(prog, null);
    cpu_in_batches(n, batch, |k| {
        client.submit_many(std::iter::repeat_n(&cmd, k)).map_err(|e| e.to_string())?;
        let mut children = Vec::with_capacity(k);
        for _ in 0..k {
            children.push(client.receive().map_err(|e| e.to_string())?.1);
        }
        children.into_iter().try_for_each(|c| wait_ok(c.map_err(|e| e.to_string())?))
    })
}

/// The caller's CPU for `n` spawns and waits of the server's status requests
/// (`Client::submit_status_many`), `batch` per message: sent, then their `batch` answers
/// (how each child ended) received. The server holds the pidfds; this thread holds no fd
/// per child and reads no status from one.
fn cpu_status(
    client: &mut Client,
    prog: &CStr,
    null: RawFd,
    n: usize,
    batch: usize,
) -> Result<f64, String> {
    let cmd = tiny(prog, null);
    cpu_in_batches(n, batch, |k| {
        client.submit_status_many(std::iter::repeat_n(&cmd, k)).map_err(|e| e.to_string())?;
        (0..k).try_for_each(|_| status_ok(client))
    })
}

/// This thread's CPU for `n` spawns made by `one_batch(k)`, `batch` (or the rest) at a time.
fn cpu_in_batches(
    n: usize,
    batch: usize,
    mut one_batch: impl FnMut(usize) -> Result<(), String>,
) -> Result<f64, String> {
    let c0 = sys::thread_cpu_us();
    let mut left = n;
    while left > 0 {
        let k = left.min(batch);
        one_batch(k)?;
        left -= k;
    }
    Ok(sys::thread_cpu_us() - c0)
}

/// The first two CPUs this thread may run on (`None` with one).
fn two_cpus() -> Option<(usize, usize)> {
    let cpus = sys::allowed_cpus();
    Some((*cpus.first()?, *cpus.get(1)?))
}

/// `f` run with this thread held to `cpu` (when given), its own CPUs given back after.
fn pinned<T>(cpu: Option<usize>, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let Some(cpu) = cpu else { return f() };
    let allowed = sys::allowed_cpus();
    sys::pin_thread(&[cpu])?;
    let out = f();
    if !allowed.is_empty() {
        sys::pin_thread(&allowed)?;
    }
    out
}

/// `out`, once the helper thread `what` has ended well (its error otherwise).
fn joined<T, E: std::fmt::Display>(
    out: Result<T, String>,
    thread: std::thread::JoinHandle<Result<(), E>>,
    what: &str,
) -> Result<T, String> {
    match thread.join() {
        Ok(Ok(())) => out,
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what} panicked")),
    }
}

/// The floor: a request-sized message to a thread that answers at once with a reply-sized
/// one, over a socketpair; latency samples (ns) and the caller's CPU per round trip (µs).
/// With `pin` (this thread's CPU, the answering thread's), both threads are held to those
/// CPUs for the run (this thread's own CPUs are given back after).
fn round_trips(runs: usize, pin: Option<(usize, usize)>) -> Result<(Vec<i64>, f64), String> {
    const REQUEST: usize = 512;
    const REPLY: usize = 64;
    let (mut ours, mut theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    let echo = std::thread::spawn(move || {
        if let Some((_, cpu)) = pin {
            sys::pin_thread(&[cpu])?;
        }
        let mut req = [0u8; REQUEST];
        while theirs.read_exact(&mut req).is_ok() {
            if theirs.write_all(&req[..REPLY]).is_err() {
                break;
            }
        }
        Ok::<(), String>(())
    });
    let measured = pinned(pin.map(|(mine, _)| mine), || {
        let req = [7u8; REQUEST];
        let mut reply = [0u8; REPLY];
        // One round trip unmeasured: the answering thread started, and pinned itself.
        ours.write_all(&req).map_err(|e| format!("write: {e}"))?;
        ours.read_exact(&mut reply).map_err(|e| format!("read: {e}"))?;
        let mut ns = Vec::with_capacity(runs);
        let c0 = sys::thread_cpu_us();
        for _ in 0..runs {
            let t0 = sys::mono_ns();
            ours.write_all(&req).map_err(|e| format!("write: {e}"))?;
            ours.read_exact(&mut reply).map_err(|e| format!("read: {e}"))?;
            ns.push(sys::mono_ns() - t0);
        }
        let cpu = (sys::thread_cpu_us() - c0) / runs.max(1) as f64;
        Ok((ns, cpu))
    });
    drop(ours);
    joined(measured, echo, "the answering thread")
}

/// The round trip with both threads held to one CPU, and to two: what this machine charges
/// for a wake-up on the waker's own CPU and for one that crosses to another (on a virtual
/// machine whose idle CPUs halt, an interrupt through the hypervisor). `None` with one CPU.
fn pinned_round_trips(runs: usize) -> Result<Option<Pinned>, String> {
    let Some((a, b)) = two_cpus() else { return Ok(None) };
    let mut same = (Vec::with_capacity(runs), 0.0);
    let mut across = (Vec::with_capacity(runs), 0.0);
    // In turns, as every other row.
    let turn = (runs / 4).max(1);
    let mut done = 0;
    while done < runs {
        let n = turn.min(runs - done);
        for (acc, pin) in [(&mut same, (a, a)), (&mut across, (a, b))] {
            let (ns, cpu) = round_trips(n, Some(pin))?;
            acc.0.extend(ns);
            acc.1 += cpu * n as f64;
        }
        done += n;
    }
    let stats = |(ns, cpu): (Vec<i64>, f64)| {
        Stats::of(ns).map(|s| (s, cpu / runs.max(1) as f64)).ok_or("no round trip measured")
    };
    Ok(Some(Pinned { same: stats(same)?, across: stats(across)?, cpus: (a, b) }))
}

/// The floor under the caller's CPU with [`IN_FLIGHT`] requests per message: what the kernel
/// charges a caller that sends one request-sized message, sleeps until one answer carrying
/// the children's pidfds comes, then reads each child's status from its pidfd and closes it
/// (what a spawn server's client cannot do without, the `Child` API resting on the pidfd),
/// with no library on either side but single system calls (`spawnkit::process`'s pidfd
/// wrappers). A thread held to another CPU (a server working on the
/// other core) answers: it spawns the children (vfork+exec), opens their pidfds, reaps them
/// and sends the pidfds; the caller thread is held to its own CPU. A generous floor: the
/// children have all ended when their pidfds come, so the caller never waits for an exit.
/// The caller's CPU per child, µs (`None` with one CPU, or before Linux 6.15).
fn batch_floor(prog: &CStr, null: RawFd, runs: usize) -> Result<Option<f64>, String> {
    const REQUEST: usize = 2048; // about a SpawnMany frame of 16 tiny commands
    let Some((mine, theirs)) = two_cpus() else { return Ok(None) };
    if !spawnkit::serve::kernel_has_pidfd_exit_info() {
        return Ok(None); // no status from a pidfd: a server's client reads Exit frames there
    }
    let (ours, server) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    let prog = prog.to_owned();
    let helper = std::thread::spawn(move || -> Result<(), String> {
        sys::pin_thread(&[theirs])?;
        let mut server = server;
        let mut req = [0u8; REQUEST];
        while server.read_exact(&mut req).is_ok() {
            let mut pids = Vec::with_capacity(IN_FLIGHT);
            let mut pidfds = Vec::with_capacity(IN_FLIGHT);
            let made = (0..IN_FLIGHT).try_for_each(|_| {
                let pid = Baseline::VforkExec.call(&prog, null)?;
                pids.push(pid);
                pidfds.push(
                    spawnkit::process::pidfd_open(pid).map_err(|e| format!("pidfd_open: {e}"))?,
                );
                Ok::<(), String>(())
            });
            // Every child made is reaped, also when a step failed (no zombie left).
            let mut reaped = Ok(());
            for pid in &pids {
                if let Err(e) = sys::waitpid(*pid).and_then(sys::waited) {
                    reaped = reaped.and(Err(e));
                }
            }
            made.and(reaped)?;
            let fds: Vec<RawFd> = pidfds.iter().map(|fd| fd.as_raw_fd()).collect();
            let reply = [0u8; 16 + 12 * IN_FLIGHT]; // a SpawnedMany frame's size
            sys::send_with_fds(server.as_raw_fd(), &reply, &fds)?;
        }
        Ok(())
    });
    let measured = pinned(Some(mine), || {
        let mut ours = &ours;
        let req = [7u8; REQUEST];
        let mut buf = [0u8; 4096];
        let (mut cpu, mut children) = (0.0, 0usize);
        while children < runs {
            let c0 = sys::thread_cpu_us();
            ours.write_all(&req).map_err(|e| format!("write: {e}"))?;
            let (n, fds) = sys::recv_with_fds(ours.as_raw_fd(), &mut buf, 64)?;
            if n == 0 || fds.len() != IN_FLIGHT {
                return Err(format!("the answer: {n} bytes, {} fds", fds.len()));
            }
            for fd in fds {
                spawnkit::process::pidfd_exit_status(fd.as_fd())
                    .map_err(|e| format!("ioctl PIDFD_GET_INFO: {e}"))?
                    .ok_or("no exit status recorded")?;
            }
            cpu += sys::thread_cpu_us() - c0;
            children += IN_FLIGHT;
        }
        Ok(Some(cpu / children.max(1) as f64))
    });
    drop(ours);
    joined(measured, helper, "the answering thread")
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Measure the Rust rows at every size, then run the Python script.
#[allow(clippy::too_many_arguments)]
pub fn run(
    early: Early,
    runs: usize,
    tp_iterations: usize,
    tp_spawns: usize,
    prog: &CStr,
    null_fd: RawFd,
    dir: &Path,
    python: Option<(&Path, &str)>,
    forkserver_runs: usize,
    progress: &Progress,
) -> Result<ServerResults, String> {
    let Early(mut server, floor_server) = early;
    let mut notes = Vec::new();
    let floor_server = match floor_server {
        Ok(f) => Some(f),
        Err(e) => {
            notes.push(format!("the minimal pooled server (the design floor) did not start: {e}"));
            None
        }
    };
    let lat_ways: Vec<Way> =
        LAT_WAYS.iter().copied().filter(|w| *w != Way::Floor || floor_server.is_some()).collect();
    let server_pid = server.pid();
    let client = server.client();
    let mut lat: Vec<BTreeMap<Size, Stats>> = vec![BTreeMap::new(); lat_ways.len()];
    let mut cpu: Vec<BTreeMap<Size, f64>> = vec![BTreeMap::new(); WAYS.len()];
    let mut cpu_max: BTreeMap<Size, f64> = BTreeMap::new();
    let mut cpu_status_row: BTreeMap<Size, f64> = BTreeMap::new();
    let tp_ways: Vec<Way> =
        TP_WAYS.iter().copied().filter(|w| *w != Way::Floor || floor_server.is_some()).collect();
    let mut tp: Vec<BTreeMap<Size, f64>> = vec![BTreeMap::new(); tp_ways.len()];
    let mut floor = BTreeMap::new();
    let mut floor_pinned = BTreeMap::new();
    let mut floor_batch = BTreeMap::new();
    let mut env_copy = BTreeMap::new();
    for size in SIZES {
        progress.phase(&format!("server, {}", size.label()));
        let ballast = match size {
            Size::Small => None,
            _ => Ballast::new(1 << 30, true)?,
        };
        let (r, w) = sys::pipe()?;
        // (a) latency
        let mut samples: Vec<Vec<i64>> = vec![Vec::with_capacity(runs); lat_ways.len()];
        for round in 0..runs.div_ceil(BLOCK) {
            for k in 0..lat_ways.len() {
                let i = (round + k) % lat_ways.len();
                let way = lat_ways[i];
                for _ in 0..BLOCK.min(runs - samples[i].len()) {
                    let (rd, wr) = (r.as_raw_fd(), w.as_raw_fd());
                    let ns = latency_once(way, client, floor_server.as_ref(), prog, rd, wr)
                        .map_err(|e| format!("server latency, {}: {e}", way.name()))?;
                    samples[i].push(ns);
                    progress.inc(1);
                }
            }
        }
        if floor_server.is_none() {
            progress.inc(runs as u64);
        }
        // what a Rust caller pays to copy its environment (the floor's C client does not)
        let mut ns = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t0 = sys::mono_ns();
            let vars: Vec<(std::ffi::OsString, std::ffi::OsString)> =
                std::hint::black_box(std::env::vars_os().collect());
            drop(vars); // freeing the copy is the caller's too
            ns.push(sys::mono_ns() - t0);
        }
        progress.inc(runs as u64);
        if let Some(s) = Stats::of(ns) {
            env_copy.insert(size, s);
        }
        for (i, ns) in samples.into_iter().enumerate() {
            if let Some(s) = Stats::of(ns) {
                lat[i].insert(size, s);
            }
        }
        // (b) the calling thread's CPU, in turns of 2 × IN_FLIGHT spawns
        //     and the server with BATCH_MAX requests per message, taking the same turns
        let turn = 2 * IN_FLIGHT;
        let mut acc = vec![(0.0, 0usize); WAYS.len()];
        let mut acc_max = (0.0, 0usize);
        let mut acc_status = (0.0, 0usize);
        for round in 0..runs.div_ceil(turn) {
            for k in 0..WAYS.len() {
                let i = (round + k) % WAYS.len();
                let n = turn.min(runs - acc[i].1);
                acc[i].0 += cpu_block(WAYS[i], client, prog, null_fd, n)
                    .map_err(|e| format!("server cpu, {}: {e}", WAYS[i].name()))?;
                acc[i].1 += n;
                progress.inc(n as u64);
            }
            let n = turn.min(runs - acc_status.1);
            if n > 0 {
                acc_status.0 += cpu_status(client, prog, null_fd, n, IN_FLIGHT)
                    .map_err(|e| format!("server cpu, status requests: {e}"))?;
                acc_status.1 += n;
                progress.inc(n as u64);
            }
            // 64 per message every other round: spread over the rounds as the others are.
            let n = BATCH_MAX.min(runs - acc_max.1);
            if n > 0 && round % 2 == 0 {
                acc_max.0 += cpu_batched(client, prog, null_fd, n, BATCH_MAX)
                    .map_err(|e| format!("server cpu, {BATCH_MAX} per message: {e}"))?;
                acc_max.1 += n;
                progress.inc(n as u64);
            }
        }
        for (i, (us, n)) in acc.into_iter().enumerate() {
            if n > 0 {
                cpu[i].insert(size, us / n as f64);
            }
        }
        if acc_max.1 > 0 {
            cpu_max.insert(size, acc_max.0 / acc_max.1 as f64);
        }
        if acc_status.1 > 0 {
            cpu_status_row.insert(size, acc_status.0 / acc_status.1 as f64);
        }
        // (c) throughput from this one thread
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); tp_ways.len()];
        for it in 0..tp_iterations {
            for k in 0..tp_ways.len() {
                let i = (it + k) % tp_ways.len();
                let (way, floor) = (tp_ways[i], floor_server.as_ref());
                let t = Instant::now();
                spawn_wait(way, client, floor, prog, null_fd, tp_spawns)
                    .map_err(|e| format!("server throughput, {}: {e}", way.name()))?;
                rates[i].push(tp_spawns as f64 / t.elapsed().as_secs_f64());
                progress.inc(tp_spawns as u64);
            }
        }
        if floor_server.is_none() {
            progress.inc((tp_spawns * tp_iterations) as u64);
        }
        for (i, v) in rates.into_iter().enumerate() {
            if let Some(m) = median(v) {
                tp[i].insert(size, m);
            }
        }
        // the floor: the socket round trip alone
        let (ns, rtt_cpu) = round_trips(runs, None)?;
        progress.inc(runs as u64);
        if let Some(s) = Stats::of(ns) {
            floor.insert(size, (s, rtt_cpu));
        }
        if let Some(p) = pinned_round_trips(runs)? {
            floor_pinned.insert(size, p);
        }
        progress.inc(2 * runs as u64);
        if let Some(cpu) = batch_floor(prog, null_fd, runs)? {
            floor_batch.insert(size, cpu);
        }
        progress.inc(runs as u64);
        drop(ballast);
    }
    let mut res = ServerResults {
        server_pid,
        latency: lat_ways
            .iter()
            .zip(lat)
            .map(|(w, sizes)| LatencyRow {
                id: w.id().into(),
                name: w.name().into(),
                kind: w.kind().into(),
                sizes,
                skipped: None,
            })
            .collect(),
        cpu: WAYS
            .iter()
            .zip(cpu)
            .map(|(w, values)| ValueRow { id: w.id().into(), name: w.name().into(), values })
            .chain(std::iter::once(ValueRow {
                id: "spawnkit_server_batch_max".into(),
                name: format!("spawnkit private server, {BATCH_MAX} per message"),
                values: cpu_max,
            }))
            .chain(std::iter::once(ValueRow {
                id: "spawnkit_server_status".into(),
                name: format!("spawnkit private server, status, {IN_FLIGHT} per message"),
                values: cpu_status_row,
            }))
            .collect(),
        throughput: tp_ways
            .iter()
            .zip(tp)
            .map(|(w, values)| {
                let name = match w {
                    Way::Server => format!("spawnkit private server, {IN_FLIGHT} in flight"),
                    Way::Local => "spawnkit local, spawn+wait loop".into(),
                    Way::Vfork => "vfork+exec, spawn+wait loop".into(),
                    Way::Floor => format!("floor: minimal pooled C server, {IN_FLIGHT} in flight"),
                    Way::TwoVfork => "ceiling: two vfork+exec loops at once".into(),
                    Way::Status => {
                        format!("spawnkit server, status requests, {IN_FLIGHT} in flight")
                    }
                };
                ValueRow { id: w.id().into(), name, values }
            })
            .collect(),
        tp_spawns,
        floor,
        floor_pinned,
        floor_batch,
        env_copy,
        connection: None,
        forkserver: None,
        python_version: None,
        notes,
    };
    drop(server);
    progress.phase("server, connections");
    match connection_cost(dir, runs) {
        Ok(c) => res.connection = Some(c),
        Err(e) => res.notes.push(format!("server: the connection rows skipped: {e}")),
    }
    progress.inc(2 * runs as u64);
    match python {
        None => res.notes.push("server: Python rows skipped (--no-python)".into()),
        Some((py, tiny_name)) => {
            progress.phase("server, Python rows");
            match run_python(py, dir, tiny_name, runs, forkserver_runs, &mut res) {
                Ok(()) => progress.inc((SIZES.len() * PY_ROWS * runs) as u64),
                Err(e) => res.notes.push(format!("server: Python rows skipped: {e}")),
            }
        }
    }
    Ok(res)
}

fn run_python(
    python: &Path,
    dir: &Path,
    tiny: &str,
    runs: usize,
    forkserver_runs: usize,
    res: &mut ServerResults,
) -> Result<(), String> {
    let script = dir.join("python_server.py");
    std::fs::write(&script, SCRIPT).map_err(|e| format!("{}: {e}", script.display()))?;
    // It imports the latency rows' helpers (`ballast`, `once`) from beside it.
    let rows = dir.join("python_rows.py");
    std::fs::write(&rows, super::python::SCRIPT).map_err(|e| format!("{}: {e}", rows.display()))?;
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg(tiny)
        .arg(runs.to_string())
        .arg(forkserver_runs.to_string())
        .args(SIZES.iter().map(|s| s.key()))
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("");
        return Err(format!("{} failed ({}): {last}", python.display(), out.status));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("bench/python_server.py printed no JSON: {e}"))?;
    res.python_version = v["python"].as_str().map(String::from);
    for r in v["rows"].as_array().into_iter().flatten() {
        let id = r["id"].as_str().unwrap_or("?").to_string();
        let name = r["name"].as_str().unwrap_or("?").to_string();
        let skipped = r["skipped"].as_str().map(String::from);
        if let Some(why) = &skipped {
            res.notes.push(format!("server: {name} skipped: {why}"));
        }
        let mut sizes = BTreeMap::new();
        let mut cpu = BTreeMap::new();
        for (key, s) in r["sizes"].as_object().into_iter().flatten() {
            let Some(size) = Size::from_key(key) else { continue };
            let (Some(min), Some(median), Some(n)) =
                (s["min_us"].as_f64(), s["median_us"].as_f64(), s["runs"].as_u64())
            else {
                continue;
            };
            let mean = s["mean_us"].as_f64().unwrap_or(f64::NAN);
            sizes.insert(
                size,
                Stats { min_us: min, median_us: median, mean_us: mean, runs: n as usize },
            );
            if let Some(c) = s["caller_cpu_us"].as_f64() {
                cpu.insert(size, c);
            }
        }
        let row = LatencyRow {
            id: id.clone(),
            name: name.clone(),
            kind: "python".into(),
            sizes,
            skipped,
        };
        if id == "py_forkserver" {
            res.forkserver = Some(row);
            continue;
        }
        if !cpu.is_empty() {
            res.cpu.push(ValueRow { id, name, values: cpu });
        }
        res.latency.push(row);
    }
    Ok(())
}
