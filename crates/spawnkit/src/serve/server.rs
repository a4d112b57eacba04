//! The spawn server's loop: one thread, one epoll set holding the listening socket, every
//! connection, the pidfd of every running child, and the fds that stop it (a stop pipe, a
//! signalfd, the private server's "alive" pipe). Per request: one recvmsg (often several
//! requests), decode, gate, spawn, one sendmsg with the pidfd; reaping happens when a pidfd
//! becomes readable, off the reply path.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::auth::{self, Key, NONCE_LEN};
use super::frame::{
    self as frames, Expect, FrameError, Header, Inbox, Kind, FLAG_BATCH_REPLY, FLAG_CONN_ENV,
    FLAG_FD_INDEX, FLAG_STATUS, FLAG_WANT_EXIT, MAX_BATCH_REPLY,
};
use super::gate::{gate, Peer};
use super::reaper::{Reaper, Registered, Ticket};
use super::reply;
use crate::error::{quoted, Error, Result};
use crate::spawn::command::Command;
use crate::spawn::options::SigSet;
use crate::sys::sock::{self, CmsgBuf, Epoll};
use crate::sys::{parent, pidfd};
use crate::{ExitStatus, SignalFd};

/// Requests waiting for the spawner threads beyond which the loop spawns them itself
/// instead of reading more.
const QUEUE_LIMIT: usize = 32;

/// Status requests (`FLAG_STATUS`) one connection may have unanswered: their children are
/// the server's to keep until they end (by pid in a server with a reaper, else by pidfd).
/// Beyond it a request is refused (an Error, EAGAIN; the connection goes on). The server as
/// a whole keeps at most half its fd limit (`RLIMIT_NOFILE`, soft) of children, whatever the
/// number of connections: status children, and, in a server that reaps through pidfds,
/// every running child.
pub const MAX_STATUS_IN_FLIGHT: usize = 1024;

/// How long a new connection has to answer the challenge.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request may stay half sent (the rest of its frame not arriving while the
/// server is reading) before the connection is closed, unless `ServerOptions::frame_timeout`
/// says otherwise.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// What a server accepts and when it stops.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Exit after this long with no client connected (children keep running).
    pub idle_exit: Option<Duration>,
    /// Connections beyond this many are closed at once.
    pub max_clients: Option<usize>,
    /// When the server runs as root: the one other uid let in (its children run as it).
    pub allow_uid: Option<u32>,
    /// The server owns its process (`spawnkit serve`, a private server): it reaps every child
    /// of the process itself, by pid, on SIGCHLD (`waitid(P_ALL)` from a signalfd; SIGCHLD
    /// blocked in all its threads), so it keeps no pidfd for a child: a status request's
    /// child is made without one, and a client's pidfd has its child's exit status once the
    /// server has reaped it. Used only where clients can read an exit status from the pidfd
    /// (`PIDFD_INFO_EXIT`, Linux 6.15+); otherwise, and when false, the server reaps each
    /// child through its pidfd, and so holds
    /// one fd per running child: it runs at most half its fd limit (`RLIMIT_NOFILE`, soft)
    /// of children at once, status children included, and answers requests beyond with
    /// EAGAIN. On any kernel, a server with this set also raises its soft fd limit to its
    /// hard one when it starts, as Go's runtime does, and gives each child whose command sets
    /// no fd limit the one it was started with (see `docs/protocol.md`): every child spawned
    /// in that process from then on, the process's own local spawns too, which is why this is
    /// only for a server that owns its process.
    pub owns_process: bool,
    /// Close a connection whose request stays half sent this long (default
    /// [`FRAME_TIMEOUT`]): a client cannot hold a frame's worth of the server's memory and
    /// its fds by stalling mid-frame.
    pub frame_timeout: Option<Duration>,
    /// Kill a child that has not reached execve this long after its clone (default
    /// [`EXEC_TIMEOUT`](super::EXEC_TIMEOUT)): a client that stops its child before the exec
    /// cannot hold a spawning thread of the server.
    pub exec_timeout: Option<Duration>,
    /// Threads that spawn (at least 1). With more, a server with a reaper hands every
    /// decoded request to a spawner thread (see `hand_off`), so several clone+exec run at once
    /// and the loop stays free to read; the loop itself helps when two or more are queued.
    pub spawn_threads: usize,
    /// Children made ahead of time per spawning thread (the loop thread and each spawner
    /// thread), woken by a request that came alone in its frame instead of cloned for it
    /// (0: none; the requests of a SpawnMany of several clone). The threads refill their
    /// pools when no request waits. Requests whose clone itself must carry something
    /// (namespaces, a cgroup, id maps written from outside) clone as usual. Default:
    /// [`DEFAULT_POOL`] for a server that owns its process (`owns_process`: `spawnkit
    /// serve`, a private server), none for a server on a thread of a bigger program. A
    /// parked child is a process of its own that copied the server's state when it was
    /// made: what the program changes later for its threads only (glibc's `setuid`, a
    /// seccomp filter, a capability drop) or what is changed from outside for the server's
    /// pid (`prlimit`, a cgroup move, `choom`) does not reach it, so up to this many
    /// requests per thread would still run with the old state.
    pub pool: Option<usize>,
}

/// Pool children per spawning thread unless `ServerOptions::pool` says otherwise.
pub const DEFAULT_POOL: usize = 2;

/// One spawning thread per CPU this process may run on.
pub fn default_spawn_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Whether this kernel records a reaped process's exit status for its pidfds
/// (`PIDFD_INFO_EXIT`, Linux 6.15), from /proc/sys/kernel/osrelease: read once per process
/// (every connection asks; the file costs three system calls). An atomic, not a `OnceLock`:
/// a private server forked while another thread filled a lock in would wait on it for good.
pub fn kernel_has_pidfd_exit_info() -> bool {
    use std::sync::atomic::AtomicU8;
    static HAS: AtomicU8 = AtomicU8::new(0); // 0: not read yet, 1: no, 2: yes
    match HAS.load(Ordering::Relaxed) {
        1 => return false,
        2 => return true,
        _ => {}
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut nums =
        release.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
    let has = matches!((nums.next(), nums.next()), (Some(major), Some(minor)) if (major, minor) >= (6, 15));
    HAS.store(if has { 2 } else { 1 }, Ordering::Relaxed);
    has
}

/// Ends a running [`Server::run`] from another thread (or a signal handler's thread).
#[derive(Debug, Clone)]
pub struct Stopper(Arc<OwnedFd>);

impl Stopper {
    /// Ask the server to stop: it closes its socket and returns; children keep running.
    pub fn stop(&self) {
        parent::write_all(self.0.as_raw_fd(), b"x");
    }
}

/// What a [`Server`] has read so far, readable from another thread while it runs
/// ([`Server::counts`]): for a test or a monitor. Counted as the frames are taken, before
/// their requests are spawned.
#[derive(Debug)]
pub struct Counts {
    wakes: AtomicU64,
}

impl Counts {
    /// Wake frames taken (well-formed ones, from authenticated clients), whether or not the
    /// polling budget let them start a window.
    pub fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }
}

const T_LISTENER: u64 = 1;
const T_STOP: u64 = 2;
const T_SIGNALS: u64 = 3;
const T_ALIVE: u64 = 4;
const T_WAKE: u64 = 5;
const T_SIGCHLD: u64 = 6;
const T_CONN: u64 = 1 << 60;
const T_CHILD: u64 = 2 << 60;
const KIND_MASK: u64 = 0xF << 60;

/// How long a Wake frame keeps the loop polling for the request it announces.
const WAKE_WINDOW: Duration = Duration::from_micros(100);
/// The most the loop polls for Wake frames in each [`WAKE_EPOCH`]: a fifth of a CPU, however
/// many Wake frames come (a lone request ends its window in a few µs, so a client spawning
/// one child after another stays far inside it).
const WAKE_BUDGET: Duration = Duration::from_millis(2);
const WAKE_EPOCH: Duration = Duration::from_millis(10);

/// The loop's polling after Wake frames: a window of [`WAKE_WINDOW`] from the last Wake,
/// ended early by a request of the connection that sent it, and all windows together at most
/// [`WAKE_BUDGET`] per [`WAKE_EPOCH`] (a Wake beyond it is ignored: the request comes to a
/// sleeping loop, as without the Wake).
#[derive(Default)]
struct Awake {
    /// Poll until then, for this connection (index, generation).
    until: Option<(Instant, (usize, u32))>,
    /// When the current stretch of polling began (accounted when it ends or is extended).
    since: Option<Instant>,
    epoch: Option<Instant>,
    spent: Duration,
}

impl Awake {
    fn account(&mut self, now: Instant) {
        if let Some(since) = self.since.take() {
            self.spent += now.saturating_duration_since(since);
        }
    }

    fn wake(&mut self, now: Instant, conn: (usize, u32)) {
        if self.epoch.is_none_or(|e| now.saturating_duration_since(e) >= WAKE_EPOCH) {
            self.epoch = Some(now);
            self.spent = Duration::ZERO;
        }
        self.account(now);
        if self.spent >= WAKE_BUDGET {
            return;
        }
        self.since = Some(now);
        self.until = Some((now + WAKE_WINDOW, conn));
    }

    /// A request of `conn` was read: its Wake's window, if any, ends.
    fn request_from(&mut self, now: Instant, conn: (usize, u32)) {
        if self.until.is_some_and(|(_, c)| c == conn) {
            self.account(now);
            self.until = None;
        }
    }

    /// Whether the loop polls now (an expired window ends here).
    fn polling(&mut self, now: Instant) -> bool {
        match self.until {
            Some((t, _)) if now < t => true,
            Some(_) => {
                self.account(now);
                self.until = None;
                false
            }
            None => false,
        }
    }
}

const EXPECT_ANSWER: Expect =
    Expect { kinds: &[Kind::Answer], max_body: NONCE_LEN + auth::MAC_LEN, fds: false };
const EXPECT_REQUEST: Expect = Expect {
    kinds: &[Kind::Spawn, Kind::SpawnMany, Kind::Env, Kind::Wake],
    max_body: super::frame::MAX_BODY,
    fds: true,
};

enum State {
    /// Sent this nonce; waiting for the answer until the deadline.
    Challenged([u8; NONCE_LEN], Instant),
    Ready,
}

struct Out {
    bytes: Vec<u8>,
    sent: usize,
    /// Pidfds to pass with the first byte (duplicates: the child record keeps its own).
    fds: Vec<OwnedFd>,
}

/// The requests of one SpawnMany frame whose client takes batched answers: the children
/// started wait here until every request of the frame has finished (or 64 wait), then go
/// out as one SpawnedMany. Nothing else is ever held: a lone Spawn, an Error, and the
/// requests of other frames are answered as they finish.
struct FrameBatch {
    /// (requests of the frame not finished, answers waiting)
    state: Mutex<(usize, Vec<Started>)>,
}

/// A started child's answer: request id, pid, pidfd.
type Started = (u64, i32, OwnedFd);

impl FrameBatch {
    fn new(n: usize) -> Arc<FrameBatch> {
        Arc::new(FrameBatch { state: Mutex::new((n, Vec::new())) })
    }
}

/// The sending side of a connection, shared with the spawner threads: replies go out in
/// whole frames under the lock, queued when the socket is full.
struct ConnTx {
    sock: UnixStream,
    out: Mutex<VecDeque<Out>>,
    /// Status requests taken and not answered yet (at most [`MAX_STATUS_IN_FLIGHT`]; an
    /// answer held with its frame's others counts until it is sent).
    statuses: AtomicUsize,
    /// The loop closed the connection: no child of it is watched from now on.
    closed: AtomicBool,
}

impl ConnTx {
    /// `n` status answers sent (never below 0).
    fn answered(&self, n: usize) {
        let _ = self
            .statuses
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(n)));
    }
}

