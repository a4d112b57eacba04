//! [`Client`]: a connection to a spawn server. Sends a [`Command`] (with the caller's cwd,
//! environment and standard streams filled in) and hands back a [`Child`] with the same API
//! as a local spawn; many requests may be in flight ([`Client::submit`] / [`Client::receive`]).

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::auth::{self, Key, NONCE_LEN};
use super::frame::{
    self as frames, Expect, Header, Inbox, Kind, FLAG_BATCH_REPLY, FLAG_CONN_ENV, FLAG_FD_INDEX,
    FLAG_STATUS, MAX_BODY,
};
use super::reply;
use super::server::key_path_for;
use crate::error::{quoted, Error, ErrorKind, Result};
use crate::spawn::command::Command;
use crate::spawn::options::Stdio;
use crate::spawn::wire::{Fill, Filled};
use crate::sys::sock::{self, CmsgBuf};
use crate::sys::{environ, parent, pidfd, this_process};
use crate::{Child, ExitStatus};

/// The environment variable naming a key file (else `SOCKET.key` is read).
pub const KEY_ENV: &str = "SPAWNKIT_SERVER_KEY";
/// The environment variable naming a server socket (read by `spawnkit run` and the Python
/// face; the library reads it only in [`Client::from_env`]).
pub const SERVER_ENV: &str = "SPAWNKIT_SERVER";

const EXPECT_REPLY: Expect = Expect {
    kinds: &[Kind::Spawned, Kind::SpawnedMany, Kind::Error, Kind::Exit],
    max_body: MAX_BODY,
    fds: true,
};

/// A request sent and not answered yet: the parent ends of the pipes made for it.
struct Pending {
    pipes: [Option<OwnedFd>; 3],
    kill_on_drop: bool,
    /// A status request: answered by an Exit frame (or an Error), never with a child.
    status: bool,
}

/// An authenticated connection to a spawn server (`spawnkit serve`, or a private server
/// from [`PrivateServer`](crate::serve::PrivateServer)).
///
/// ```no_run
/// use spawnkit::{serve::Client, Command, Stdio};
/// let mut client = Client::connect("/run/user/1000/spawnkit/server.sock")?;
/// let mut child = client.spawn(Command::new("echo").arg("hi").stdout(Stdio::Pipe))?;
/// assert_eq!(child.communicate(None, None)?.stdout, b"hi\n");
/// # Ok::<(), spawnkit::Error>(())
/// ```
///
/// What the child gets that a local child would take from the spawning process is filled in
/// from this one: the cwd and environment (where the command sets none), and for each
/// standard stream left `Inherit` this process's own fd 0, 1 or 2 (passed by `SCM_RIGHTS`).
/// `Stdio::Pipe` pipes are made here; the child's ends are passed. Fds of `Stdio::File`,
/// `Stdio::Owned` and maps are passed as duplicates and stay open in the command.
///
/// The children may be waited for on other threads while this thread goes on spawning: a
/// thread that waits on the connection (a child's `wait` reading its Exit frame on a kernel
/// before 6.15, a [`status`](Client::status) request waiting for its child's end, an
/// answer) sleeps without holding it.
pub struct Client {
    io: Arc<Mutex<Io>>,
}

/// The connection itself, shared with the children it started when they learn their exit
/// status from Exit frames (kernels without `PIDFD_INFO_EXIT`).
pub(crate) struct Io {
    sock: UnixStream,
    next_id: u64,
    pending: HashMap<u64, Pending>,
    done: VecDeque<(u64, Result<Child>)>,
    inbox: Inbox,
    cmsg: CmsgBuf,
    fds: Vec<OwnedFd>,
    broken: Option<Error>,
    /// Ask for Exit frames (the kernel cannot tell a non-parent the exit status).
    want_exit: bool,
    /// Exit frames received: pid -> status, until the child asks.
    exits: HashMap<i32, ExitStatus>,
    /// Answers to status requests, in the order they came: how the child ended, or why it
    /// did not start.
    statuses: VecDeque<(u64, Result<ExitStatus>)>,
    /// The unsent tail of a request the async face could send only in part (the socket
    /// filled up): it goes out before any other byte.
    out_rest: Vec<u8>,
    /// Requests whose answer nobody will take (an async receive dropped): dropped on arrival.
    abandoned: std::collections::HashSet<u64>,
    /// The environment the server holds for this connection (the last Env frame sent), and
    /// the size of that frame's body (what each batch entry that takes it counts toward the
    /// frame's budget, as the server counts it).
    env_sent: Option<(Env, usize)>,
    /// When [`Client::wake`] last sent a Wake frame: the next lone request within
    /// [`EARLY_WAKE`] of it sends none of its own.
    woken_at: Option<Instant>,
    /// A thread waits in `poll` for the connection's next bytes without holding its lock
    /// ([`next_bytes`]); the other threads that wait for bytes wait for its news instead.
    reader: bool,
    /// How many threads wait on `news`.
    waiting: usize,
    /// Signalled when the reader's wait ends (bytes taken, or not): the waiting threads look
    /// again.
    news: Arc<Condvar>,
    /// Raised when a thread reads the connection (or breaks it) while the reader waits
    /// without the lock (what the reader waits for may be among what was read): made when a
    /// thread first becomes the reader. Never passed to a child (`encode_request`).
    kick: Option<OwnedFd>,
}

/// How long after [`Client::wake`] a lone request counts on that Wake frame rather than
/// sending its own: within the server's window (100 µs), with room for the request's own
/// filling in.
const EARLY_WAKE: Duration = Duration::from_micros(60);

/// An environment: (name, value) pairs in order.
type Env = Arc<[(OsString, OsString)]>;

/// A client's own fds ([`Io::own_fds`]).
type OwnFds = [RawFd; 2];

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("in_flight", &self.in_flight()).finish_non_exhaustive()
    }
}

fn lock(io: &Mutex<Io>) -> MutexGuard<'_, Io> {
    io.lock().unwrap_or_else(|e| e.into_inner())
}

fn io_err(step: &'static str, subject: impl Into<String>, e: &std::io::Error) -> Error {
    Error::os(step, subject, e.raw_os_error().unwrap_or(libc::EIO))
}

fn connect_socket(socket: &Path) -> Result<UnixStream> {
    super::server::check_socket_path("connect", socket)?;
    UnixStream::connect(socket).map_err(|e| io_err("connect", quoted(socket), &e))
}

/// A status request's id where a child's answer was asked for.
fn status_id(id: u64) -> Error {
    Error::invalid(
        "receive",
        format!("request {id}"),
        "a status request: its answer comes from receive_status",
    )
}

fn child_id(id: u64) -> Error {
    Error::invalid(
        "receive",
        format!("request {id}"),
        "it asked for a child, not a status: receive its child",
    )
}

fn protocol(why: impl Into<String>) -> Error {
    Error::new(ErrorKind::Os, "serve", "connection").with_reason(why)
}

impl Client {
    /// Connect to the server at `socket`, with the key from `$SPAWNKIT_SERVER_KEY` if set,
    /// else from `SOCKET.key`.
    pub fn connect(socket: impl AsRef<Path>) -> Result<Client> {
        let socket = socket.as_ref();
        let key_file = match std::env::var_os(KEY_ENV).filter(|v| !v.is_empty()) {
            Some(p) => PathBuf::from(p),
            None => key_path_for(socket),
        };
        Client::connect_with_key_file(socket, &key_file)
    }

    /// Connect to `$SPAWNKIT_SERVER`, if it is set.
    pub fn from_env() -> Option<Result<Client>> {
        let s = std::env::var_os(SERVER_ENV).filter(|v| !v.is_empty())?;
        Some(Client::connect(PathBuf::from(s)))
    }

    /// Connect with the key read from `key_file`.
    pub fn connect_with_key_file(socket: impl AsRef<Path>, key_file: &Path) -> Result<Client> {
        // The socket first: with no server there, that is the error to report (not its key).
        let sock = connect_socket(socket.as_ref())?;
        let key = Key::read_file(key_file)?;
        Client::from_stream(sock, &key)
    }