impl ConnTx {
    fn queue(&self) -> MutexGuard<'_, VecDeque<Out>> {
        self.out.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Send now if nothing waits before it, else queue it with the fds it passes (which it
    /// owns: the caller keeps no pidfd it must still send). True when something waits in the
    /// queue afterwards (the loop must watch for EPOLLOUT).
    fn send(&self, parts: &[&[u8]], fds: Vec<OwnedFd>) -> bool {
        let mut out = self.queue();
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut sent = 0;
        if out.is_empty() {
            let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
            match sock::send_with_fds(self.sock.as_fd(), parts, &raw, true) {
                Ok(n) if n == total => return false,
                Ok(n) => sent = n,
                Err(_) => {}
            }
        }
        let bytes = parts.concat();
        // Once a byte is out, the fds went with it.
        let fds = if sent > 0 { Vec::new() } else { fds };
        out.push_back(Out { bytes, sent, fds });
        true
    }

    /// A handed-off request finished: its answer goes out now, or, for a request of a
    /// SpawnMany frame whose client takes batched answers, when the frame's last request
    /// finishes (or 64 answers wait), all of them in one message: a client that sent many
    /// requests at once reads their answers with one `recvmsg`. True when a reply had to
    /// queue (as [`send`](ConnTx::send)).
    fn finished(
        &self,
        id: u64,
        batch: Option<&FrameBatch>,
        result: Result<(i32, OwnedFd)>,
    ) -> bool {
        let mut queued = false;
        let mut flush = Vec::new();
        match (result, batch) {
            (Ok((pid, pidfd)), Some(b)) => {
                let mut st = b.state.lock().unwrap_or_else(|e| e.into_inner());
                st.0 = st.0.saturating_sub(1);
                st.1.push((id, pid, pidfd));
                if st.0 == 0 || st.1.len() >= MAX_BATCH_REPLY {
                    flush = std::mem::take(&mut st.1);
                }
            }
            (Ok((pid, pidfd)), None) => {
                let h = Header { len: 4, kind: Kind::Spawned, flags: 0, nfds: 1, id };
                queued |= self.send(&[&h.encode(), &pid.to_le_bytes()], vec![pidfd]);
            }
            (Err(e), b) => {
                queued |= self.send(&[&error_frame(id, &e)], Vec::new());
                if let Some(b) = b {
                    let mut st = b.state.lock().unwrap_or_else(|e| e.into_inner());
                    st.0 = st.0.saturating_sub(1);
                    if st.0 == 0 {
                        flush = std::mem::take(&mut st.1);
                    }
                }
            }
        }
        queued | self.send_spawned(flush)
    }

    /// Answers for started children: a Spawned frame for one, a SpawnedMany for several.
    fn send_spawned(&self, spawned: Vec<Started>) -> bool {
        if spawned.is_empty() {
            return false;
        }
        if spawned.len() == 1 {
            let Some((id, pid, pidfd)) = spawned.into_iter().next() else { return false };
            let h = Header { len: 4, kind: Kind::Spawned, flags: 0, nfds: 1, id };
            return self.send(&[&h.encode(), &pid.to_le_bytes()], vec![pidfd]);
        }
        let mut body = Vec::with_capacity(spawned.len() * frames::SPAWNED_ENTRY);
        for (id, pid, _) in &spawned {
            body.extend_from_slice(&id.to_le_bytes());
            body.extend_from_slice(&pid.to_le_bytes());
        }
        let h = Header {
            len: body.len() as u32,
            kind: Kind::SpawnedMany,
            flags: 0,
            nfds: spawned.len() as u8,
            id: spawned[0].0,
        };
        let fds: Vec<OwnedFd> = spawned.into_iter().map(|(_, _, f)| f).collect();
        self.send(&[&h.encode(), &body], fds)
    }

    /// Send what is queued; false if the connection broke.
    fn flush(&self) -> bool {
        let mut out = self.queue();
        while let Some(o) = out.front_mut() {
            let fds: Vec<RawFd> = o.fds.iter().map(|f| f.as_raw_fd()).collect();
            match sock::send_with_fds(self.sock.as_fd(), &[&o.bytes[o.sent..]], &fds, true) {
                Ok(n) => {
                    o.sent += n;
                    o.fds.clear();
                    if o.sent >= o.bytes.len() {
                        out.pop_front();
                    }
                }
                Err(libc::EAGAIN) => return true,
                Err(_) => return false,
            }
        }
        true
    }

    fn idle(&self) -> bool {
        self.queue().is_empty()
    }

    /// Bytes of replies waiting to go out.
    fn pending_bytes(&self) -> usize {
        self.queue().iter().map(|o| o.bytes.len() - o.sent).sum()
    }
}

/// A decoded request handed to a spawner thread.
struct Job {
    tx: Arc<ConnTx>,
    token: u64,
    peer: Peer,
    id: u64,
    /// The SpawnMany frame it came in, when its client takes batched answers.
    batch: Option<Arc<FrameBatch>>,
    /// A status request: answered by an Exit frame when the child ends.
    status: Option<StatusReq>,
    /// The only request of its frame: a child parked in the pool may serve it.
    alone: bool,
    cmd: Command,
}

/// Requests waiting for a spawner thread (servers with a reaper only: a spawner then keeps no
/// pidfd to hand back to the loop).
#[derive(Default)]
struct Jobs {
    /// (waiting requests, stop)
    queue: Mutex<(VecDeque<Job>, bool)>,
    ready: std::sync::Condvar,
}

impl Jobs {
    fn lock(&self) -> MutexGuard<'_, (VecDeque<Job>, bool)> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Conn {
    tx: Arc<ConnTx>,
    generation: u32,
    peer: Peer,
    state: State,
    inbox: Inbox,
    /// EPOLLOUT is in the interest set (replies are waiting).
    writing: bool,
    /// Since when the frame now arriving has been half received (while nothing of ours
    /// waited to go out; restarted whenever a frame completes or our replies drain).
    partial_since: Option<Instant>,
    /// Frames taken from this connection so far.
    frames_done: u64,
    /// Since when our replies have waited for the client to read, with no byte of them
    /// taken (restarted whenever the client takes some).
    out_since: Option<Instant>,
    /// The environment of the last Env frame: the base of the commands of requests flagged
    /// `FLAG_CONN_ENV` that carry none (one per connection, within the frame limit).
    env: Option<ConnEnv>,
}

/// An environment: (name, value) pairs in order, shared by the commands that use it.
type Env = Arc<[(OsString, OsString)]>;

/// A connection's environment (its last Env frame), and the size of that frame's body: what
/// each entry of a SpawnMany that takes it counts toward the frame's budget, as if it had
/// carried the environment itself.
#[derive(Clone)]
struct ConnEnv {
    vars: Env,
    wire_len: usize,
}

/// The most memory one connection's environment may hold once decoded (each pair's 48
/// bytes and its strings' heap blocks): twice a frame. An environment that can be exec'd
/// stays far below it (the kernel takes at most ~2 MiB of strings, 8 bytes per pointer
/// beside them); without the bound, an Env frame of 2 million empty pairs would keep ~100 MB
/// for the connection's life.
const MAX_ENV_FOOTPRINT: usize = 2 * super::frame::MAX_BODY;

impl ConnEnv {
    /// An Env frame's environment (`no_fds`: none was passed with it), within
    /// [`MAX_ENV_FOOTPRINT`].
    fn decode(body: &[u8], no_fds: bool) -> Result<ConnEnv> {
        if !no_fds {
            return Err(Error::invalid("decode", "Env", "an Env frame passes no fds"));
        }
        let vars = crate::spawn::wire::env_from_wire(body)?;
        if env_footprint(&vars) > MAX_ENV_FOOTPRINT {
            return Err(Error::invalid(
                "decode",
                "Env",
                "an environment over the protocol's limits",
            ));
        }
        Ok(ConnEnv { vars, wire_len: body.len() })
    }
}

/// What `vars` holds in memory, by the allocator's measure (a heap block is at least 32
/// bytes).
fn env_footprint(vars: &[(OsString, OsString)]) -> usize {
    let pair = std::mem::size_of::<(OsString, OsString)>();
    let block = |s: &OsString| if s.is_empty() { 0 } else { s.len().max(32) };
    vars.iter().map(|(k, v)| pair + block(k) + block(v)).sum()
}

struct ChildRec {
    pidfd: OwnedFd,
    pid: i32,
    conn: (usize, u32),
    id: u64,
    want_exit: bool,
    /// The child of a status request: its Exit frame is the request's answer.
    status: Option<StatusReq>,
    /// Since when its pidfd has said "ended" with the child not reapable yet (a traced
    /// zombie).
    late: Option<Instant>,
    /// Not looked at again before this: a traced zombie's back-off (see [`late_look_every`]).
    due: Option<Instant>,
    /// Not in the epoll set (no room there): looked at every millisecond instead.
    polled: bool,
}

/// How often a zombie the server cannot reap yet (traced) is looked at, `age` after it was
/// found: every millisecond at first, then less and less often, at least every 100 ms (the
/// longest it waits to be reaped once its tracer lets it go).
fn late_look_every(age: Duration) -> Duration {
    (age / 8).clamp(Duration::from_millis(1), Duration::from_millis(100))
}

impl ChildRec {
    /// Looked at from the loop's late list rather than by epoll.
    fn on_late_list(&self) -> bool {
        self.late.is_some() || self.polled
    }
}

/// The children the server keeps: in a server with a reaper, every child of the process by
/// pid (`reaper`; the spawner threads register those they start); else each child's pidfd,
/// watched in the epoll set (token `T_CHILD | fd`), added and taken out by the loop thread
/// alone. And the count of children kept, against the bound on it.
struct Watched {
    epoll: Arc<Epoll>,
    map: Mutex<HashMap<RawFd, ChildRec>>,
    /// Requests admitted and not yet over (queued, spawning, or their child in the map):
    /// the pidfds the server holds, or is about to. Status requests, and, when the server
    /// reaps, every request (each child's pidfd is kept until the child ends).
    held: AtomicUsize,
    /// The most it admits at once: half the server's fd limit.
    held_max: usize,
    /// Children a spawner thread could not put in the epoll set: for the loop's late list.
    unwatched: Mutex<Vec<RawFd>>,
    /// Every child by pid, when the server owns its process and reaps them all itself on
    /// SIGCHLD (`ServerOptions::owns_process`, on a kernel that records exit statuses in
    /// pidfds): status children are known there, not by a pidfd. Else every child's pidfd
    /// is in the map above, reaped through it.
    reaper: Option<Reaper<StatusChild>>,
}

/// What the end of a status request's child answers, in a server with a [`Reaper`].
struct StatusChild {
    conn: (usize, u32),
    id: u64,
    sreq: StatusReq,
}

/// What became of a child given to [`Watched::add`].
enum Added {
    /// In the epoll set.
    Watched,
    /// No room in the epoll set: on the list the loop looks at every millisecond.
    Polled,
}

impl Watched {
    fn new(epoll: Arc<Epoll>, has_reaper: bool) -> Watched {
        let soft = crate::sys::this_process::getrlimit(libc::RLIMIT_NOFILE).map_or(1024, |l| l.0);
        let held_max = (soft / 2).clamp(16, 1 << 20) as usize;
        Watched {
            epoll,
            map: Mutex::new(HashMap::new()),
            held: AtomicUsize::new(0),
            held_max,
            unwatched: Mutex::new(Vec::new()),
            reaper: has_reaper.then(Reaper::new),
        }
    }

    /// A spawn begins (before its clone): its ticket with the reaper, in a server that has
    /// one.
    fn ticket(&self) -> Option<Ticket<'_, StatusChild>> {
        self.reaper.as_ref().map(Reaper::ticket)
    }