    /// Connect with this key.
    pub fn connect_with_key(socket: impl AsRef<Path>, key: &Key) -> Result<Client> {
        Client::from_stream(connect_socket(socket.as_ref())?, key)
    }

    /// Authenticate over an already connected stream (a private server's socketpair end).
    pub fn from_stream(sock: UnixStream, key: &Key) -> Result<Client> {
        // The server must be ours (or root's): a process of another user listening where we
        // look (a squatted /tmp/spawnkit-UID, say) would otherwise get our environment, our
        // fds and the power to forge our children's output, if it had a key we can read.
        let (_, uid, _) =
            sock::peer_cred(sock.as_fd()).map_err(|e| Error::os("getsockopt", "SO_PEERCRED", e))?;
        let me = crate::sys::parent::geteuid();
        if uid != me && uid != 0 {
            return Err(protocol(format!(
                "the server runs as uid {uid}, not as this user ({me}) or root: refused"
            )));
        }
        let mut io = Io {
            sock,
            next_id: 1,
            pending: HashMap::new(),
            done: VecDeque::new(),
            inbox: Inbox::new(),
            cmsg: CmsgBuf::new(),
            fds: Vec::new(),
            broken: None,
            want_exit: !super::server::kernel_has_pidfd_exit_info(),
            exits: HashMap::new(),
            statuses: VecDeque::new(),
            out_rest: Vec::new(),
            abandoned: std::collections::HashSet::new(),
            env_sent: None,
            woken_at: None,
            reader: false,
            waiting: 0,
            news: Arc::new(Condvar::new()),
            kick: None,
        };
        io.handshake(key)?;
        Ok(Client { io: Arc::new(Mutex::new(io)) })
    }

    /// Ask the server for an Exit frame per child and take exit statuses from those rather
    /// than from the pidfd: what this client does by itself on a kernel before 6.15 (no
    /// `PIDFD_INFO_EXIT`); settable for tests. A server with a reaper (`spawnkit serve`, a
    /// private server, on Linux 6.15+) refuses such requests.
    pub fn use_exit_frames(&mut self, on: bool) {
        lock(&self.io).want_exit = on;
    }

    /// Send a request; its answer comes from [`receive`](Client::receive) under the id
    /// returned. Nothing waits for the server here (unless the socket is full).
    pub fn submit(&mut self, cmd: &Command) -> Result<u64> {
        lock(&self.io).submit(cmd)
    }

    /// Tell the server that a request is coming, for a caller with work of its own to do
    /// before it spawns: the server's CPU wakes during that work instead of at the request
    /// (a Wake frame, docs/protocol.md "Wake"). A lone request sent within 60 µs sends no
    /// Wake of its own. Nothing is sent
    /// while requests are in flight (the server is busy with them), nor while another thread
    /// holds the connection's lock (sending, or reading what came: never waited for here).
    /// An error only if the connection is broken.
    pub fn wake(&mut self) -> Result<()> {
        match self.io.try_lock() {
            Ok(mut io) => io.wake(),
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner().wake(),
            Err(std::sync::TryLockError::WouldBlock) => Ok(()),
        }
    }

    /// How many submitted requests have no answer yet (received or not).
    pub fn in_flight(&self) -> usize {
        let io = lock(&self.io);
        io.pending.len() + io.done.len() + io.statuses.len()
    }

    /// The next answer: the request's id and its child or error (in the order the server
    /// answered). Blocks until one arrives; an error if none is in flight.
    pub fn receive(&mut self) -> Result<(u64, Result<Child>)> {
        let (id, child) = wait_for(&self.io, Io::next_answer)?;
        Ok((id, child.map(|c| self.watched(c))))
    }

    /// The answer to request `id`, keeping others for [`receive`](Client::receive).
    pub fn receive_id(&mut self, id: u64) -> Result<Child> {
        let child = wait_for(&self.io, |io| io.answer_to(id))?;
        Ok(self.watched(child))
    }

    /// Spawn through the server and wait for its answer: the same [`Child`] API as a local
    /// spawn (its parent is the server; see docs/protocol.md for what differs).
    pub fn spawn(&mut self, cmd: &Command) -> Result<Child> {
        let id = self.submit(cmd)?;
        self.receive_id(id)
    }