    /// Register the child `pid` of the spawn of `ticket` with the reaper (a server that has
    /// one): a status request's (`status`) is answered when it is reaped, or now if it has
    /// been already. True when the answer had to queue (the loop must watch for EPOLLOUT).
    fn register(
        &self,
        ticket: Option<Ticket<'_, StatusChild>>,
        pid: i32,
        status: Option<StatusChild>,
        tx: &ConnTx,
    ) -> bool {
        let Some(ticket) = ticket else { return false };
        // Its connection gone (`Looper::close` sets `closed` before it forgets those
        // registered earlier, under the reaper's lock): reaped with no answer.
        let gone = || tx.closed.load(Ordering::Relaxed);
        match ticket.register(pid, status, gone) {
            Registered::Kept | Registered::Ended(None, _) => false,
            Registered::Dropped(_) => {
                self.release();
                false
            }
            Registered::Ended(Some(sc), ended) => {
                self.release();
                if tx.closed.load(Ordering::Relaxed) {
                    return false;
                }
                let frame = exit_frame(sc.id, pid, ExitStatus::from(ended));
                status_answered(tx, &sc.sreq, frame)
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RawFd, ChildRec>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admit `n` requests whose children's pidfds the server keeps, if it may hold that many
    /// more.
    fn admit(&self, n: usize) -> bool {
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                (v.saturating_add(n) <= self.held_max).then_some(v + n)
            })
            .is_ok()
    }

    /// Admit as many of `n` requests as the server may still hold (the first ones): how many.
    fn admit_up_to(&self, n: usize) -> usize {
        let mut took = 0;
        let _ = self.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            took = n.min(self.held_max.saturating_sub(v));
            Some(v + took)
        });
        took
    }

    /// Whether the server keeps the pidfd of a request's child until it ends (so the
    /// request must be admitted first): a status request's, and every one when the server
    /// reaps.
    fn holds(&self, status: bool) -> bool {
        status || self.reaper.is_none()
    }

    /// An admitted request is over (its child forgotten, or none was kept).
    fn release(&self) {
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(1)));
    }

    /// Watch `rec`'s pidfd (a server without a reaper): in the epoll set, or, with no room
    /// there (ENOMEM, ENOSPC), on the loop's late list (`polled`, through `unwatched`).
    fn add(&self, mut rec: ChildRec) -> Added {
        let raw = rec.pidfd.as_raw_fd();
        let mut map = self.lock();
        // In the map before the epoll set (both under the lock): the loop finds it as soon as
        // it is readable.
        let watched = self.epoll.add(raw, libc::EPOLLIN as u32, T_CHILD | raw as u64).is_ok();
        rec.polled = !watched;
        map.insert(raw, rec);
        if watched {
            return Added::Watched;
        }
        self.unwatched.lock().unwrap_or_else(|e| e.into_inner()).push(raw);
        Added::Polled
    }

    /// Forget the child of `raw` (out of the epoll set first, so its number is free of it
    /// before the pidfd closes).
    fn remove(&self, map: &mut HashMap<RawFd, ChildRec>, raw: RawFd) -> Option<ChildRec> {
        let rec = map.remove(&raw)?;
        let _ = self.epoll.delete(raw);
        // Every child in the map was admitted.
        if self.holds(rec.status.is_some()) {
            self.release();
        }
        Some(rec)
    }
}

/// A status request (`FLAG_STATUS`): where its answer (an Exit frame, or an Error) goes.
/// Alone, it is sent as soon as it comes; a request of a SpawnMany frame flagged
/// `FLAG_BATCH_REPLY` shares its frame's [`StatusBatch`].
#[derive(Clone, Default)]
struct StatusReq(Option<Arc<StatusBatch>>);

/// The status requests of one SpawnMany frame flagged `FLAG_BATCH_REPLY`: their answers
/// wait here until every request of the frame has one, then go out as one message.
struct StatusBatch {
    /// (requests of the frame not answered, (the answers' frames so far, how many))
    state: Mutex<(usize, (Vec<u8>, usize))>,
}

impl StatusReq {
    /// This request's answer `frame`: what to send now and how many answers it holds
    /// (`None`: held with its frame's).
    fn answer(&self, frame: Vec<u8>) -> Option<(Vec<u8>, usize)> {
        let Some(b) = &self.0 else { return Some((frame, 1)) };
        let mut st = b.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0 = st.0.saturating_sub(1);
        st.1 .0.extend_from_slice(&frame);
        st.1 .1 += 1;
        (st.0 == 0).then(|| std::mem::take(&mut st.1))
    }
}

/// An Error frame answering request `id`.
fn error_frame(id: u64, e: &Error) -> Vec<u8> {
    let mut body = Vec::new();
    reply::encode_error(e, &mut body);
    let h = Header { len: body.len() as u32, kind: Kind::Error, flags: 0, nfds: 0, id };
    let mut out = h.encode().to_vec();
    out.extend_from_slice(&body);
    out
}

/// An Exit frame: `pid` ended with `status`; `id` the request that started it.
fn exit_frame(id: u64, pid: i32, status: ExitStatus) -> Vec<u8> {
    let body = reply::encode_exit(pid, status);
    let h = Header { len: body.len() as u32, kind: Kind::Exit, flags: 0, nfds: 0, id };
    let mut out = h.encode().to_vec();
    out.extend_from_slice(&body);
    out
}

/// A spawn server (see docs/protocol.md). Build it with [`Server::bind`] (the `spawnkit serve`
/// way: a key file and a socket in a private directory) or [`Server::new`], then
/// [`run`](Server::run) it on a thread of its own or in a process of its own. The socket and
/// key files `bind` made are removed when the server stops, or when it is dropped without
/// running (so a process that binds and then forks must drop it in one of them only).
pub struct Server {
    /// The socket and key files this server made, removed when it stops (or is dropped
    /// without running). Declared before `listener`: fields drop in order, so they go while
    /// the socket still listens (no other server can have taken the path by then).
    made: Made,
    key: Key,
    opts: ServerOptions,
    listener: Option<UnixListener>,
    stop_r: OwnedFd,
    stop_w: Arc<OwnedFd>,
    signals: Option<SignalFd>,
    alive: Option<OwnedFd>,
    initial: Vec<UnixStream>,
    euid: u32,
    counts: Arc<Counts>,
}

/// Refuse a path root is to create things at for another user (`--allow-uid`) unless every
/// directory on the way is a real directory (no symlink) of root's that no one else may
/// write (a sticky one such as /tmp excepted: there others cannot rename root's entries).
fn root_only_path(path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_err(|e| Error::os("getcwd", "", errno_of(&e)))?.join(path)
    };
    for dir in abs.ancestors().skip(1) {
        let meta = std::fs::symlink_metadata(dir)
            .map_err(|e| Error::os("lstat", quoted(dir), errno_of(&e)))?;
        let sticky = meta.mode() & 0o1000 != 0;
        if !meta.is_dir() || meta.uid() != 0 || (meta.mode() & 0o022 != 0 && !sticky) {
            return Err(Error::invalid(
                "bind",
                quoted(dir),
                "with --allow-uid every directory of the socket's path must be root's and \
                 writable by root alone (for example /run/spawnkit, mode 0755)",
            ));
        }
    }
    Ok(())
}

/// The default socket directory: `$XDG_RUNTIME_DIR/spawnkit/`, else `/tmp/spawnkit-UID/`.
pub fn default_socket_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("spawnkit"),
        None => PathBuf::from(format!("/tmp/spawnkit-{}", parent::geteuid())),
    }
}

/// The default socket: `server.sock` in [`default_socket_dir`].
pub fn default_socket_path() -> PathBuf {
    default_socket_dir().join("server.sock")
}

/// The key file of a socket: `SOCKET.key`.
pub fn key_path_for(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_owned();
    s.push(".key");
    PathBuf::from(s)
}

/// Create `dir` mode 0700 if missing; refuse it if it is not a directory of ours that only
/// we can open.
pub fn ensure_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::os("mkdir", quoted(dir), e.raw_os_error().unwrap_or(0))),
    }
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| Error::os("stat", quoted(dir), e.raw_os_error().unwrap_or(0)))?;
    if !meta.is_dir() || meta.uid() != parent::geteuid() || meta.mode() & 0o077 != 0 {
        return Err(Error::invalid(
            "socket directory",
            quoted(dir),
            "not a directory of ours that only we can open (mode 0700)",
        ));
    }
    Ok(())
}

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl Server {
    /// A server on `listener` (and on nothing else until [`run`](Server::run)).
    pub fn new(
        listener: Option<UnixListener>,
        key: Key,
        mut opts: ServerOptions,
    ) -> Result<Server> {
        // Waits past any meaning are cut to one that a clock reading can be added to (a
        // larger one would overflow the Instant it is added to).
        for t in [&mut opts.idle_exit, &mut opts.frame_timeout, &mut opts.exec_timeout] {
            *t = t.map(|d| d.min(MAX_WAIT));
        }
        let (stop_r, stop_w) = parent::pipe().map_err(|e| Error::os("pipe2", "stop", e))?;
        Ok(Server {
            key,
            opts,
            listener,
            made: Made::default(),
            stop_r,
            stop_w: Arc::new(stop_w),
            signals: None,
            alive: None,
            initial: Vec::new(),
            euid: parent::geteuid(),
            counts: Arc::new(Counts { wakes: AtomicU64::new(0) }),
        })
    }

    /// The `spawnkit serve` setup: a fresh key written (0600) to `key_file` (default
    /// `SOCKET.key`), then a socket bound at `socket` (default [`default_socket_path`], its
    /// directory made private first) and listening. A stale socket file is replaced; a live
    /// server's is refused. With `allow_uid` the key file and socket are handed to that uid.
    pub fn bind(
        socket: Option<&Path>,
        key_file: Option<&Path>,
        opts: ServerOptions,
    ) -> Result<Server> {
        let socket = match socket {
            Some(s) => s.to_path_buf(),
            None => {
                ensure_private_dir(&default_socket_dir())?;
                default_socket_path()
            }
        };
        let key_file = key_file.map(Path::to_path_buf).unwrap_or_else(|| key_path_for(&socket));
        if key_file == socket {
            return Err(Error::invalid(
                "bind",
                quoted(&socket),
                "the key file and the socket are the same path",
            ));
        }
        check_socket_path("bind", &socket)?;
        if let Ok(meta) = std::fs::symlink_metadata(&socket) {
            if !meta.file_type().is_socket() {
                return Err(Error::invalid("bind", quoted(&socket), "exists and is not a socket"));
            }
            if UnixStream::connect(&socket).is_ok() {
                return Err(Error::invalid("bind", quoted(&socket), "a server is listening there"));
            }
            std::fs::remove_file(&socket)
                .map_err(|e| Error::os("unlink", quoted(&socket), errno_of(&e)))?;
        }
        if opts.allow_uid.is_some() {
            // Root works on these paths for another user: no one but root may be able to
            // change what they resolve to.
            for p in [&socket, &key_file] {
                root_only_path(p)?;
            }
        }
        // What is made is removed again if the rest fails, and, once this returns, when the
        // server stops or is dropped: each file only while it is still the one made here.
        let mut made = Made::default();
        // The key goes to a file of its own first, and takes the key file's name only once
        // the socket is bound: a server that loses a race for the socket (EADDRINUSE) never
        // replaced the winner's key.
        Key::check_replaceable(&key_file)?;
        let key = Key::generate()?;
        let fresh = temp_beside(&key_file);
        key.write_file_for(&fresh, opts.allow_uid)?;
        made.add(&fresh);
        let listener = UnixListener::bind(&socket)
            .map_err(|e| Error::os("bind", quoted(&socket), errno_of(&e)))?;
        made.add(&socket);
        if let Some(uid) = opts.allow_uid {
            // lchown: the socket itself, never what a symlink put in its place points to.
            std::os::unix::fs::lchown(&socket, Some(uid), None)
                .map_err(|e| Error::os("chown", quoted(&socket), errno_of(&e)))?;
        }
        std::fs::rename(&fresh, &key_file)
            .map_err(|e| Error::os("rename", quoted(&key_file), errno_of(&e)))?;
        made.renamed(&fresh, &key_file);
        let mut server = Server::new(Some(listener), key, opts)?;
        server.made = made;
        Ok(server)
    }

    /// The socket path this server listens on, if it has one.
    pub fn socket_path(&self) -> Option<PathBuf> {
        self.listener.as_ref()?.local_addr().ok()?.as_pathname().map(Path::to_path_buf)
    }

    /// What the server has read so far, readable from another thread while it runs.
    pub fn counts(&self) -> Arc<Counts> {
        Arc::clone(&self.counts)
    }

    /// A handle that stops [`run`](Server::run) from another thread.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.stop_w.clone())
    }

    /// Stop when one of these signals arrives (the CLI blocks SIGTERM, SIGINT, SIGHUP).
    pub fn stop_on(&mut self, signals: SignalFd) {
        self.signals = Some(signals);
    }

    /// Stop when this fd reports EOF or an error (the private server's "alive" pipe).
    pub(crate) fn stop_on_eof(&mut self, fd: OwnedFd) {
        self.alive = Some(fd);
    }

    /// Serve this already connected stream too (the private server's socketpair end).
    pub fn add_connection(&mut self, stream: UnixStream) {
        self.initial.push(stream);
    }

    /// Serve until stopped (the stopper, a signal, the alive pipe, `idle_exit`, or, for a
    /// server without a listener, its last connection closing). Children keep running.
    pub fn run(mut self) -> Result<()> {
        // A server that owns its process (`owns_process`: `spawnkit serve`, a private
        // server) blocks SIGCHLD in all its threads (the watchdog and spawner threads inherit
        // this thread's mask): its loop reads it from a signalfd and reaps (see
        // `Reaper`), and no other thread is ever woken for it. Were one thread to leave it
        // unblocked, the kernel would hand it that thread, which would drop it (its default
        // action) and the loop would not learn of the exit. (On a kernel without
        // `PIDFD_INFO_EXIT`, where the server reaps through pidfds, it stays pending, once.)
        // A server on a thread of a bigger process leaves the mask alone: there a blocked
        // SIGCHLD would go to the host's threads at every exit instead of being dropped. The
        // children's masks are their commands' own.
        let _sigchld = self.opts.owns_process.then(SigchldBlocked::new);
        Looper::new(&mut self).and_then(|mut looper| looper.run())
        // (`self.made` removes the socket and key files as `self` drops here.)
    }
}