    /// Send several requests in one message (a SpawnMany frame per 64 commands, the
    /// caller's cwd and environment read once for all): their ids, in order; the answers
    /// come from [`receive`](Client::receive) as for [`submit`](Client::submit). A command
    /// that cannot be encoded fails the call before anything is sent. On an error after
    /// some frames went out (a fd to pass that is not open, in a later frame), the requests
    /// sent are in flight: [`in_flight`](Client::in_flight) counts them and
    /// [`receive`](Client::receive) answers them.
    pub fn submit_many<'c>(
        &mut self,
        cmds: impl IntoIterator<Item = &'c Command>,
    ) -> Result<Vec<u64>> {
        let cmds: Vec<&Command> = cmds.into_iter().collect();
        lock(&self.io).submit_many(&cmds, false).map_err(|(_, e)| e)
    }

    /// Submit all of `cmds` (keeping at most `window` in flight, sent in batches: one
    /// message for as many as the window has room for) and return their children or
    /// errors in order. A request a server that reaps its own children turns away (it
    /// holds half its fd limit of them already: EAGAIN) is its item's error, not sent again.
    pub fn spawn_many<'c>(
        &mut self,
        cmds: impl IntoIterator<Item = &'c Command>,
        window: usize,
    ) -> Result<Vec<Result<Child>>> {
        let window = window.max(1);
        let cmds: Vec<&Command> = cmds.into_iter().collect();
        let mut out: Vec<Option<Result<Child>>> = (0..cmds.len()).map(|_| None).collect();
        let mut index: HashMap<u64, usize> = HashMap::new();
        let mut next = 0;
        while next < cmds.len() {
            while index.len() >= window {
                let (id, r) = self.receive()?;
                if let Some(i) = index.remove(&id) {
                    out[i] = Some(r);
                }
            }
            let room = (window - index.len()).min(cmds.len() - next);
            let chunk = &cmds[next..next + room];
            let batch = lock(&self.io).submit_many(chunk, false);
            match batch {
                Ok(ids) => {
                    for (k, id) in ids.into_iter().enumerate() {
                        index.insert(id, next + k);
                    }
                }
                Err((_, e)) if lock(&self.io).broken.is_some() => return Err(e),
                // A command that cannot be encoded or sent: the ones before it that went
                // out are in flight; the others one by one, so that its error is that
                // item's alone.
                Err((sent, _)) => {
                    let done = sent.len();
                    for (k, id) in sent.into_iter().enumerate() {
                        index.insert(id, next + k);
                    }
                    for (k, c) in chunk.iter().enumerate().skip(done) {
                        match self.submit(c) {
                            Ok(id) => {
                                index.insert(id, next + k);
                            }
                            Err(e) if lock(&self.io).broken.is_some() => return Err(e),
                            Err(e) => out[next + k] = Some(Err(e)),
                        }
                    }
                }
            }
            next += room;
        }
        while !index.is_empty() {
            let (id, r) = self.receive()?;
            if let Some(i) = index.remove(&id) {
                out[i] = Some(r);
            }
        }
        Ok(out.into_iter().map(|r| r.unwrap_or_else(|| Err(protocol("lost")))).collect())
    }

    /// Run `cmd` through the server and wait for it to end: how it ended, as
    /// `std::process::Command::status` gives (or why it did not start). The server keeps the
    /// child's pidfd and answers with its status when it ends (docs/protocol.md, "Status
    /// requests"): this process holds no fd for it and reads nothing from one. A command
    /// with a `Stdio::Pipe` is refused (no child comes back to hold the other end); use
    /// [`spawn`](Client::spawn) for those.
    pub fn status(&mut self, cmd: &Command) -> Result<ExitStatus> {
        let mut io = lock(&self.io);
        let id = match io.submit_with(cmd, false, true)? {
            Some(id) => id,
            None => unreachable!("a blocking submit sends or fails"),
        };
        let (io, (_, status)) = wait_until(&self.io, io, |io| io.status_answer(|i| i == id))?;
        drop(io);
        status
    }

    /// Send status requests for `cmds` in as few messages as the limits allow (as
    /// [`submit_many`](Client::submit_many)); their ids, in order. Each is answered once,
    /// by [`receive_status`](Client::receive_status): how its child ended, or why it did
    /// not start. At most 1,024 may be unanswered on one connection
    /// ([`MAX_STATUS_IN_FLIGHT`](crate::serve::MAX_STATUS_IN_FLIGHT)); beyond, the server refuses them (EAGAIN).
    pub fn submit_status_many<'c>(
        &mut self,
        cmds: impl IntoIterator<Item = &'c Command>,
    ) -> Result<Vec<u64>> {
        let cmds: Vec<&Command> = cmds.into_iter().collect();
        lock(&self.io).submit_many(&cmds, true).map_err(|(_, e)| e)
    }

    /// The next answer to a status request, in the order the children ended: its id, and
    /// how its child ended or why it did not start. Blocks until one arrives; an error if
    /// none is in flight.
    pub fn receive_status(&mut self) -> Result<(u64, Result<ExitStatus>)> {
        wait_for(&self.io, |io| io.status_answer(|_| true))
    }

    /// Run all of `cmds` and wait for every one (keeping at most `window` in flight, sent in
    /// batches): their statuses or errors, in order. The spawn-and-wait of a build system or
    /// a test runner, for the least CPU of the calling thread: no fd, no pidfd read per
    /// child (see [`status`](Client::status)). A request the server turns away because it
    /// holds as many status children as it may (EAGAIN, step `serve`: the server admits or
    /// turns away a whole message) is sent again once one of this call's own is answered;
    /// with none of them in flight, again in messages half as large, and that error is the
    /// item's answer only when it comes to a request sent alone.
    pub fn status_many<'c>(
        &mut self,
        cmds: impl IntoIterator<Item = &'c Command>,
        window: usize,
    ) -> Result<Vec<Result<ExitStatus>>> {
        // The server counts this connection's unanswered status requests, those of earlier
        // calls too: the window leaves room for them.
        let max = super::server::MAX_STATUS_IN_FLIGHT;
        let before = lock(&self.io).pending.values().filter(|p| p.status).count();
        let mut window = window.clamp(1, max.saturating_sub(before).max(1));
        let cmds: Vec<&Command> = cmds.into_iter().collect();
        let mut out: Vec<Option<Result<ExitStatus>>> = (0..cmds.len()).map(|_| None).collect();
        let mut index: HashMap<u64, usize> = HashMap::new();
        // Items to send, in order (an item turned away goes back to the front).
        let mut todo: VecDeque<usize> = (0..cmds.len()).collect();
        // Items turned away since the last answer of ours: sent again after the next one.
        let mut refused: Vec<usize> = Vec::new();
        while !todo.is_empty() || !index.is_empty() {
            // Taken per step, not for the whole call: a remote child reading its Exit frame
            // (a kernel before 6.15) is not held up behind the batch.
            let mut io = lock(&self.io);
            let room = window.saturating_sub(index.len()).min(todo.len());
            if room > 0 {
                let items: Vec<usize> = todo.drain(..room).collect();
                let chunk: Vec<&Command> = items.iter().map(|&i| cmds[i]).collect();
                match io.submit_many(&chunk, true) {
                    Ok(ids) => index.extend(ids.into_iter().zip(items.iter().copied())),
                    Err((_, e)) if io.broken.is_some() => return Err(e),
                    // A command that cannot be encoded or sent: the ones before it that went
                    // out are in flight; the others one by one, so that its error is that
                    // item's alone.
                    Err((sent, _)) => {
                        let done = sent.len();
                        index.extend(sent.into_iter().zip(items.iter().copied()));
                        for &i in &items[done..] {
                            match io.submit_many(std::slice::from_ref(&cmds[i]), true) {
                                Ok(id) => index.extend(id.into_iter().map(|id| (id, i))),
                                Err((_, e)) if io.broken.is_some() => return Err(e),
                                Err((_, e)) => out[i] = Some(Err(e)),
                            }
                        }
                    }
                }
                continue;
            }
            // One of this call's (answers to earlier requests stay for `receive_status`).
            let wanted = |io: &mut Io| io.status_answer(|i| index.contains_key(&i));
            let (io, (id, r)) = wait_until(&self.io, io, wanted)?;
            drop(io);
            let Some(i) = index.remove(&id) else { continue };
            let turned_away = matches!(&r, Err(e) if e.step() == "serve"
                && e.raw_os_error() == Some(libc::EAGAIN));
            if turned_away && !index.is_empty() {
                refused.push(i);
                continue;
            }
            if turned_away && window > 1 {
                // Nothing of ours in flight and the message still too large for the room the
                // server has: smaller messages.
                window = window.div_ceil(2);
                refused.push(i);
                refused.sort_unstable();
                for i in refused.drain(..).rev() {
                    todo.push_front(i);
                }
                continue;
            }
            out[i] = Some(r);
            // An answer of ours: room again for what was turned away (first, in order).
            refused.sort_unstable();
            for i in refused.drain(..).rev() {
                todo.push_front(i);
            }
        }
        Ok(out.into_iter().map(|r| r.unwrap_or_else(|| Err(protocol("lost")))).collect())
    }

    /// Read the answers that have arrived, without waiting, and return the ids of every
    /// answer waiting to be taken (by [`receive_id`](Client::receive_id) or
    /// [`receive`](Client::receive), or for a status request by
    /// [`receive_status`](Client::receive_status), which then return at once): for a caller that waits
    /// for the connection's readiness itself, an event loop watching
    /// [`as_raw_fd`](AsRawFd::as_raw_fd). An error if the connection broke.
    pub fn poll_answers(&mut self) -> Result<Vec<u64>> {
        let mut io = lock(&self.io);
        let mut answered = Vec::new();
        if io.pending.is_empty() {
            if let Some(e) = &io.broken {
                return Err(e.clone());
            }
        } else {
            // Until the socket is drained (each recvmsg stops where another answer's fds
            // begin), so a level-triggered watcher is not woken again for what is here now.
            while io.try_collect(&mut answered)? && !io.pending.is_empty() {}
        }
        answered.clear();
        answered.extend(io.done.iter().map(|(id, _)| *id));
        answered.extend(io.statuses.iter().map(|(id, _)| *id));
        Ok(answered)
    }

    /// Whether this connection's children learn their exit status from Exit frames (a
    /// kernel before 6.15, see [`use_exit_frames`](Client::use_exit_frames)): their status
    /// is then read from the connection, not from the pidfd alone.
    pub fn uses_exit_frames(&self) -> bool {
        lock(&self.io).want_exit
    }

    /// The connection, for the async face (which shares it).
    #[cfg(feature = "tokio")]
    pub(crate) fn io(&self) -> &Arc<Mutex<Io>> {
        &self.io
    }

    /// A child whose status comes in Exit frames gets a handle on this connection.
    fn watched(&self, mut child: Child) -> Child {
        if lock(&self.io).want_exit {
            child.set_exit_watch(ExitWatch(self.io.clone()));
        }
        child
    }
}

/// The connection's socket: readable when answers arrive (take them with
/// [`Client::poll_answers`]). Only for readiness: reading or writing it breaks the protocol.
impl AsRawFd for Client {
    fn as_raw_fd(&self) -> RawFd {
        lock(&self.io).sock.as_raw_fd()
    }
}

/// How a remote child waits for its Exit frame: it reads the connection itself, keeping
/// every other frame for the client, and without holding the connection while it sleeps.
pub(crate) struct ExitWatch(Arc<Mutex<Io>>);