/// The longest wait a server option keeps (about 31 years).
const MAX_WAIT: Duration = Duration::from_secs(1_000_000_000);

/// Files a server made (its socket, its key), removed when dropped: each by its absolute
/// path, and only if that path still names the file made (its device, inode and change
/// time: a file system may give a freed inode's number to the next file), never one another
/// server has put there since.
#[derive(Debug, Default)]
struct Made(Vec<(PathBuf, FileId)>);

/// What tells one file from another at the same path over time.
type FileId = (u64, u64, i64, i64);

fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

impl Made {
    fn add(&mut self, path: &Path) {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        if let Some(id) = file_id(&path) {
            self.0.push((path, id));
        }
    }

    /// `from` (made here) now has the name `to` (a rename changes its change time).
    fn renamed(&mut self, from: &Path, to: &Path) {
        let from = std::path::absolute(from).unwrap_or_else(|_| from.to_path_buf());
        self.0.retain(|(p, _)| *p != from);
        self.add(to);
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        for (p, id) in &self.0 {
            if file_id(p) == Some(*id) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// A new name beside `path` for a file to be renamed to it (this process's, unguessable).
fn temp_beside(path: &Path) -> PathBuf {
    let mut r = [0u8; 8];
    let _ = sock::random(&mut r);
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(format!(".{}.{}.tmp", std::process::id(), u64::from_le_bytes(r)));
    path.with_file_name(name)
}

/// The most bytes a Unix socket's path can have (`sun_path` holds 108 with the NUL).
const SOCKET_PATH_MAX: usize = 107;

/// A socket path that fits a Unix socket address, or an error that says it does not (std
/// reports it without an errno).
pub(crate) fn check_socket_path(step: &'static str, path: &Path) -> Result<()> {
    let n = path.as_os_str().len();
    if n > SOCKET_PATH_MAX {
        return Err(Error::invalid(
            step,
            quoted(path),
            &format!("{n} bytes: a Unix socket path holds at most {SOCKET_PATH_MAX}"),
        ));
    }
    Ok(())
}

/// SIGCHLD blocked on this thread for as long as it lives (restored on drop, a panic
/// included, unless it was blocked before).
struct SigchldBlocked {
    was_blocked: bool,
}

impl SigchldBlocked {
    const BIT: u64 = 1u64 << (libc::SIGCHLD - 1);

    fn new() -> SigchldBlocked {
        let was_blocked = crate::sys::sigmask::thread_mask().is_some_and(|m| m & Self::BIT != 0);
        let _ = crate::sys::sigmask::block(Self::BIT);
        SigchldBlocked { was_blocked }
    }
}

impl Drop for SigchldBlocked {
    fn drop(&mut self) {
        if !self.was_blocked {
            let _ = crate::sys::sigmask::unblock(Self::BIT);
        }
    }
}

struct Looper<'a> {
    server: &'a Server,
    epoll: Arc<Epoll>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    live: usize,
    next_gen: u32,
    children: Arc<Watched>,
    /// Exit frames for each connection (index: generation, frames, status answers among
    /// them), sent together once the loop has handled what epoll returned.
    exits_out: HashMap<usize, (u32, Vec<u8>, usize)>,
    /// Children looked at every millisecond rather than by epoll (a server without a
    /// reaper): those that ended but cannot be reaped yet (a zombie another process
    /// traces), out of the epoll set (no spinning on a level-triggered fd), and those the
    /// epoll set had no room for (`polled`).
    late: Vec<RawFd>,
    /// When the late list was last looked at (once a millisecond at most).
    late_at: Option<Instant>,
    cmsg: CmsgBuf,
    recv_fds: Vec<OwnedFd>,
    scratch: Vec<u8>,
    idle_since: Option<Instant>,
    /// A client said a request follows (a Wake frame): poll without sleeping until then,
    /// within a budget.
    awake: Awake,
    /// The server reaps every child of its process by SIGCHLD (see
    /// [`ServerOptions::owns_process`]; also: spawner threads, no Exit frames).
    has_reaper: bool,
    /// Requests for the spawner threads, and the pipe they wake the loop through (a token
    /// per connection whose reply queue they filled).
    jobs: Arc<Jobs>,
    spawners: Vec<std::thread::JoinHandle<()>>,
    watchdog: Arc<super::watchdog::Watchdog>,
    watchdog_thread: Option<std::thread::JoinHandle<()>>,
    wake_r: Option<OwnedFd>,
    wake_w: Option<Arc<OwnedFd>>,
    own: Own,
    /// SIGCHLD, for a server with a reaper (blocked in every thread of the process: see
    /// `Server::run`).
    sigchld: Option<SignalFd>,
    /// The reaper's answers of one pass (kept for its capacity).
    reaped: Vec<(i32, StatusChild, pidfd::Ended)>,
}

fn sys_err(step: &'static str, e: i32) -> Error {
    Error::os(step, "", e)
}

impl Drop for Looper<'_> {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

impl<'a> Looper<'a> {
    fn new(server: &'a mut Server) -> Result<Looper<'a>> {
        let epoll = Arc::new(Epoll::new().map_err(|e| sys_err("epoll_create1", e))?);
        let ev_in = libc::EPOLLIN as u32;
        if let Some(l) = &server.listener {
            l.set_nonblocking(true).map_err(|e| Error::os("fcntl", "listener", errno_of(&e)))?;
            epoll.add(l.as_raw_fd(), ev_in, T_LISTENER).map_err(|e| sys_err("epoll_ctl", e))?;
        }
        epoll.add(server.stop_r.as_raw_fd(), ev_in, T_STOP).map_err(|e| sys_err("epoll_ctl", e))?;
        if let Some(s) = &server.signals {
            epoll
                .add(s.as_fd().as_raw_fd(), ev_in, T_SIGNALS)
                .map_err(|e| sys_err("epoll_ctl", e))?;
        }
        if let Some(a) = &server.alive {
            epoll.add(a.as_raw_fd(), ev_in, T_ALIVE).map_err(|e| sys_err("epoll_ctl", e))?;
        }
        let initial = std::mem::take(&mut server.initial);
        let has_reaper = server.opts.owns_process && kernel_has_pidfd_exit_info();
        let sigchld = if has_reaper {
            // Children wait as zombies for the reaper (an inherited SIG_IGN or SA_NOCLDWAIT
            // would have the kernel reap them, their statuses lost): set before any child.
            sock::keep_children_for_reaping().map_err(|e| sys_err("sigaction", e))?;
            let set = SigSet::from_bits(1 << (libc::SIGCHLD - 1));
            let fd =
                SignalFd::block(set).map_err(|e| Error::os("signalfd", "SIGCHLD", errno_of(&e)))?;
            epoll
                .add(fd.as_fd().as_raw_fd(), ev_in, T_SIGCHLD)
                .map_err(|e| sys_err("epoll_ctl", e))?;
            Some(fd)
        } else {
            None
        };
        // A server that owns its process runs on its hard fd limit (before the bound on the
        // pidfds it holds is read from the soft one); its children get the limit it started
        // with back, unless their command sets its own.
        if server.opts.owns_process {
            crate::sys::this_process::raise_fd_limit();
        }
        let mut looper = Looper {
            server,
            epoll: epoll.clone(),
            conns: Vec::new(),
            free: Vec::new(),
            live: 0,
            next_gen: 1,
            children: Arc::new(Watched::new(epoll.clone(), has_reaper)),
            exits_out: HashMap::new(),
            late: Vec::new(),
            late_at: None,
            cmsg: CmsgBuf::new(),
            recv_fds: Vec::with_capacity(8),
            scratch: Vec::with_capacity(512),
            idle_since: Some(Instant::now()),
            awake: Awake::default(),
            has_reaper,
            jobs: Arc::new(Jobs::default()),
            spawners: Vec::new(),
            watchdog: super::watchdog::Watchdog::new(
                server.opts.exec_timeout.unwrap_or(super::EXEC_TIMEOUT),
            ),
            watchdog_thread: None,
            wake_r: None,
            wake_w: None,
            own: Own {
                euid: server.euid,
                ignored: SigSet::from_bits(crate::sys::this_process::ignored_signals()),
            },
            sigchld,
            reaped: Vec::new(),
        };
        // This thread spawns too (alone, or helping the spawner threads): watched.
        looper.watchdog.enroll();
        looper.watchdog_thread = Some(
            looper
                .watchdog
                .start()
                .map_err(|e| Error::os("pthread_create", "watchdog", errno_of(&e)))?,
        );
        if looper.has_reaper && looper.server.opts.spawn_threads > 1 {
            looper.start_spawners()?;
        }
        for s in initial {
            looper.admit(s);
        }
        Ok(looper)
    }

    fn run(&mut self) -> Result<()> {
        // This thread's own pool: for every request when there are no spawner threads, and
        // for a lone request (see `take_request`) when there are.
        crate::sys::pool::enable(self.pool_size(), self.watchdog.parked());
        let result = self.serve();
        // Stop the spawner threads. Requests still queued are answered with an error (which
        // also lets their frames' held answers out) before the connections close.
        let queued: Vec<Job> = {
            let mut q = self.jobs.lock();
            q.1 = true;
            q.0.drain(..).collect()
        };
        self.jobs.ready.notify_all();
        for job in queued {
            let stopping = Error::unsupported("serve", "the server is stopping");
            match &job.status {
                Some(sreq) => {
                    self.children.release();
                    let _ = status_answered(&job.tx, sreq, error_frame(job.id, &stopping));
                }
                None => {
                    let _ = job.tx.finished(job.id, job.batch.as_deref(), Err(stopping));
                }
            }
            let _ = job.tx.flush();
        }
        self.stop_threads();
        result
    }

    /// Stop and join the spawner threads and the watchdog (also on every early return: see
    /// Drop).
    fn stop_threads(&mut self) {
        self.jobs.lock().1 = true;
        self.jobs.ready.notify_all();
        for t in self.spawners.drain(..) {
            let _ = t.join();
        }
        self.watchdog.stop();
        if let Some(t) = self.watchdog_thread.take() {
            let _ = t.join();
        }
        super::watchdog::unenroll();
        crate::sys::pool::disable();
    }

    fn pool_size(&self) -> usize {
        let default = if self.server.opts.owns_process { DEFAULT_POOL } else { 0 };
        self.server.opts.pool.unwrap_or(default)
    }

    fn serve(&mut self) -> Result<()> {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 128];
        loop {
            // The loop's own pool (no spawner threads): one child made per turn, and no
            // sleep while it wants more.
            let refill = crate::sys::pool::refill();
            let awake = self.awake.polling(Instant::now());
            if awake {
                // Polling for a request the client is still filling in: if the scheduler put
                // this thread beside the client on one CPU, the client goes first.
                std::thread::yield_now();
            }
            self.take_unwatched();
            let timeout = if refill || awake {
                0
            } else if self.late.is_empty() {
                self.timeout_ms()
            } else {
                // Something late: looked at again when the first of it is due.
                match (self.timeout_ms(), self.late_wait_ms()) {
                    (-1, late) => late,
                    (t, late) => t.min(late),
                }
            };
            let n = self.epoll.wait(&mut events, timeout);
            for ev in &events[..n] {
                let token = ev.u64;
                let flags = ev.events;
                match token & KIND_MASK {
                    T_CONN => self.on_conn(token, flags),
                    T_CHILD => self.on_child((token & 0xFFFF_FFFF) as RawFd, true),
                    _ => match token {
                        T_LISTENER => self.accept_all(),
                        T_WAKE => self.on_wake(),
                        T_SIGCHLD => self.on_sigchld(),
                        T_STOP | T_ALIVE => return Ok(()),
                        T_SIGNALS => {
                            if let Some(s) = &self.server.signals {
                                if !s.read_pending().unwrap_or_default().is_empty() {
                                    return Ok(());
                                }
                            }
                        }
                        _ => {}
                    },
                }
            }
            self.take_unwatched();
            let due = self.late_at.is_none_or(|t| t.elapsed() >= Duration::from_millis(1));
            if !self.late.is_empty() && due {
                let now = Instant::now();
                self.late_at = Some(now);
                for raw in std::mem::take(&mut self.late) {
                    // Still a child of the list (its number not taken by another since).
                    let rec = self.children.lock().get(&raw).map(|r| (r.on_late_list(), r.due));
                    match rec {
                        Some((true, Some(due))) if due > now => self.late.push(raw),
                        Some((true, _)) => self.on_child(raw, false),
                        _ => {}
                    }
                }
            }
            self.send_exits();
            self.expire_handshakes();
            // Spawn one queued request here too when the spawner threads are behind.
            self.help_spawners();
            if self.live == 0 {
                if self.server.listener.is_none() {
                    return Ok(());
                }
                let since = *self.idle_since.get_or_insert_with(Instant::now);
                if self.server.opts.idle_exit.is_some_and(|t| since.elapsed() >= t) {
                    return Ok(());
                }
            } else {
                self.idle_since = None;
            }
        }
    }

    /// Milliseconds until the first child of the (not empty) late list is due (at least 1).
    fn late_wait_ms(&self) -> i32 {
        let map = self.children.lock();
        let now = Instant::now();
        let mut ms = 60_001;
        for raw in &self.late {
            // One looked at every millisecond: no need to look further.
            let Some(due) = map.get(raw).and_then(|r| r.due) else { return 1 };
            ms = ms.min(due.saturating_duration_since(now).as_millis().min(60_000) as i32 + 1);
        }
        ms
    }

    /// Wake for the nearest handshake deadline or idle exit; else sleep until an event.
    fn timeout_ms(&self) -> i32 {
        let mut next: Option<Instant> = None;
        let frame_timeout = self.server.opts.frame_timeout.unwrap_or(FRAME_TIMEOUT);
        for c in self.conns.iter().flatten() {
            if let State::Challenged(_, d) = c.state {
                next = Some(next.map_or(d, |n| n.min(d)));
            }
            for p in [c.partial_since, c.out_since].into_iter().flatten() {
                let d = p + frame_timeout;
                next = Some(next.map_or(d, |n| n.min(d)));
            }
        }
        if self.live == 0 {
            if let (Some(t), Some(s)) = (self.server.opts.idle_exit, self.idle_since) {
                let d = s + t;
                next = Some(next.map_or(d, |n| n.min(d)));
            }
            if self.server.opts.idle_exit.is_some() && self.idle_since.is_none() {
                return 0;
            }
        }
        match next {
            None => -1,
            Some(d) => {
                d.saturating_duration_since(Instant::now()).as_millis().min(60_000) as i32 + 1
            }
        }
    }

    fn expire_handshakes(&mut self) {
        let now = Instant::now();
        let frame_timeout = self.server.opts.frame_timeout.unwrap_or(FRAME_TIMEOUT);
        let expired: Vec<usize> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c {
                Some(Conn { state: State::Challenged(_, d), .. }) if *d <= now => Some(i),
                // Stalled mid-frame: nothing more has arrived that the server has not read
                // (if it has, the server is behind, not the client).
                Some(c)
                    if c.partial_since.is_some_and(|p| p + frame_timeout <= now)
                        && c.tx.idle()
                        && sock::unread_bytes(c.tx.sock.as_fd()) == 0 =>
                {
                    Some(i)
                }
                // Our replies have waited that long with no byte of them taken: a client
                // that does not read is not left holding them (and their pidfds).
                Some(c) if c.out_since.is_some_and(|p| p + frame_timeout <= now) => Some(i),
                _ => None,
            })
            .collect();
        for i in expired {
            self.close(i);
        }
    }

    fn accept_all(&mut self) {
        loop {
            let Some(l) = &self.server.listener else { return };
            match l.accept() {
                Ok((s, _)) => self.admit(s),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // EMFILE and the like: leave the rest in the backlog for now, and pause a
                // moment so a listener that stays readable does not spin the loop.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(5));
                    return;
                }
            }
        }
    }

    /// A new connection: the peer's uid checked, then the challenge sent.
    fn admit(&mut self, sock: UnixStream) {
        let Ok((pid, uid, gid)) = sock::peer_cred(sock.as_fd()) else { return };
        let allowed = uid == self.server.euid
            || (self.server.euid == 0 && self.server.opts.allow_uid == Some(uid));
        if !allowed {
            return; // dropped: closed before a byte is read
        }
        if let Some(m) = self.server.opts.max_clients.filter(|&m| self.live >= m) {
            // One of ours, turned away: say why (in place of the challenge), then close.
            let why = format!("the server has its most clients connected (--max-clients {m})");
            let hdr =
                Header { len: why.len() as u32, kind: Kind::Failure, flags: 0, nfds: 0, id: 0 };
            let _ = sock::send_with_fds(sock.as_fd(), &[&hdr.encode(), why.as_bytes()], &[], true);
            return;
        }
        if sock.set_nonblocking(true).is_err() {
            return;
        }
        let Ok(ns) = auth::nonce() else { return };
        let hdr = Header { len: NONCE_LEN as u32, kind: Kind::Challenge, flags: 0, nfds: 0, id: 0 };
        let mut first = hdr.encode().to_vec();
        first.extend_from_slice(&ns);
        // A fresh socket's buffer is empty: the challenge goes out whole or not at all.
        if sock::send_with_fds(sock.as_fd(), &[&first], &[], true) != Ok(first.len()) {
            return;
        }
        let idx = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        let generation = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1) & 0x0FFF_FFFF;
        let token = T_CONN | ((generation as u64) << 32) | idx as u64;
        if self.epoll.add(sock.as_raw_fd(), libc::EPOLLIN as u32, token).is_err() {
            self.free.push(idx);
            return;
        }
        self.conns[idx] = Some(Conn {
            tx: Arc::new(ConnTx {
                sock,
                out: Mutex::new(VecDeque::new()),
                statuses: AtomicUsize::new(0),
                closed: AtomicBool::new(false),
            }),
            generation,
            peer: Peer { pid, uid, gid },
            state: State::Challenged(ns, Instant::now() + HANDSHAKE_TIMEOUT),
            inbox: Inbox::new(),
            writing: false,
            partial_since: None,
            frames_done: 0,
            out_since: None,
            env: None,
        });
        self.live += 1;
        self.idle_since = None;
    }

    fn close(&mut self, idx: usize) {
        if let Some(c) = self.conns.get_mut(idx).and_then(Option::take) {
            let _ = self.epoll.delete(c.tx.sock.as_raw_fd());
            self.free.push(idx);
            self.live -= 1;
            self.exits_out.remove(&idx);
            // Nobody is left to tell how its status children end: they run on, as a
            // client's do when it drops their pidfds, and are reaped (by the reaper, or,
            // in a server without one, through the pidfds it keeps watching) with no
            // answer. Its status requests still queued for a spawner thread are not started.
            c.tx.closed.store(true, Ordering::Relaxed);
            if let Some(reaper) = &self.children.reaper {
                // No longer counted against the server's bound either: what it answered for.
                let generation = c.generation;
                if c.tx.statuses.load(Ordering::Relaxed) > 0 {
                    let n = reaper.forget(|sc| sc.conn == (idx, generation));
                    (0..n).for_each(|_| self.children.release());
                }
            }
        }
    }

    fn on_conn(&mut self, token: u64, flags: u32) {
        let idx = (token & 0xFFFF_FFFF) as usize;
        let generation = ((token >> 32) & 0x0FFF_FFFF) as u32;
        let Some(mut conn) = self.conns.get_mut(idx).and_then(Option::take) else { return };
        if conn.generation != generation {
            self.conns[idx] = Some(conn);
            return;
        }
        let keep = self.serve_conn(&mut conn, idx, flags);
        self.conns[idx] = Some(conn);
        if !keep {
            self.close(idx);
        }
    }

    /// Read, handle and answer what a connection sent; false to close it.
    fn serve_conn(&mut self, conn: &mut Conn, idx: usize, flags: u32) -> bool {
        let frames_before = conn.frames_done;
        let was_writing = conn.writing;
        // Queued replies go first; a peer that hung up fails here (EPIPE) and is closed,
        // rather than reported HUP again and again while its queue waits.
        let out_or_gone = (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) as u32;
        if flags & out_or_gone != 0 {
            let before = conn.tx.pending_bytes();
            if !conn.tx.flush() {
                return false;
            }
            if conn.tx.pending_bytes() < before {
                // The client is reading: its reply queue is not stalled.
                conn.out_since = conn.out_since.map(|_| Instant::now());
            }
        }
        if flags & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 == 0 {
            Self::refresh_partial(conn, was_writing && conn.tx.idle());
            return self.update_interest(conn, idx);
        }
        // Read while replies can go out (backpressure: a client that does not read its
        // replies is not read either).
        let mut rounds = 0;
        while conn.tx.idle() && rounds < 16 {
            rounds += 1;
            self.run_queued_above(QUEUE_LIMIT);
            self.recv_fds.clear();
            let spare = conn.inbox.spare(4096);
            let got = sock::recv_with_fds(
                conn.tx.sock.as_fd(),
                spare,
                &mut self.recv_fds,
                &mut self.cmsg,
                true,
            );
            match got {
                Ok(r) if r.bytes == 0 || r.foreign => return false, // EOF, or not the protocol
                // Fds of this message were lost (this server is at its fd limit): those that
                // came are closed, and the frame the message begins is answered with that.
                Ok(r) if r.fds_cut => {
                    self.recv_fds.clear();
                    if !conn.inbox.filled_cut(r.bytes) {
                        return false;
                    }
                }
                Ok(r) => conn.inbox.filled(r.bytes, self.recv_fds.drain(..)),
                Err(libc::EAGAIN) => break,
                Err(_) => return false,
            }
            if !self.handle_frames(conn, idx) {
                return false;
            }
        }
        let progressed = conn.frames_done != frames_before || (was_writing && conn.tx.idle());
        Self::refresh_partial(conn, progressed);
        self.update_interest(conn, idx)
    }

    /// The half-frame clock: stopped while nothing is half received or while our replies
    /// wait (backpressure: the server is not reading then), restarted when a frame completes
    /// or the replies drain, else left running.
    fn refresh_partial(conn: &mut Conn, progressed: bool) {
        conn.partial_since = if !conn.tx.idle() || !conn.inbox.partial() {
            None
        } else if progressed {
            Some(Instant::now())
        } else {
            Some(conn.partial_since.unwrap_or_else(Instant::now))
        };
    }

    fn update_interest(&mut self, conn: &mut Conn, idx: usize) -> bool {
        let want_out = !conn.tx.idle();
        conn.out_since = match (want_out, conn.out_since) {
            (false, _) => None,
            (true, Some(t)) => Some(t),
            (true, None) => Some(Instant::now()),
        };
        if want_out != conn.writing {
            let ev = if want_out { libc::EPOLLOUT } else { libc::EPOLLIN } as u32;
            let token = T_CONN | ((conn.generation as u64) << 32) | idx as u64;
            if self.epoll.modify(conn.tx.sock.as_raw_fd(), ev, token).is_err() {
                return false;
            }
            conn.writing = want_out;
        }
        true
    }

    /// Handle every complete frame in the inbox; false on a protocol error.
    fn handle_frames(&mut self, conn: &mut Conn, idx: usize) -> bool {
        loop {
            match conn.state {
                State::Challenged(ns, _) => {
                    let welcome = match conn.inbox.next(EXPECT_ANSWER) {
                        Ok(None) => return true,
                        Ok(Some((_, body))) => auth::server_check(&self.server.key, &ns, body),
                        Err(_) => return false,
                    };
                    let Some(mac) = welcome else {
                        let why = b"authentication failed";
                        let h = Header {
                            len: why.len() as u32,
                            kind: Kind::Failure,
                            flags: 0,
                            nfds: 0,
                            id: 0,
                        };
                        let _ = sock::send_with_fds(
                            conn.tx.sock.as_fd(),
                            &[&h.encode(), why],
                            &[],
                            true,
                        );
                        return false;
                    };
                    let h = Header {
                        len: mac.len() as u32,
                        kind: Kind::Welcome,
                        flags: 0,
                        nfds: 0,
                        id: 0,
                    };
                    self.send(conn, &[&h.encode(), &mac]);
                    conn.state = State::Ready;
                }
                State::Ready => {
                    let (frame, body) = match conn.inbox.next(EXPECT_REQUEST) {
                        Ok(None) => return true,
                        Ok(Some(f)) => f,
                        Err(FrameError::Kind(_) | FrameError::Version(_)) => return false,
                        Err(_) => return false,
                    };
                    conn.frames_done += 1;
                    let id = frame.header.id;
                    if frame.fds_lost {
                        // A request whose fds this server could not take in: each of its
                        // commands is answered so, nothing is spawned, the connection goes on.
                        match lost_requests(&frame.header, body) {
                            Ok(Some(n)) => self.answer_lost_fds(conn, idx, &frame.header, n),
                            Ok(None) => return false,
                            Err(e) => return self.refuse(conn, id, &e),
                        }
                        continue;
                    }
                    if frame.header.kind == Kind::Wake {
                        // A request follows at once: poll for it a little rather than let
                        // this thread's CPU go idle (waking an idle CPU is the slowest part
                        // of a lone request in a VM). Nothing else: no body, no fds.
                        let h = frame.header;
                        if h.len != 0 || h.nfds != 0 || h.flags != 0 || h.id != 0 {
                            return false;
                        }
                        self.server.counts.wakes.fetch_add(1, Ordering::Relaxed);
                        self.awake.wake(Instant::now(), (idx, conn.generation));
                        continue;
                    }
                    if frame.header.kind == Kind::Env {
                        // The connection's environment from now on; nothing is answered
                        // unless it is malformed (then answered once, and closed).
                        match ConnEnv::decode(body, frame.fds.is_empty()) {
                            Ok(env) => conn.env = Some(env),
                            Err(e) => return self.refuse(conn, id, &e),
                        }
                        continue;
                    }
                    // The request a Wake frame of this connection announced: sleep again
                    // after it.
                    self.awake.request_from(Instant::now(), (idx, conn.generation));
                    let status = frame.header.flags & FLAG_STATUS != 0;
                    // A status request's answer is its Exit frame whatever else it asks.
                    let want_exit = frame.header.flags & FLAG_WANT_EXIT != 0 || status;
                    let batch_reply = frame.header.flags & FLAG_BATCH_REPLY != 0;
                    let conn_env = (frame.header.flags & FLAG_CONN_ENV != 0)
                        .then(|| conn.env.clone().ok_or_else(no_conn_env));
                    if frame.header.kind == Kind::SpawnMany {
                        let indexed = frame.header.flags & FLAG_FD_INDEX != 0;
                        let decoded = decode_many(body, frame.fds, indexed, conn_env.as_ref());
                        let mut cmds = match decoded {
                            Ok(cmds) => cmds,
                            Err(e) => return self.refuse(conn, id, &e),
                        };
                        let (took, refused) =
                            self.admission(&conn.tx, status, want_exit, cmds.len());
                        let n = cmds.len();
                        // Only a frame of one request may be served by a parked child (however
                        // many of a frame of several the admission took).
                        let alone = n == 1;
                        // The fds of those turned away close now (those of a frame that
                        // shares them, FLAG_FD_INDEX, with the frame's last command).
                        cmds.truncate(took);
                        let batch =
                            (batch_reply && !status && cmds.len() > 1 && self.hand_off(conn))
                                .then(|| FrameBatch::new(cmds.len()));
                        // Status answers of a batch-reply frame go out together, whichever
                        // thread spawns them.
                        let sbatch = (status && batch_reply && cmds.len() > 1).then(|| {
                            let state = Mutex::new((cmds.len(), (Vec::new(), 0)));
                            Arc::new(StatusBatch { state })
                        });
                        let sreq = status.then_some(StatusReq(sbatch));
                        for (i, cmd) in cmds.into_iter().enumerate() {
                            let sub = (id.wrapping_add(i as u64), alone);
                            let asked = (want_exit, sreq.clone());
                            self.take_request(conn, idx, sub, asked, batch.clone(), cmd);
                        }
                        if let Some(e) = refused {
                            // Answered after the others are taken, so the answers keep the
                            // requests' order: each the same refusal.
                            for i in took..n {
                                self.send_error(conn, id.wrapping_add(i as u64), &e);
                            }
                        }
                        continue;
                    }
                    if let (_, Some(e)) = self.admission(&conn.tx, status, want_exit, 1) {
                        drop(frame);
                        self.send_error(conn, id, &e);
                        continue;
                    }
                    let decoded = Command::from_wire(body, frame.fds)
                        .and_then(|c| with_conn_env(c, conn_env.as_ref()))
                        .map(|(c, _)| c);
                    match decoded {
                        Ok(cmd) => {
                            let asked = (want_exit, status.then(StatusReq::default));
                            self.take_request(conn, idx, (id, true), asked, None, cmd)
                        }
                        // Bytes that do not decode: answer once, then close (malformed).
                        Err(e) => {
                            if self.children.holds(status) {
                                self.children.release();
                            }
                            return self.refuse(conn, id, &e);
                        }
                    }
                }
            }
        }
    }

    /// Which of `n` requests of a connection (`tx`; one frame's) are taken: the first so
    /// many, admitted (counted in until their children are forgotten), and why the others
    /// are turned away. Status requests (and Exit-frame requests a server with a reaper
    /// refuses) are taken or turned away whole.
    fn admission(
        &self,
        tx: &ConnTx,
        status: bool,
        want_exit: bool,
        n: usize,
    ) -> (usize, Option<Error>) {
        let whole = |refused: Option<Error>| match refused {
            Some(e) => (0, Some(e)),
            None => (n, None),
        };
        if status {
            whole(too_many_statuses(tx, &self.children, n))
        } else if self.has_reaper {
            whole(want_exit.then(no_exit_frames))
        } else {
            // This server reaps: it keeps every child's pidfd until the child ends, so a
            // client that starts long-lived children cannot use up its fds (then it could
            // take no connection, request or pidfd for anyone). Each request has its own
            // answer: as many as there is room for are taken.
            let took = self.children.admit_up_to(n);
            (took, (took < n).then(|| too_many_held(&self.children, "request")))
        }
    }

    /// The `n` requests of a frame whose fds this server could not take in, each answered
    /// so ([`fds_lost`]).
    fn answer_lost_fds(&mut self, conn: &mut Conn, idx: usize, h: &Header, n: usize) {
        self.awake.request_from(Instant::now(), (idx, conn.generation));
        let e = fds_lost(h.nfds);
        for i in 0..n {
            self.send_error(conn, h.id.wrapping_add(i as u64), &e);
        }
    }

    /// A malformed frame: answered once with `e` (to `id`), then false (the connection
    /// closes).
    fn refuse(&mut self, conn: &mut Conn, id: u64, e: &Error) -> bool {
        self.send_error(conn, id, e);
        let _ = conn.tx.flush();
        false
    }

    /// A decoded request: to a spawner thread, or spawned here when there is none.
    /// `(id, alone)`: its id, and whether its frame carried it alone (not one of a
    /// SpawnMany's). `(want_exit, status)`: what the request asked ([`FLAG_WANT_EXIT`],
    /// [`FLAG_STATUS`]).
    fn take_request(
        &mut self,
        conn: &mut Conn,
        idx: usize,
        (id, alone): (u64, bool),
        (want_exit, status): (bool, Option<StatusReq>),
        batch: Option<Arc<FrameBatch>>,
        cmd: Command,
    ) {
        // A lone request (the only one of its frame, nothing queued, nothing more read) with
        // a child parked in this thread's pool: woken here, without the hop to a spawner
        // thread (measured: ~15 us less to the child's first instruction). Never one of a
        // SpawnMany's several: the loop would wait for its exec while the frame's next
        // requests, not queued yet, wait for the loop and the spawner threads idle (and see
        // `spawn_for`: no parked child serves those on any thread). Measured with 16 status
        // requests in flight, 8 per frame: 8,376 spawns/s before, 9,118 after, 9,179 with no
        // pool at all (medians of 8 alternating runs). Not for another uid's
        // request (a root server's --allow-uid peer): its child runs as that peer before its
        // exec, and a peer that stopped it there would hold this loop, and every other
        // client, until the watchdog's limit; a spawner thread takes that one. (A peer of
        // the server's own uid can stop the server itself anyway.)
        // Only one a pool child can serve (no isolation, the default strategy): anything
        // else would clone or fork on this thread and hold the loop until its exec.
        let lone = alone
            && batch.is_none()
            && conn.peer.uid == self.server.euid
            && cmd.pool_may_serve()
            && conn.inbox.buffered() == 0
            && crate::sys::pool::ready()
            && self.jobs.lock().0.is_empty();
        if self.hand_off(conn) && !lone {
            let token = T_CONN | ((conn.generation as u64) << 32) | idx as u64;
            let tx = conn.tx.clone();
            let job = Job { tx, token, peer: conn.peer, id, batch, status, alone, cmd };
            self.jobs.lock().0.push_back(job);
            self.jobs.ready.notify_one();
        } else {
            self.spawn_one(conn, idx, (id, alone), (want_exit, status), cmd);
        }
    }

    fn spawn_one(
        &mut self,
        conn: &mut Conn,
        idx: usize,
        (id, alone): (u64, bool),
        (want_exit, status): (bool, Option<StatusReq>),
        mut cmd: Command,
    ) {
        let bare = status.is_some() && self.children.reaper.is_some();
        let children = Arc::clone(&self.children);
        let mut ticket = children.ticket();
        let spawned = spawn_for(&mut cmd, conn.peer, self.own, (alone, bare), ticket.as_mut());
        // The fds the request passed close now.
        drop(cmd);
        // A bare spawn's pidfd (a pool child's, another strategy's) is not needed; any other
        // spawn's is.
        let spawned = spawned
            .and_then(|(pid, pidfd)| Ok((pid, if bare { None } else { Some(made_pidfd(pidfd)?) })));
        let (pid, pidfd) = match spawned {
            Ok((pid, Some(pidfd))) => (pid, pidfd),
            Ok((pid, None)) => {
                // A status request's child in a server with a reaper: no answer until the
                // reaper reaps it (or now, if it has already).
                if let Some(sreq) = status {
                    let sc = StatusChild { conn: (idx, conn.generation), id, sreq };
                    children.register(ticket, pid, Some(sc), &conn.tx);
                }
                return;
            }
            Err(e) => {
                if self.children.holds(status.is_some()) {
                    self.children.release();
                }
                if let Some(sreq) = status {
                    status_answered(&conn.tx, &sreq, error_frame(id, &e));
                    return;
                }
                return self.send_error(conn, id, &e);
            }
        };
        if let Some(sreq) = status {
            // No answer until it ends: its pidfd is watched here (a server without a reaper),
            // never sent.
            let rec = ChildRec {
                pidfd,
                pid,
                conn: (idx, conn.generation),
                id,
                want_exit: true,
                status: Some(sreq),
                late: None,
                due: None,
                polled: false,
            };
            // Watched (by epoll, or polled from the late list): answered when it ends.
            self.children.add(rec);
            return;
        }
        let h = Header { len: 4, kind: Kind::Spawned, flags: 0, nfds: 1, id };
        if self.has_reaper {
            // The pidfd goes to the client; the reaper reaps the child when it exits.
            children.register(ticket, pid, None, &conn.tx);
            conn.tx.send(&[&h.encode(), &pid.to_le_bytes()], vec![pidfd]);
            return;
        }
        // The server keeps its own pidfd (to reap the child): the client gets a duplicate.
        match parent::dup_cloexec(pidfd.as_raw_fd()) {
            Ok(dup) => {
                conn.tx.send(&[&h.encode(), &pid.to_le_bytes()], vec![dup]);
            }
            Err(e) => self.send_error(conn, id, &Error::os("fcntl", "F_DUPFD_CLOEXEC pidfd", e)),
        }
        let rec = ChildRec {
            pidfd,
            pid,
            conn: (idx, conn.generation),
            id,
            want_exit,
            status: None,
            late: None,
            due: None,
            polled: false,
        };
        // By epoll, or with no room there polled from the late list: reaped when it ends,
        // never waited for on this thread.
        self.children.add(rec);
    }

    fn send_error(&mut self, conn: &mut Conn, id: u64, e: &Error) {
        self.scratch.clear();
        reply::encode_error(e, &mut self.scratch);
        let h = Header { len: self.scratch.len() as u32, kind: Kind::Error, flags: 0, nfds: 0, id };
        let body = std::mem::take(&mut self.scratch);
        self.send(conn, &[&h.encode(), &body]);
        self.scratch = body;
    }

    fn send(&mut self, conn: &mut Conn, parts: &[&[u8]]) {
        conn.tx.send(parts, Vec::new());
    }

    fn start_spawners(&mut self) -> Result<()> {
        let (r, w) = parent::pipe().map_err(|e| Error::os("pipe2", "wake", e))?;
        parent::set_nonblocking(&r).map_err(|e| Error::os("fcntl", "wake", e))?;
        self.epoll
            .add(r.as_raw_fd(), libc::EPOLLIN as u32, T_WAKE)
            .map_err(|e| sys_err("epoll_ctl", e))?;
        let w = Arc::new(w);
        let pool = self.pool_size();
        for _ in 1..self.server.opts.spawn_threads {
            let (jobs, wake, own) = (self.jobs.clone(), w.clone(), self.own);
            let watched = self.children.clone();
            let watchdog = self.watchdog.clone();
            let t = std::thread::Builder::new()
                .name("spawnkit-spawner".into())
                .spawn(move || {
                    watchdog.enroll();
                    crate::sys::pool::enable(pool, watchdog.parked());
                    spawner(&jobs, &wake, own, &watched);
                    crate::sys::pool::disable();
                })
                .map_err(|e| Error::os("pthread_create", "spawner", errno_of(&e)))?;
            self.spawners.push(t);
        }
        self.wake_r = Some(r);
        self.wake_w = Some(w);
        Ok(())
    }

    /// Spawner threads queued replies: watch those connections for EPOLLOUT.
    fn on_wake(&mut self) {
        let Some(r) = &self.wake_r else { return };
        let mut buf = [0u8; 8 * 64];
        let n = parent::read_some(r.as_raw_fd(), &mut buf);
        for chunk in buf[..n - n % 8].chunks_exact(8) {
            self.watch_out(u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8])));
        }
    }

    /// A reply queued on the connection of `token`: watch it for EPOLLOUT.
    fn watch_out(&mut self, token: u64) {
        let idx = (token & 0xFFFF_FFFF) as usize;
        let generation = ((token >> 32) & 0x0FFF_FFFF) as u32;
        let Some(mut conn) = self.conns.get_mut(idx).and_then(Option::take) else { return };
        let ok = conn.generation != generation || self.update_interest(&mut conn, idx);
        self.conns[idx] = Some(conn);
        if !ok {
            self.close(idx);
        }
    }

    /// Spawn queued requests on the loop thread while `limit` or more wait: the loop helps
    /// the spawner threads, and a client sending faster than they spawn is no longer read
    /// (the socket pushes back), so the queue and the fds its requests hold stay bounded.
    fn run_queued_above(&mut self, limit: usize) {
        if self.spawners.is_empty() {
            return;
        }
        loop {
            let job = {
                let mut q = self.jobs.lock();
                if q.0.len() < limit.max(1) {
                    return;
                }
                q.0.pop_front()
            };
            let Some(job) = job else { return };
            if let Some(token) = run_job(job, self.own, None, &self.children) {
                self.watch_out(token);
            }
        }
    }

    /// Whether a spawner thread takes the request just decoded: always, when there are
    /// spawner threads. The loop then stays free to read the next requests (a request that
    /// arrives while the loop itself is in a clone+exec waits for it), and it helps when two
    /// or more are queued. Measured here: 16 in flight from one caller thread went from
    /// about a local loop's rate to 1.7x with one spawner thread handing-off every request,
    /// against about 1.1x when the loop kept lone requests for itself; the hop costs a
    /// lone request a thread wake-up (~10 us here). With a pool, `take_request` keeps a lone
    /// request of the server's own uid on the loop when a child is parked there: waking it
    /// costs the loop a futex wake and the wait for the exec, not a clone.
    fn hand_off(&self, _conn: &Conn) -> bool {
        !self.spawners.is_empty()
    }

    /// Take one queued request when the spawner threads have more than one waiting.
    fn help_spawners(&mut self) {
        if self.spawners.is_empty() {
            return;
        }
        let job = {
            let mut q = self.jobs.lock();
            if q.0.len() < 2 {
                return;
            }
            q.0.pop_front()
        };
        if let Some(job) = job {
            if let Some(token) = run_job(job, self.own, None, &self.children) {
                self.watch_out(token);
            }
        }
    }

    /// A child's pidfd is readable (a server without a reaper): reap it, tell the client if
    /// it asked, forget it.
    /// `first`: from an epoll event (else from the late list).
    fn on_child(&mut self, raw: RawFd, first: bool) {
        let Some(ended) = self.reaped(raw, first) else {
            // Not over yet: back on the late list if it is one of it.
            if self.children.lock().get(&raw).is_some_and(ChildRec::on_late_list) {
                self.late.push(raw);
            }
            return;
        };
        let Some(rec) = ({
            let mut map = self.children.lock();
            self.children.remove(&mut map, raw)
        }) else {
            return;
        };
        if rec.want_exit {
            self.exit_out(rec.conn, (rec.id, rec.pid), ended, rec.status.as_ref());
        }
        drop(rec);
    }

    /// The Exit frame of request `id` (child `pid`) of the connection `(idx, generation)`, if
    /// it is still open: gathered for this turn's `send_exits` (a status request's with its
    /// frame's others, when they go together).
    fn exit_out(
        &mut self,
        (idx, generation): (usize, u32),
        (id, pid): (u64, i32),
        ended: pidfd::Ended,
        status: Option<&StatusReq>,
    ) {
        let live = self.conns.get(idx).and_then(Option::as_ref);
        if live.is_none_or(|c| c.generation != generation) {
            return;
        }
        // (A closed connection's entry goes with it: never another generation's.)
        let out = self.exits_out.entry(idx).or_insert_with(|| (generation, Vec::new(), 0));
        let frame = exit_frame(id, pid, ExitStatus::from(ended));
        match status {
            None => out.1.extend_from_slice(&frame),
            Some(sreq) => {
                if let Some((all, n)) = sreq.answer(frame) {
                    out.1.extend_from_slice(&all);
                    out.2 += n;
                }
            }
        }
    }

    /// SIGCHLD (a server with a reaper): reap every child that has ended, and answer the
    /// status requests among them.
    fn on_sigchld(&mut self) {
        let Some(reaper) = &self.children.reaper else { return };
        if let Some(fd) = &self.sigchld {
            // Read first: a child that ends after the read sends SIGCHLD again.
            while let Ok(Some(_)) = crate::sys::sigmask::read_siginfo(fd.as_fd()) {}
        }
        let mut reaped = std::mem::take(&mut self.reaped);
        reaper.reap(&mut reaped);
        for (pid, sc, ended) in reaped.drain(..) {
            self.children.release();
            self.exit_out(sc.conn, (sc.id, pid), ended, Some(&sc.sreq));
        }
        self.reaped = reaped;
    }

    /// The server reaps: the child of `raw` reaped now, if it has ended. One that has ended
    /// but cannot be reaped yet (a zombie traced by another process, which has not let it
    /// go: its pidfd stays readable, and epoll would report it again at once, a spin) goes
    /// out of the epoll set onto the late list, looked at again and again, less often as it
    /// ages ([`late_look_every`]: from every millisecond to every 100 ms) until it can be
    /// reaped, however long that takes (it must be reaped).
    /// `first`: from an epoll event (else from the late list).
    fn reaped(&self, raw: RawFd, first: bool) -> Option<pidfd::Ended> {
        let mut map = self.children.lock();
        let rec = map.get_mut(&raw)?;
        match pidfd::wait(rec.pidfd.as_fd(), true) {
            Ok(Some(e)) => Some(e),
            Ok(None) => {
                // Readable now: ended, not reapable. (An event for a number an ended child
                // had in this same turn, now another child's that runs, is not readable:
                // that one stays in the epoll set.)
                if first && ended_now(raw) {
                    let _ = self.epoll.delete(raw);
                    rec.late.get_or_insert_with(Instant::now);
                } else if rec.late.is_some() || (rec.polled && ended_now(raw)) {
                    // Looked at from the late list (a polled one too, once it has ended).
                    let now = Instant::now();
                    let since = *rec.late.get_or_insert(now);
                    rec.due = Some(now + late_look_every(now.saturating_duration_since(since)));
                }
                None
            }
            Err(_) => Some(pidfd::Ended::Exited(-1)),
        }
    }

    /// Children a spawner thread could not put in the epoll set: onto the late list.
    fn take_unwatched(&mut self) {
        let mut list = self.children.unwatched.lock().unwrap_or_else(|e| e.into_inner());
        self.late.append(&mut list);
    }

    /// Send the Exit frames gathered this turn: one message per connection, however many
    /// children of it ended.
    fn send_exits(&mut self) {
        if self.exits_out.is_empty() {
            return;
        }
        for (idx, (generation, bytes, statuses)) in std::mem::take(&mut self.exits_out) {
            let Some(mut conn) = self.conns.get_mut(idx).and_then(Option::take) else { continue };
            if conn.generation != generation {
                self.conns[idx] = Some(conn);
                continue;
            }
            conn.tx.answered(statuses);
            if !bytes.is_empty() {
                self.send(&mut conn, &[&bytes]);
            }
            let ok = self.update_interest(&mut conn, idx);
            self.conns[idx] = Some(conn);
            if !ok {
                self.close(idx);
            }
        }
    }
}