impl ExitWatch {
    /// The status of `pid` once its Exit frame has come; waits until `deadline` (`None`:
    /// forever; a past one: only what has arrived).
    pub(crate) fn wait(&self, pid: i32, deadline: Option<Instant>) -> Result<Option<ExitStatus>> {
        let mut io = lock(&self.0);
        let mut looked = false;
        loop {
            if let Some(s) = io.exits.remove(&pid) {
                return Ok(Some(s));
            }
            if let Some(e) = &io.broken {
                return Err(e.clone());
            }
            if looked && deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            io = next_bytes(&self.0, io, deadline)?;
            looked = true;
        }
    }
}

/// Wait until `take` finds what the caller waits for in the connection `shared` (locked as
/// `io`), reading the connection meanwhile ([`next_bytes`]); the connection, still locked,
/// and what was found.
fn wait_until<'a, T>(
    shared: &'a Arc<Mutex<Io>>,
    mut io: MutexGuard<'a, Io>,
    mut take: impl FnMut(&mut Io) -> Result<Option<T>>,
) -> Result<(MutexGuard<'a, Io>, T)> {
    loop {
        if let Some(t) = take(&mut io)? {
            return Ok((io, t));
        }
        io = next_bytes(shared, io, None)?;
    }
}

/// [`wait_until`] from a connection not locked yet, and leaving it unlocked.
fn wait_for<T>(
    shared: &Arc<Mutex<Io>>,
    take: impl FnMut(&mut Io) -> Result<Option<T>>,
) -> Result<T> {
    let (io, t) = wait_until(shared, lock(shared), take)?;
    drop(io);
    Ok(t)
}

/// Milliseconds until `deadline` for `poll` (rounded up; `None`: -1, forever).
fn poll_ms(deadline: Option<Instant>) -> i32 {
    match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
        }
    }
}

/// Wait for the server's next bytes and take them, without holding the connection's lock
/// while asleep: other threads go on using the connection meanwhile (another thread's
/// spawn, a child's wait for its Exit frame, a status request's wait for its child's end).
/// One thread at a time waits in `poll` (the reader); the others that wait for bytes wait
/// for its news (a condition variable) rather than reading themselves. A thread that reads
/// the connection under the lock while the reader sleeps (a send that found the socket
/// full, the async face) raises the reader's kick, so what it took is looked at. Returns the
/// connection locked again when bytes were taken, when the reader's wait ended, or when
/// `deadline` passed: the caller looks again.
///
/// It waits in `poll` for POLLIN rather than in a blocking `recvmsg`: a thread asleep in
/// `recvmsg` on a Unix socket is also woken each time the server reads a request of ours and
/// frees send space (the socket has one wait queue), which costs this thread a wake-up and a
/// sleep per request; `poll`'s wait sees the wake-up's POLLOUT and stays asleep.
///
/// With at most one request in flight, `poll` comes first: for a lone spawn just sent, its
/// answer cannot be there yet, and a `recvmsg` tried first would only say EAGAIN, one
/// system call on a lone request's path when the client and the server share a CPU (a
/// status request or an Exit frame that has come already costs one `poll` more). With more
/// in flight, answers are often waiting already: `recvmsg` first. A past `deadline` takes
/// everything that has come, without waiting.
///
/// While nothing else holds the connection (no child watching Exit frames, no async face:
/// its `Arc` is this caller's alone), no other thread can take its lock, and the wait is the
/// plain one: `poll` on the socket alone, the lock kept.
fn next_bytes<'a>(
    shared: &'a Arc<Mutex<Io>>,
    mut io: MutexGuard<'a, Io>,
    deadline: Option<Instant>,
) -> Result<MutexGuard<'a, Io>> {
    if let Some(e) = &io.broken {
        return Err(e.clone());
    }
    let ms = poll_ms(deadline);
    if ms == 0 {
        // All that has come (one recvmsg stops where a reply's fds begin; a reader asleep
        // meanwhile is kicked by `recv`).
        while io.take_bytes()? {}
        return Ok(io);
    }
    if io.reader {
        // Another thread waits for the connection's bytes: its news, when it has some.
        io.waiting += 1;
        let news = io.news.clone();
        io = match deadline {
            None => news.wait(io).unwrap_or_else(|e| e.into_inner()),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                news.wait_timeout(io, left).unwrap_or_else(|e| e.into_inner()).0
            }
        };
        io.waiting -= 1;
        return Ok(io);
    }
    if io.pending.len() > 1 && io.take_bytes()? {
        return Ok(io);
    }
    // Every other handle on the connection is a clone of this `Arc` (no `Weak` is ever made:
    // an upgrade during the wait would block on the lock for all of it), made through the
    // `Client` this thread holds, or held by a child or an async face already.
    debug_assert_eq!(Arc::weak_count(shared), 0);
    let alone = Arc::strong_count(shared) == 1;
    if !alone && io.kick.is_none() {
        io.kick = parent::eventfd().ok();
    }
    let sock = libc::pollfd { fd: io.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // (The poll's outcome, whether the socket is readable, the connection locked again.)
    let (r, readable, mut io) = match io.kick.as_ref().map(|k| k.as_raw_fd()) {
        // Nobody else can hold the connection: wait on the socket alone, with its lock.
        _ if alone => {
            let mut p = [sock];
            let r = pidfd::poll(&mut p, ms);
            (r, p[0].revents != 0, io)
        }
        kick => {
            // Without a kick (no eventfd could be made), looked at again every 10 ms.
            let ms = if kick.is_some() { ms } else { ms.clamp(0, 10) + 10 * i32::from(ms < 0) };
            // (A negative fd is left out by poll.)
            let mut p = [sock, libc::pollfd { fd: kick.unwrap_or(-1), ..sock }];
            io.reader = true;
            drop(io);
            // The socket and the kick stay open: `shared` (this connection) outlives the call.
            let r = pidfd::poll(&mut p, ms);
            let mut io = lock(shared);
            io.reader = false;
            if p[1].revents != 0 {
                if let Some(k) = &io.kick {
                    parent::eventfd_take(k);
                }
            }
            (r, p[0].revents != 0, io)
        }
    };
    let out = match r {
        Ok(_) if readable => io.take_bytes().map(drop),
        Ok(_) | Err(libc::EINTR) => Ok(()),
        Err(e) => Err(Error::os("poll", "server connection", e)),
    };
    if io.waiting > 0 {
        io.news.notify_all();
    }
    out.map(|()| io)
}

impl Io {
    fn handshake(&mut self, key: &Key) -> Result<()> {
        let timeout = Some(Duration::from_secs(10));
        let _ = self.sock.set_read_timeout(timeout);
        let _ = self.sock.set_write_timeout(timeout);
        // A Failure in place of the challenge: turned away (its text says why).
        let challenge =
            Expect { kinds: &[Kind::Challenge, Kind::Failure], max_body: 256, fds: false };
        let (kind, body) = self.read_frame_kind(challenge)?;
        if kind == Kind::Failure {
            return Err(protocol(format!(
                "refused: {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .filter(|c| !c.is_control())
                    .collect::<String>()
            )));
        }
        let ns: [u8; NONCE_LEN] =
            body.try_into().map_err(|_| protocol("the server's challenge is not 32 bytes"))?;
        let (answer, nc) = auth::client_answer(key, &ns)?;
        let h = Header { len: answer.len() as u32, kind: Kind::Answer, flags: 0, nfds: 0, id: 0 };
        self.send_all(&[&h.encode(), &answer], &[])?;
        let reply = Expect { kinds: &[Kind::Welcome, Kind::Failure], max_body: 256, fds: false };
        let (kind, body) = self.read_frame_kind(reply)?;
        if kind == Kind::Failure {
            return Err(Error::new(ErrorKind::Os, "authenticate", "")
                .with_reason("the server refused the key (wrong key file?)"));
        }
        if !auth::client_check(key, &ns, &nc, &body) {
            return Err(Error::new(ErrorKind::Os, "authenticate", "")
                .with_reason("the server did not prove the key: not the server we meant"));
        }
        let _ = self.sock.set_read_timeout(None);
        let _ = self.sock.set_write_timeout(None);
        Ok(())
    }