/// The refusal of `n` more status requests of a connection, if they would make more than
/// [`MAX_STATUS_IN_FLIGHT`] unanswered on it, or more status children than the server may
/// hold; else they are counted in.
fn too_many_statuses(tx: &ConnTx, watched: &Watched, n: usize) -> Option<Error> {
    let open = tx.statuses.load(Ordering::Relaxed);
    let why = if open.saturating_add(n) > MAX_STATUS_IN_FLIGHT {
        format!(
            "{open} status requests of this connection are unanswered, at most \
             {MAX_STATUS_IN_FLIGHT}: wait for some first"
        )
    } else if !watched.admit(n) {
        return Some(too_many_held(watched, "status request"));
    } else {
        tx.statuses.fetch_add(n, Ordering::Relaxed);
        return None;
    };
    Some(Error::os("serve", "status request", libc::EAGAIN).with_reason(why))
}

/// The refusal of requests that would make the server keep more children than it may
/// ([`Watched::admit`]).
fn too_many_held(watched: &Watched, what: &'static str) -> Error {
    let what_kept = if watched.reaper.is_some() { "status children" } else { "pidfds" };
    let why = format!(
        "the server keeps, or is about to, {} {what_kept}, at most {} (half its fd limit): \
         wait for some to end first",
        watched.held.load(Ordering::Relaxed),
        watched.held_max
    );
    Error::os("serve", what, libc::EAGAIN).with_reason(why)
}