    /// One frame during the handshake (blocking; no fds allowed).
    fn read_frame_kind(&mut self, expect: Expect) -> Result<(Kind, Vec<u8>)> {
        loop {
            match self.inbox.next(expect) {
                Ok(Some((f, body))) => return Ok((f.header.kind, body.to_vec())),
                Ok(None) => {}
                Err(e) => return Err(protocol(e.to_string())),
            }
            self.recv(false)?;
        }
    }

    /// The fds of this client's own that a command must not pass: its connection, and its
    /// kick when it has one (-1 otherwise, no fd's number).
    fn own_fds(&self) -> OwnFds {
        [self.sock.as_raw_fd(), self.kick.as_ref().map_or(-1, |k| k.as_raw_fd())]
    }

    /// The connection failed: every later call fails so. A reader asleep without the lock
    /// is kicked, so it and the threads waiting for its news learn it now.
    fn set_broken(&mut self, e: &Error) {
        self.broken = Some(e.clone());
        self.kick_reader();
    }

    /// Wake the reader asleep without the lock, if there is one ([`next_bytes`]): what
    /// changed under the lock may be what it waits for.
    fn kick_reader(&self) {
        if let (true, Some(k)) = (self.reader, &self.kick) {
            parent::eventfd_raise(k);
        }
    }

    /// Take what has come (one recvmsg, not waiting) into answers; false when nothing had.
    /// A failure breaks the connection.
    fn take_bytes(&mut self) -> Result<bool> {
        let got = self.recv(true).and_then(|got| self.collect().map(|()| got));
        if let Err(e) = &got {
            self.set_broken(e);
        }
        got
    }

    /// One recvmsg into the inbox; an error on EOF.
    fn recv(&mut self, dontwait: bool) -> Result<bool> {
        // What this read takes may be what a reader asleep without the lock waits for.
        self.kick_reader();
        self.fds.clear();
        let spare = self.inbox.spare(4096);
        match sock::recv_with_fds(self.sock.as_fd(), spare, &mut self.fds, &mut self.cmsg, dontwait)
        {
            Ok(r) if r.bytes == 0 => Err(protocol("the server closed the connection")),
            Ok(r) => {
                self.inbox.filled(r.bytes, self.fds.drain(..));
                if r.truncated() {
                    return Err(protocol("control data cut short"));
                }
                Ok(true)
            }
            Err(libc::EAGAIN) if dontwait => Ok(false),
            Err(libc::EAGAIN) => {
                Err(Error::new(ErrorKind::Timeout, "serve", "connection").with_reason("no answer"))
            }
            Err(e) => Err(Error::os("recvmsg", "server connection", e)),
        }
    }

    /// Send all of `parts`, waiting while the socket is full; a failure after some of it went
    /// out leaves the connection out of step: broken for every later call.
    fn send_all(&mut self, parts: &[&[u8]], fds: &[RawFd]) -> Result<()> {
        self.send_all_counted(parts, fds).map_err(|(e, out_of_step)| {
            if out_of_step {
                self.set_broken(&e);
            }
            e
        })
    }

    /// A whole frame: [`send_all`](Io::send_all), or without waiting when `nonblocking`
    /// ([`send_some`](Io::send_some): false when the socket is full and nothing went out).
    fn send(&mut self, parts: &[&[u8]], fds: &[RawFd], nonblocking: bool) -> Result<bool> {
        if nonblocking {
            self.send_some(parts, fds)
        } else {
            self.send_all(parts, fds).map(|()| true)
        }
    }

    /// Send every byte; the fds go with the first. While the socket is full, replies are
    /// read (so a server waiting for us to read is never waited for in turn). On error, says
    /// whether any byte went out (then the stream is out of step).
    fn send_all_counted(
        &mut self,
        parts: &[&[u8]],
        fds: &[RawFd],
    ) -> std::result::Result<(), (Error, bool)> {
        if !self.out_rest.is_empty() {
            // What the async face left half sent goes first, whole.
            let rest = std::mem::take(&mut self.out_rest);
            self.send_all_counted(&[&rest], &[]).map_err(|(e, _)| (e, true))?;
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut sent = 0;
        let mut fds = fds;
        let mut rest: Vec<u8> = Vec::new();
        while sent < total {
            let r = if sent == 0 {
                sock::send_with_fds(self.sock.as_fd(), parts, fds, true)
            } else {
                if rest.is_empty() {
                    rest = parts.concat();
                }
                sock::send_with_fds(self.sock.as_fd(), &[&rest[sent..]], &[], true)
            };
            match r {
                Ok(n) => {
                    sent += n;
                    fds = &[];
                }
                Err(libc::EAGAIN) => {
                    let mut p = [libc::pollfd {
                        fd: self.sock.as_raw_fd(),
                        events: libc::POLLIN | libc::POLLOUT,
                        revents: 0,
                    }];
                    match pidfd::poll(&mut p, -1) {
                        Ok(_) | Err(libc::EINTR) => {}
                        Err(e) => {
                            return Err((Error::os("poll", "server connection", e), sent > 0))
                        }
                    }
                    if p[0].revents & libc::POLLIN != 0 {
                        self.recv(true).and_then(|_| self.collect()).map_err(|e| (e, true))?;
                    }
                }
                // A fd that is not open (EBADF) refuses the whole message: nothing went out.
                Err(libc::EBADF) if sent == 0 && !fds.is_empty() => {
                    return Err((
                        Error::os("sendmsg", "the fds to pass", libc::EBADF).with_reason(
                            "a fd to pass to the server is not open in this process \
                             (an inherited fd 0-2 that is closed?)",
                        ),
                        false,
                    ));
                }
                Err(e) => return Err((Error::os("sendmsg", "server connection", e), sent > 0)),
            }
        }
        Ok(())
    }

    /// Send a request; its answer comes from [`receive`](Client::receive) under the id
    /// returned. Nothing waits for the server here (unless the socket is full).
    fn submit(&mut self, cmd: &Command) -> Result<u64> {
        match self.submit_with(cmd, false, false)? {
            Some(id) => Ok(id),
            None => unreachable!("a blocking submit sends or fails"),
        }
    }

    /// Before requests that start from the connection's environment: an Env frame with
    /// the call's, unless the server holds that one already (sent alone, without fds: a fd
    /// rides on the first byte of its message, and must reach the server with the frame
    /// that declares it). False when `nonblocking` and the socket is full (nothing sent).
    fn send_env(&mut self, filler: &Filler, nonblocking: bool) -> Result<bool> {
        let Some(env) = &filler.conn_env else { return Ok(true) };
        if self.env_sent.as_ref().is_some_and(|(sent, _)| Arc::ptr_eq(sent, env) || sent == env) {
            return Ok(true);
        }
        let body = crate::spawn::wire::env_to_wire(env)?;
        if body.len() > MAX_BODY {
            return Err(Error::invalid("encode", "environment", "over the protocol's limits"));
        }
        let h = Header { len: body.len() as u32, kind: Kind::Env, flags: 0, nfds: 0, id: 0 };
        if !self.send(&[&h.encode(), &body], &[], nonblocking)? {
            return Ok(false);
        }
        self.env_sent = Some((env.clone(), body.len()));
        Ok(true)
    }

    /// The flags of a request: a status request's (`status`), or one answered with a child.
    fn flags(&self, status: bool) -> u8 {
        if status {
            // A status SpawnMany's answers come together, when its last child has ended (a
            // lone status request is answered when it ends).
            return FLAG_STATUS | FLAG_BATCH_REPLY;
        }
        let exit = if self.want_exit { super::frame::FLAG_WANT_EXIT } else { 0 };
        exit | FLAG_BATCH_REPLY
    }

    fn submit_with(
        &mut self,
        cmd: &Command,
        nonblocking: bool,
        status: bool,
    ) -> Result<Option<u64>> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        let woken = self.woken_at.take().is_some_and(|t| t.elapsed() < EARLY_WAKE);
        if !nonblocking && self.pending.is_empty() && !woken {
            // A lone request (nothing else in flight: the server is likely asleep): tell the
            // server it comes before encoding it, so the server's CPU wakes while this one
            // fills the request in (waking an idle CPU is the slowest part of a lone request
            // in a VM: BENCHMARKS.md §6). With requests in flight the server is busy with
            // them, and a Wake would only cost a system call. If the encoding below fails,
            // the server's polling window just runs out (100 us, within its budget).
            self.send_wake()?;
        }
        let mut filler = Filler::default();
        let req = encode_request(cmd, &mut filler, self.own_fds(), status)?;
        if !self.send_env(&filler, nonblocking)? {
            return Ok(None);
        }
        let id = self.next_id;
        let flags = self.flags(status) | if req.conn_env { FLAG_CONN_ENV } else { 0 };
        let h = Header {
            len: req.bytes.len() as u32,
            kind: Kind::Spawn,
            flags,
            nfds: req.fds.len() as u8,
            id,
        };
        if !self.send(&[&h.encode(), &req.bytes], &req.fds, nonblocking)? {
            return Ok(None);
        }
        self.next_id += 1;
        let p = Pending { pipes: req.pipes, kill_on_drop: req.kill_on_drop, status };
        self.pending.insert(id, p);
        Ok(Some(id))
    }

    fn send_wake(&mut self) -> Result<()> {
        let h = Header { len: 0, kind: Kind::Wake, flags: 0, nfds: 0, id: 0 };
        self.send_all(&[&h.encode()], &[])
    }

    fn wake(&mut self) -> Result<()> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        if self.pending.is_empty() && self.out_rest.is_empty() {
            self.send_wake()?;
            self.woken_at = Some(Instant::now());
        }
        Ok(())
    }

    /// Send `cmds` in as few SpawnMany frames as the limits allow (entries, fds, bytes), the
    /// cwd and environment read once for all; their ids in order. A command that cannot be
    /// encoded fails the call before anything is sent; a frame that cannot be sent (a fd to
    /// pass is not open) fails it with the ids of the frames sent before it, which are in
    /// flight.
    /// `status`: status requests (see [`Client::submit_status_many`]).
    fn submit_many(
        &mut self,
        cmds: &[&Command],
        status: bool,
    ) -> std::result::Result<Vec<u64>, (Vec<u64>, Error)> {
        if let Some(e) = &self.broken {
            return Err((Vec::new(), e.clone()));
        }
        let (reqs, filler) =
            encode_all(cmds, self.own_fds(), status).map_err(|e| (Vec::new(), e))?;
        self.send_env(&filler, false).map_err(|e| (Vec::new(), e))?;
        let mut ids = Vec::with_capacity(reqs.len());
        let mut reqs = reqs.into_iter().peekable();
        while reqs.peek().is_some() {
            let (frame, fds, batch) = self.next_frame(&mut reqs);
            if let Err(e) = self.send_all(&[&frame], &fds) {
                return Err((ids, e));
            }
            ids.extend(self.sent(batch));
        }
        Ok(ids)
    }

    /// The next frame of a batch: as many requests from the front of `reqs` as fit (at least
    /// one), as a SpawnMany (a lone one too large for an entry's header: a plain Spawn) with
    /// its header, the fds to pass, and the requests it holds (ids from `next_id` on).
    fn next_frame(
        &self,
        reqs: &mut std::iter::Peekable<std::vec::IntoIter<Request>>,
    ) -> (Vec<u8>, Vec<RawFd>, Vec<Request>) {
        let mut body = Vec::new();
        let mut fds: Vec<RawFd> = Vec::new();
        let mut batch: Vec<Request> = Vec::new();
        // What the server will decode: repeats count again, and so does the connection's
        // environment for each entry that takes it (it refuses more than MAX_BODY).
        let mut decoded = 0usize;
        let env_len = self.env_sent.as_ref().map_or(0, |(_, len)| *len);
        while let Some(r) = reqs.peek() {
            // The same command as the entry before: a repeat entry, no bytes.
            let repeat = batch.last().is_some_and(|p: &Request| Arc::ptr_eq(&p.bytes, &r.bytes));
            let adds = r.fds.len() + if repeat { 0 } else { r.bytes.len() };
            let costs = r.bytes.len() + if r.conn_env { env_len } else { 0 };
            // Each fd goes once per frame (FLAG_FD_INDEX): only those not passed yet count.
            let new_fds = (r.fds.iter().enumerate())
                .filter(|&(j, f)| !fds.contains(f) && !r.fds[..j].contains(f))
                .count();
            let fits = batch.len() < super::frame::MAX_BATCH_REPLY
                && fds.len() + new_fds <= super::frame::MAX_FDS
                && body.len() + 5 + adds <= MAX_BODY
                && decoded + costs <= MAX_BODY;
            if !fits && !batch.is_empty() {
                break;
            }
            let Some(r) = reqs.next() else { break };
            if repeat {
                body.extend_from_slice(&super::frame::REPEAT_ENTRY.to_le_bytes());
            } else {
                body.extend_from_slice(&(r.bytes.len() as u32).to_le_bytes());
            }
            body.push(r.fds.len() as u8);
            for &f in r.fds.iter() {
                let at = fds.iter().position(|&x| x == f).unwrap_or_else(|| {
                    fds.push(f);
                    fds.len() - 1
                });
                body.push(at as u8);
            }
            if !repeat {
                body.extend_from_slice(&r.bytes);
            }
            decoded += costs;
            batch.push(r);
        }
        // A lone request too large for an entry's header, or over the budget with the
        // environment it takes: a plain Spawn (one spawn's worth, whatever its size), its
        // fds its own, in order.
        let lone_too_large = batch.len() == 1 && (body.len() > MAX_BODY || decoded > MAX_BODY);
        let (kind, body, fds, indexed) = match batch.first() {
            Some(r) if lone_too_large => {
                (Kind::Spawn, body.split_off(5 + r.fds.len()), r.fds.to_vec(), 0)
            }
            _ => (Kind::SpawnMany, body, fds, FLAG_FD_INDEX),
        };
        let conn_env = if batch.iter().any(|r| r.conn_env) { FLAG_CONN_ENV } else { 0 };
        // One call's requests are all of a kind (status requests or not).
        let status = batch.first().is_some_and(|r| r.status);
        let h = Header {
            len: body.len() as u32,
            kind,
            flags: self.flags(status) | conn_env | indexed,
            nfds: fds.len() as u8,
            id: self.next_id,
        };
        let mut frame = h.encode().to_vec();
        frame.extend_from_slice(&body);
        (frame, fds, batch)
    }

    /// The requests of a frame that went out: in flight from now on; their ids.
    fn sent(&mut self, batch: Vec<Request>) -> Vec<u64> {
        let first = self.next_id;
        self.next_id = first + batch.len() as u64;
        batch
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let id = first + i as u64;
                let p = Pending { pipes: r.pipes, kill_on_drop: r.kill_on_drop, status: r.status };
                self.pending.insert(id, p);
                id
            })
            .collect()
    }

    /// The async face's batch: send one frame of the front of `cmds` without waiting. The
    /// ids of the requests sent (a prefix of `cmds`: as many as fit in one frame), or `None`
    /// when the socket is full and nothing went out. A command that cannot be encoded fails
    /// the call with nothing sent. `status`: status requests.
    #[cfg(feature = "tokio")]
    pub(crate) fn try_submit_frame(
        &mut self,
        cmds: &[&Command],
        status: bool,
    ) -> Result<Option<Vec<u64>>> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        let take = cmds.len().min(super::frame::MAX_BATCH_REPLY);
        let (reqs, filler) = encode_all(&cmds[..take], self.own_fds(), status)?;
        if !self.send_env(&filler, true)? {
            return Ok(None);
        }
        let mut reqs = reqs.into_iter().peekable();
        let (frame, fds, batch) = self.next_frame(&mut reqs);
        if !self.send_some(&[&frame], &fds)? {
            return Ok(None);
        }
        Ok(Some(self.sent(batch)))
    }

    /// The async face's send: without waiting. False when the socket is full and nothing
    /// went out (try again when it is writable); a part sent leaves the rest in `out_rest`,
    /// which must go out (`flush_rest`) before anything else.
    fn send_some(&mut self, parts: &[&[u8]], fds: &[RawFd]) -> Result<bool> {
        if !self.flush_rest()? {
            return Ok(false);
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        match sock::send_with_fds(self.sock.as_fd(), parts, fds, true) {
            Ok(n) if n == total => Ok(true),
            Ok(n) => {
                self.out_rest = parts.concat().split_off(n);
                Ok(true)
            }
            Err(libc::EAGAIN) => Ok(false),
            Err(libc::EBADF) if !fds.is_empty() => {
                Err(Error::os("sendmsg", "the fds to pass", libc::EBADF)
                    .with_reason("a fd to pass to the server is not open in this process"))
            }
            Err(e) => {
                let e = Error::os("sendmsg", "server connection", e);
                self.set_broken(&e);
                Err(e)
            }
        }
    }

    /// Send what is left of a request sent in part, without waiting; true once nothing is.
    pub(crate) fn flush_rest(&mut self) -> Result<bool> {
        while !self.out_rest.is_empty() {
            match sock::send_with_fds(self.sock.as_fd(), &[&self.out_rest], &[], true) {
                Ok(n) => {
                    self.out_rest.drain(..n);
                }
                Err(libc::EAGAIN) => return Ok(false),
                Err(e) => {
                    let e = Error::os("sendmsg", "server connection", e);
                    self.set_broken(&e);
                    return Err(e);
                }
            }
        }
        Ok(true)
    }

    /// The async face: submit without waiting (`None`: the socket is full, nothing sent).
    /// `status`: a status request.
    #[cfg(feature = "tokio")]
    pub(crate) fn try_submit(&mut self, cmd: &Command, status: bool) -> Result<Option<u64>> {
        self.submit_with(cmd, true, status)
    }

    /// The async faces: read what has arrived and turn it into answers, without waiting.
    /// The ids answered by this call (false: nothing to read).
    pub(crate) fn try_collect(&mut self, answered: &mut Vec<u64>) -> Result<bool> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        let (before, statuses_before) = (self.done.len(), self.statuses.len());
        let got = self.take_bytes();
        answered.extend(self.done.iter().skip(before).map(|(id, _)| *id));
        answered.extend(self.statuses.iter().skip(statuses_before).map(|(id, _)| *id));
        got
    }

    /// The async face: the answer to `id` if it has come (`Err` if `id` is not in flight
    /// or the connection broke).
    #[cfg(feature = "tokio")]
    /// The outer error is the connection's (every request fails); the inner one this
    /// request's own (its spawn failed).
    pub(crate) fn take_answer(&mut self, id: u64) -> Result<Option<Result<Child>>> {
        if let Some(pos) = self.done.iter().position(|(i, _)| *i == id) {
            return Ok(self.done.remove(pos).map(|d| d.1));
        }
        Ok(self.unanswerable(id, false)?.map(Err))
    }

    /// The async face: the answer to status request `id` if it has come (as
    /// [`take_answer`](Io::take_answer)).
    #[cfg(feature = "tokio")]
    pub(crate) fn take_status(&mut self, id: u64) -> Result<Option<Result<ExitStatus>>> {
        if let Some(pos) = self.statuses.iter().position(|(i, _)| *i == id) {
            return Ok(self.statuses.remove(pos).map(|d| d.1));
        }
        Ok(self.unanswerable(id, true)?.map(Err))
    }

    /// Why request `id`, not answered yet, never will be as asked (`status`: with a status):
    /// the connection's error when it broke; this request's own when it is not in flight or
    /// asked for the other sort of answer; `None` while its answer may still come.
    fn unanswerable(&self, id: u64, status: bool) -> Result<Option<Error>> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        Ok(match self.pending.get(&id) {
            None => Some(Error::invalid("receive", format!("request {id}"), "not in flight")),
            Some(p) if p.status != status => {
                Some(if status { child_id(id) } else { status_id(id) })
            }
            Some(_) => None,
        })
    }

    /// The async face: nobody will take the answer to `id` (its future was dropped). If it
    /// has come, its child is dropped now (killed if the command asked for `kill_on_drop`);
    /// else when it comes.
    #[cfg(feature = "tokio")]
    pub(crate) fn abandon(&mut self, id: u64) {
        if let Some(pos) = self.done.iter().position(|(i, _)| *i == id) {
            drop(self.done.remove(pos));
        } else if let Some(pos) = self.statuses.iter().position(|(i, _)| *i == id) {
            self.statuses.remove(pos);
        } else if self.pending.contains_key(&id) {
            self.abandoned.insert(id);
        }
    }

    /// Whether the connection failed (every request on it fails).
    #[cfg(feature = "tokio")]
    pub(crate) fn is_broken(&self) -> bool {
        self.broken.is_some()
    }

    /// Whether children of this connection learn their status from Exit frames.
    #[cfg(feature = "tokio")]
    pub(crate) fn wants_exit_frames(&self) -> bool {
        self.want_exit
    }

    /// The connection's socket (for readiness).
    #[cfg(feature = "tokio")]
    pub(crate) fn socket(&self) -> &UnixStream {
        &self.sock
    }

    /// The next answer, if one has come: the request's id and its child or error (in the
    /// order the server answered); an error if none is in flight.
    fn next_answer(&mut self) -> Result<Option<(u64, Result<Child>)>> {
        if let Some(d) = self.done.pop_front() {
            return Ok(Some(d));
        }
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        if !self.pending.values().any(|p| !p.status) {
            return Err(Error::invalid("receive", "", "no request in flight"));
        }
        Ok(None)
    }

    /// The first answer to a status request whose id is `wanted`, if one has come, keeping
    /// the others; an error when no such request is in flight.
    fn status_answer(
        &mut self,
        wanted: impl Fn(u64) -> bool,
    ) -> Result<Option<(u64, Result<ExitStatus>)>> {
        if let Some(pos) = self.statuses.iter().position(|(i, _)| wanted(*i)) {
            return Ok(self.statuses.remove(pos));
        }
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        if !self.pending.iter().any(|(id, p)| p.status && wanted(*id)) {
            return Err(Error::invalid("receive", "", "no status request in flight"));
        }
        Ok(None)
    }

    /// The answer to request `id`, if it has come, keeping the others for
    /// [`next_answer`](Io::next_answer); an error if it cannot come.
    fn answer_to(&mut self, id: u64) -> Result<Option<Child>> {
        if let Some(pos) = self.done.iter().position(|(i, _)| *i == id) {
            return self.done.remove(pos).map(|d| d.1).transpose();
        }
        match self.unanswerable(id, false)? {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    /// Turn every complete reply in the inbox into a finished request.
    fn collect(&mut self) -> Result<()> {
        loop {
            let (frame, body) = match self.inbox.next(EXPECT_REPLY) {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => return Err(protocol(e.to_string())),
            };
            let id = frame.header.id;
            if frame.header.kind == Kind::SpawnedMany {
                let entries =
                    frames::split_spawned_many(body, frame.fds.len()).map_err(protocol)?;
                for ((id, pid), pidfd) in entries.into_iter().zip(frame.fds) {
                    let Some(p) = self.pending.remove(&id).filter(|p| !p.status) else {
                        return Err(protocol(format!(
                            "a child for request {id}, which is not in flight or is a status \
                             request"
                        )));
                    };
                    let child = Child::new_remote(pid, pidfd, p.pipes, p.kill_on_drop);
                    if !self.abandoned.remove(&id) {
                        self.done.push_back((id, Ok(child)));
                    }
                }
                continue;
            }
            let result = match frame.header.kind {
                Kind::Exit => {
                    let (pid, status) = reply::decode_exit(body)?;
                    if self.pending.get(&id).is_some_and(|p| p.status) {
                        // A status request's answer (nobody's, when abandoned).
                        self.pending.remove(&id);
                        if !self.abandoned.remove(&id) {
                            self.statuses.push_back((id, Ok(status)));
                        }
                    } else {
                        self.exits.insert(pid, status);
                    }
                    continue;
                }
                // Id 0 is no request's: the server refused this connection's environment
                // (an Env frame); it closes the connection.
                Kind::Error if id == 0 => return Err(reply::decode_error(body)?),
                Kind::Error => Err(reply::decode_error(body)?),
                _ => {
                    let pid = reply::decode_pid(body)?;
                    let mut fds = frame.fds.into_iter();
                    let (Some(pidfd), None) = (fds.next(), fds.next()) else {
                        return Err(protocol("a spawned reply without exactly one pidfd"));
                    };
                    Ok((pid, pidfd))
                }
            };
            let Some(p) = self.pending.remove(&id) else {
                return Err(protocol(format!("an answer to request {id}, which is not in flight")));
            };
            if p.status {
                match result {
                    Err(_) if self.abandoned.remove(&id) => {}
                    Err(e) => self.statuses.push_back((id, Err(e))),
                    Ok(_) => return Err(protocol(format!("a child for status request {id}"))),
                }
                continue;
            }
            let child =
                result.map(|(pid, pidfd)| Child::new_remote(pid, pidfd, p.pipes, p.kill_on_drop));
            if !self.abandoned.remove(&id) {
                self.done.push_back((id, child));
            }
        }
    }
}

/// A command encoded for the server, with what must live until it is sent and after.
struct Request {
    /// The command's wire bytes; shared by the requests of a batch that spawn the same
    /// command (sent once per frame, the others as repeats).
    bytes: Arc<[u8]>,
    /// The fds to pass (borrowed from the command or from `child_ends`).
    fds: Arc<[RawFd]>,
    /// Our ends of the pipes made for it.
    pipes: [Option<OwnedFd>; 3],
    /// The child's ends, passed with the request and closed here once it is sent.
    _child_ends: [Option<OwnedFd>; 3],
    kill_on_drop: bool,
    /// The command starts from the connection's environment (sent without one).
    conn_env: bool,
    /// A status request.
    status: bool,
}

/// What the caller's process fills in (its cwd, its environment, what its fds 0-2 give an
/// inherited stream), read once per call however many commands need it.
#[derive(Default)]
struct Filler {
    cwd: Option<PathBuf>,
    env: Option<Env>,
    inherited: [Option<Filled>; 3],
    /// The environment the call's requests take from the connection: the base of the first
    /// command that has one (its own `base_env`, or this process's); a command whose base
    /// equals it is sent without one, any other with its own.
    conn_env: Option<Env>,
}

impl Filler {
    /// Our own fd `i`, as a local child would inherit it: closed when it is closed or
    /// close-on-exec here (passing that number would hand over whatever holds it, such as
    /// this very connection).
    fn inherited(&mut self, i: usize) -> Filled {
        *self.inherited[i].get_or_insert_with(|| {
            let fd = i as RawFd;
            match this_process::fd_flags(fd) {
                Ok(flags) if flags & libc::FD_CLOEXEC == 0 => Filled::Fd(fd),
                _ => Filled::Closed,
            }
        })
    }
}

/// `own`: this client's connection and its kick ([`Io::own_fds`]), never passed as one of
/// the command's fds. `status`: a status request (no child is handed back, so a pipe would
/// have no other end).
fn encode_request(
    cmd: &Command,
    filler: &mut Filler,
    own: OwnFds,
    status: bool,
) -> Result<Request> {
    if status && cmd.stdio.iter().any(|s| matches!(s, Some(Stdio::Pipe))) {
        return Err(Error::invalid(
            "encode",
            "Stdio::Pipe",
            "a status request hands back no child, so no pipe end: spawn it instead",
        ));
    }
    let mut pipes: [Option<OwnedFd>; 3] = [None, None, None];
    let mut child_ends: [Option<OwnedFd>; 3] = [None, None, None];
    let mut fill_stdio: [Option<Filled>; 3] = [None, None, None];
    for i in 0..3 {
        match &cmd.stdio[i] {
            None | Some(Stdio::Inherit) => fill_stdio[i] = Some(filler.inherited(i)),
            Some(Stdio::Pipe) => {
                let (r, w) = parent::pipe().map_err(|e| Error::os("pipe2", "", e))?;
                let (ours, theirs) = if i == 0 { (w, r) } else { (r, w) };
                fill_stdio[i] = Some(Filled::Fd(theirs.as_raw_fd()));
                child_ends[i] = Some(theirs);
                pipes[i] = Some(ours);
            }
            _ => {}
        }
    }
    // A relative cwd is the caller's, as for a local spawn: resolved here (the server's own
    // cwd means nothing to the caller). An empty one is sent as it is (chdir fails: ENOENT).
    let relative = cmd.cwd.as_deref().filter(|d| d.is_relative() && !d.as_os_str().is_empty());
    if (cmd.cwd.is_none() || relative.is_some()) && filler.cwd.is_none() {
        filler.cwd = Some(std::env::current_dir().map_err(|e| io_err("getcwd", "", &e))?);
    }
    let joined = relative.zip(filler.cwd.as_deref()).map(|(d, here)| here.join(d));
    if !cmd.env_clear && cmd.base_env.is_none() && filler.env.is_none() {
        // This thread's snapshot: the same `Arc` as last time while nothing changed (one
        // thread only), which the connection's environment then is too.
        filler.env = Some(environ::snapshot());
    }
    // The environment this command starts from, if it does not clear it.
    let base = match (&cmd.base_env, cmd.env_clear) {
        (_, true) => None,
        (Some(own), false) => Some(own),
        (None, false) => filler.env.as_ref(),
    };
    let conn_env = match (base, &filler.conn_env) {
        (None, _) => false,
        (Some(base), None) => {
            filler.conn_env = Some(base.clone());
            true
        }
        (Some(base), Some(conn)) => Arc::ptr_eq(base, conn) || base == conn,
    };
    let fill = Fill {
        cwd: if cmd.cwd.is_none() { filler.cwd.as_deref() } else { joined.as_deref() },
        base_env: if !cmd.env_clear && cmd.base_env.is_none() {
            filler.env.as_deref()
        } else {
            None
        },
        conn_env,
        stdio: fill_stdio,
    };
    let (bytes, fds) = cmd.to_wire_filled(&fill)?;
    if let Some(&fd) = fds.iter().find(|fd| own.contains(fd)) {
        // A number the caller named was closed, and the connection (or its kick) took it:
        // the child would get this client's own fd (a local spawn fails on the closed fd,
        // EBADF).
        return Err(Error::os("sendmsg", format!("fd {fd}"), libc::EBADF).with_reason(
            "that fd is this client's own (its connection to the server), not one to pass",
        ));
    }
    if bytes.len() > MAX_BODY || fds.len() > super::frame::MAX_FDS {
        return Err(Error::invalid("encode", "", "the command is over the protocol's limits"));
    }
    Ok(Request {
        bytes: bytes.into(),
        fds: fds.into(),
        pipes,
        _child_ends: child_ends,
        kill_on_drop: cmd.kill_on_drop,
        conn_env,
        status,
    })
}

/// Encode `cmds` for one call (the cwd and environment read once); the same command again
/// (spawn N alike) is encoded once, unless it has pipes, which are made per request.
fn encode_all(cmds: &[&Command], own: OwnFds, status: bool) -> Result<(Vec<Request>, Filler)> {
    let mut fill = Filler::default();
    let mut reqs: Vec<Request> = Vec::with_capacity(cmds.len());
    for (i, c) in cmds.iter().enumerate() {
        let again = i > 0
            && std::ptr::eq(*c, cmds[i - 1])
            && !c.stdio.iter().any(|s| matches!(s, Some(Stdio::Pipe)));
        match reqs.last() {
            Some(prev) if again => {
                let copy = Request {
                    bytes: prev.bytes.clone(),
                    fds: prev.fds.clone(),
                    pipes: [None, None, None],
                    _child_ends: [None, None, None],
                    kill_on_drop: prev.kill_on_drop,
                    conn_env: prev.conn_env,
                    status,
                };
                reqs.push(copy);
            }
            _ => reqs.push(encode_request(c, &mut fill, own, status)?),
        }
    }
    Ok((reqs, fill))
}