/// What every spawn of a server applies, whichever thread makes it.
#[derive(Debug, Clone, Copy)]
struct Own {
    euid: u32,
    /// The signals the server's process ignores (read when it starts serving: `spawnkit
    /// serve` started with `&` from a script ignores SIGINT and SIGQUIT). A child the server
    /// starts has them at their default action: the server's dispositions are not the
    /// client's, and a child that ignored SIGINT could not be interrupted.
    ignored: SigSet,
}

/// A command of a request flagged `FLAG_CONN_ENV` (`env`: the connection's environment, or
/// why there is none): one that neither clears its environment nor carries a base starts
/// from the connection's (shared, not copied). With the size of the environment's wire form
/// when it took it, else 0.
fn with_conn_env(mut cmd: Command, env: Option<&Result<ConnEnv>>) -> Result<(Command, usize)> {
    if let Some(env) = env {
        if !cmd.env_clear && cmd.base_env.is_none() {
            let env = env.as_ref().map_err(Clone::clone)?;
            cmd.base_env = Some(env.vars.clone());
            return Ok((cmd, env.wire_len));
        }
    }
    Ok((cmd, 0))
}

/// A SpawnMany frame's commands, every entry split and decoded before any is spawned: a frame
/// with one bad entry is malformed as a whole (answered once, then closed). The entries,
/// repeats counted again, and the connection's environment once per entry that takes it, add
/// up to at most a frame's worth. `indexed` ([`FLAG_FD_INDEX`]): the entries name their fds
/// among the frame's, which the commands share (each fd passed, installed and copied into
/// each child once per frame, however many commands use it).
fn decode_many(
    body: &[u8],
    fds: Vec<OwnedFd>,
    indexed: bool,
    conn_env: Option<&Result<ConnEnv>>,
) -> Result<Vec<Command>> {
    let malformed = |why| Error::invalid("decode", "SpawnMany", why);
    let mut cmds = Vec::new();
    let mut took = 0usize;
    let mut each = |cmd: Result<Command>| -> Result<()> {
        let (cmd, env_len) = with_conn_env(cmd?, conn_env)?;
        took += env_len;
        cmds.push(cmd);
        Ok(())
    };
    let listed: usize = if indexed {
        let entries =
            frames::split_many_indexed(body, fds.len(), MAX_BATCH_REPLY).map_err(malformed)?;
        let frame: Arc<[OwnedFd]> = fds.into();
        for &(b, indices) in &entries {
            each(Command::from_wire_shared(b, &frame, indices))?;
        }
        entries.iter().map(|(b, _)| b.len()).sum()
    } else {
        let entries = frames::split_many(body, fds, MAX_BATCH_REPLY).map_err(malformed)?;
        let listed = entries.iter().map(|(b, _)| b.len()).sum();
        for (b, fds) in entries {
            each(Command::from_wire(b, fds))?;
        }
        listed
    };
    let budget = listed + took;
    if budget > super::frame::MAX_BODY {
        return Err(Error::invalid(
            "decode",
            "SpawnMany",
            "entries and the connection's environment they take add up to more than a frame \
             may carry",
        ));
    }
    Ok(cmds)
}

/// How many requests a frame whose fds were lost (`Frame::fds_lost`) holds: `None` for a
/// kind that may not lose them and go on (the connection closes), an error for a SpawnMany
/// that does not count out (malformed).
fn lost_requests(h: &Header, body: &[u8]) -> Result<Option<usize>> {
    match h.kind {
        Kind::Spawn => Ok(Some(1)),
        Kind::SpawnMany => {
            let indexed = h.flags & FLAG_FD_INDEX != 0;
            frames::count_many(body, MAX_BATCH_REPLY, h.nfds as usize, indexed)
                .map(Some)
                .map_err(|why| Error::invalid("decode", "SpawnMany", why))
        }
        _ => Ok(None),
    }
}

/// The answer to a request whose fds did not reach this server: the kernel could not install
/// them (`MSG_CTRUNC`), this process being at its fd limit.
fn fds_lost(declared: u8) -> Error {
    Error::os("recvmsg", "the request's fds", libc::EMFILE).with_reason(format!(
        "the spawn server could not take in the {declared} fds passed with the request's \
         frame (its fd limit): nothing was spawned"
    ))
}

fn no_conn_env() -> Error {
    Error::invalid("decode", "FLAG_CONN_ENV", "no Env frame came before this request")
}

/// Gate and spawn one request: its pid and pidfd.
/// `alone`: the only request of its frame, which a child parked in this thread's pool may
/// serve. One of a SpawnMany's several is cloned: under such a load the spawning threads are
/// busy anyway, and a parked child costs more CPU to hand out than a clone (its park and
/// wake, and the refill that follows).
/// `bare`: the caller knows the child by its pid alone (a status request's, in a server with
/// a [`Reaper`]): no pidfd is made where the strategy can do without (see
/// `engine::spawn_bare`). Otherwise the pidfd is always there.
fn spawn_for(
    cmd: &mut Command,
    peer: Peer,
    own: Own,
    (alone, bare): (bool, bool),
    ticket: Option<&mut Ticket<'_, StatusChild>>,
) -> Result<(i32, Option<OwnedFd>)> {
    let euid = own.euid;
    gate(cmd, peer, euid)?;
    cmd.sig_default = SigSet::from_bits(cmd.sig_default.bits() | own.ignored.bits());
    let slot = match ticket {
        Some(t) => {
            let slot_at_clone = crate::sys::clone::clone3_known_to_work();
            let hooks = !cmd.pre_exec.is_empty();
            let pin = cmd.strategy == crate::Strategy::PosixSpawn || hooks || !slot_at_clone;
            if pin {
                // posix_spawn knows the child's pid only once it may have ended (and glibc
                // waits by pid for one that failed), and so do glibc's fork (a command with
                // hooks, which no client can send) and clone(2) where clone3 is refused (a
                // seccomp filter): reaping by P_ALL waits meanwhile. The clone-vfork and
                // fork-exec strategies' clone3 writes the slot as it makes the child.
                t.pin();
            }
            Some((t.slot(), pin))
        }
        None => None,
    };
    let spawn = |cmd: &mut Command| -> Result<(i32, Option<OwnedFd>)> {
        let run = |cmd: &mut Command| {
            if bare {
                return crate::spawn::engine::spawn_bare(cmd);
            }
            let (pid, pidfd) = cmd.spawn()?.into_pidfd()?;
            Ok((pid as i32, Some(pidfd)))
        };
        match slot {
            Some((slot, late_ok)) => crate::sys::clone::with_pid_slot(slot, late_ok, || run(cmd)),
            None => run(cmd),
        }
    };
    super::watchdog::watched(|| {
        let _kept = (!alone).then(crate::sys::pool::Kept::new);
        if peer.uid == euid {
            spawn(cmd)
        } else {
            // Another uid (a root server's --allow-uid): the child starts with the peer's
            // filesystem rights, so its chdir (before its setuid step) is checked as the peer.
            sock::with_fs_ids(peer.uid, peer.gid, || spawn(cmd))
                .map_err(|e| Error::os("setfsuid", format!("uid {}", peer.uid), e))?
        }
    })
}

/// The pidfd of a spawn that was not `bare` (see [`spawn_for`]).
fn made_pidfd(pidfd: Option<OwnedFd>) -> Result<OwnedFd> {
    pidfd.ok_or_else(|| Error::os("clone3", "CLONE_PIDFD", libc::EBADF))
}

/// Whether the pidfd `raw` is readable now (its process has ended), without waiting.
fn ended_now(raw: RawFd) -> bool {
    let mut p = [libc::pollfd { fd: raw, events: libc::POLLIN, revents: 0 }];
    loop {
        match pidfd::poll(&mut p, 0) {
            Err(libc::EINTR) => continue,
            r => return matches!(r, Ok(n) if n > 0),
        }
    }
}

/// Spawn a queued request and send its reply (a status request's child goes to the reaper
/// instead: its answer is its Exit frame). If the reply had to queue, the connection's
/// token: the loop must watch it for EPOLLOUT (a spawner thread tells it through `wake`).
fn run_job(mut job: Job, own: Own, wake: Option<&OwnedFd>, watched: &Watched) -> Option<u64> {
    // Only a server with a reaper has spawner threads: one that reaps through pidfds spawns
    // every request itself (`spawn_one`), which keeps, reaps and releases each child.
    debug_assert!(watched.reaper.is_some(), "a job in a server without a reaper");
    if job.status.is_some() && job.tx.closed.load(Ordering::Relaxed) {
        // Its client is gone and nobody would learn how it ends: not started (the fds it
        // passed close with it).
        watched.release();
        return None;
    }
    // A panic here must not lose the answer (nor hold its frame's others forever).
    let bare = job.status.is_some();
    let mut ticket = watched.ticket();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        spawn_for(&mut job.cmd, job.peer, own, (job.alone, bare), ticket.as_mut())
    }))
    .unwrap_or_else(|_| Err(Error::unsupported("serve", "the spawner thread panicked")));
    let Job { tx, token, id, batch, status, cmd, .. } = job;
    drop(cmd);
    let idx = (token & 0xFFFF_FFFF) as usize;
    let generation = ((token >> 32) & 0x0FFF_FFFF) as u32;
    let queued = match (result, status) {
        (Ok((pid, _)), Some(sreq)) => {
            // No pidfd: answered when the reaper reaps it (or now, if it has already).
            let sc = StatusChild { conn: (idx, generation), id, sreq };
            watched.register(ticket, pid, Some(sc), &tx)
        }
        (Err(e), Some(sreq)) => {
            watched.release();
            status_answered(&tx, &sreq, error_frame(id, &e))
        }
        (result, None) => {
            let result = result.and_then(|(pid, pidfd)| Ok((pid, made_pidfd(pidfd)?)));
            if let Ok((pid, _)) = &result {
                watched.register(ticket, *pid, None, &tx);
            }
            tx.finished(id, batch.as_deref(), result)
        }
    };
    if !queued {
        return None;
    }
    if let Some(w) = wake {
        parent::write_all(w.as_raw_fd(), &token.to_ne_bytes());
    }
    Some(token)
}

/// A status request's answer `frame`: sent now, or with its frame's others (then counted
/// out when it goes). True when it had to queue (the loop must watch for EPOLLOUT).
fn status_answered(tx: &ConnTx, sreq: &StatusReq, frame: Vec<u8>) -> bool {
    let Some((out, n)) = sreq.answer(frame) else { return false };
    tx.answered(n);
    tx.send(&[&out], Vec::new())
}

/// The refusal of an Exit-frame request by a server with a reaper.
fn no_exit_frames() -> Error {
    Error::unsupported(
        "serve",
        "no Exit frames from this server: it reaps its children by SIGCHLD and the kernel \
         records their status in their pidfds (PIDFD_INFO_EXIT)",
    )
}

/// A spawner thread: take requests until the loop stops.
fn spawner(jobs: &Jobs, wake: &OwnedFd, own: Own, watched: &Watched) {
    loop {
        let job = {
            let mut q = jobs.lock();
            loop {
                if q.1 {
                    return;
                }
                if let Some(j) = q.0.pop_front() {
                    break j;
                }
                if crate::sys::pool::wants_refill() {
                    // Off the request path: one child at a time, looking at the queue between.
                    drop(q);
                    crate::sys::pool::refill();
                    q = jobs.lock();
                    continue;
                }
                q = jobs.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        let _ = run_job(job, own, Some(wake), watched);
    }
}
