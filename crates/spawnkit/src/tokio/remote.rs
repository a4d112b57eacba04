//! [`Client`]: the spawn server's connection, async. Requests go out without waiting for the
//! server and their answers are awaited by id, so one task can keep many in flight
//! ([`Client::spawn_many`]) and many tasks can share one connection.
//!
//! Waiting: every task that waits awaits the socket's readiness with futures of its own
//! (`AsyncFd::readable`/`writable`, which wake every waiter and unregister when dropped), and
//! a task that reads answers meant for others wakes them all through a `Notify` (each then
//! looks for its own answer). A task whose future is dropped after its request went out
//! abandons the answer: its child is dropped when it comes (killed if `kill_on_drop`); a
//! status request's answer is dropped when it comes (its child runs on).

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;
use ::tokio::sync::Notify;

use super::Child;
use crate::error::{Error, ErrorKind, Result};
use crate::serve::client::Io;
use crate::{Command, ExitStatus};

/// An async connection to a spawn server, on the connection of a [`crate::Client`]. Cheap to
/// clone; every clone is the same connection, shared by the tasks that hold them.
///
/// ```no_run
/// # async fn f(server: &mut spawnkit::PrivateServer) -> spawnkit::Result<()> {
/// use spawnkit::{Command, Stdio};
/// let client = spawnkit::tokio::Client::new(server.client())?;
/// let mut child = client.spawn(Command::new("echo").arg("hi").stdout(Stdio::Pipe)).await?;
/// assert_eq!(child.wait_with_output().await?.stdout, b"hi\n");
/// # Ok(()) }
/// ```
///
/// Nothing here blocks the runtime's thread: a request that does not fit in the socket waits
/// for it to drain (reading answers meanwhile), an answer is awaited through the socket's
/// readiness, and the child's exit through its pidfd ([`Child::wait`]). Use the blocking
/// `Client` it was made from for nothing else meanwhile: its calls read answers without
/// waking the tasks they belong to.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

struct Shared {
    io: Arc<Mutex<Io>>,
    fd: AsyncFd<OwnedFd>,
    /// Signalled when a task read answers (or the connection broke): waiting tasks look again.
    answered: Notify,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("spawnkit::tokio::Client").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn reactor_error(e: std::io::Error) -> Error {
    Error::os("epoll_wait", "server connection", e.raw_os_error().unwrap_or(libc::EIO))
}

/// Abandons the answers of the requests it holds when dropped (a future dropped after
/// sending them); emptied once they are taken.
struct Abandon<'a> {
    io: &'a Mutex<Io>,
    ids: Vec<u64>,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if !self.ids.is_empty() {
            let mut io = lock(self.io);
            for &id in &self.ids {
                io.abandon(id);
            }
        }
    }
}

impl Client {
    /// The async face of `client`'s connection. Must be called inside a tokio runtime with
    /// I/O enabled. Needs Linux 6.15+ (`PIDFD_INFO_EXIT`: a child's status is read from its
    /// pidfd); on older kernels the status comes in frames that only the blocking client
    /// reads, and this is an error.
    pub fn new(client: &crate::Client) -> Result<Client> {
        let io = client.io().clone();
        let dup = {
            let io = lock(&io);
            if io.wants_exit_frames() {
                return Err(Error::new(ErrorKind::Unsupported, "serve", "async client")
                    .with_reason(
                        "this kernel cannot tell a non-parent a child's exit status \
                         (PIDFD_INFO_EXIT, Linux 6.15): use the blocking Client",
                    ));
            }
            io.socket().try_clone().map_err(|e| {
                Error::os("fcntl", "server connection", e.raw_os_error().unwrap_or(libc::EIO))
            })?
        };
        // The reactor watches a duplicate of the socket (the connection keeps its own fd).
        let fd = crate::sys::reactor::register(
            OwnedFd::from(dup),
            Interest::READABLE | Interest::WRITABLE,
        )
        .map_err(|e| Error::os("epoll_ctl", "server connection", e.raw_os_error().unwrap_or(0)))?;
        Ok(Client { shared: Arc::new(Shared { io, fd, answered: Notify::new() }) })
    }

    /// Send a request; its answer comes from [`receive`](Client::receive) under the id
    /// returned. Waits only while the socket is full (reading answers meanwhile), never for
    /// the server's answer: the whole request has gone out when this returns.
    pub async fn submit(&self, cmd: &Command) -> Result<u64> {
        self.submit_one(cmd, false).await
    }

    async fn submit_one(&self, cmd: &Command, status: bool) -> Result<u64> {
        let ids = self.send_whole(|io| Ok(io.try_submit(cmd, status)?.map(|id| vec![id]))).await?;
        Ok(ids[0])
    }

    /// The child (or the spawn's error) of request `id`. Cancel-safe: dropping the future
    /// leaves the answer for a later `receive(id)`.
    pub async fn receive(&self, id: u64) -> Result<Child> {
        let child = self.answer(id, false, Io::take_answer).await??;
        Child::new(child)
    }

    /// Spawn through the server: submit, then await the answer. The [`Child`] is the tokio
    /// face's (its parent is the server; see docs/protocol.md for what differs). Dropping
    /// the future once the request is out abandons it: the child, when it comes, is dropped
    /// (killed if the command is `kill_on_drop`).
    pub async fn spawn(&self, cmd: &Command) -> Result<Child> {
        let id = self.submit(cmd).await?;
        let child = self.answer(id, true, Io::take_answer).await??;
        Child::new(child)
    }

    /// Spawn through the server and await how the child ended, as tokio's
    /// `Command::status` does: a status request (docs/protocol.md "Status requests"), the
    /// server keeping the child's pidfd and answering once. No child handle, no fd for it
    /// here. Two differences from tokio: the command's streams may not be pipes (nothing
    /// would read them: inherit them, pass fds or null), and dropping the future once the
    /// request is out abandons only the answer: the child runs on, even with
    /// `kill_on_drop` (no handle here can kill it). A caller that may give up on a child
    /// (a timeout) and wants it killed spawns it with [`spawn`](Client::spawn) instead.
    pub async fn status(&self, cmd: &Command) -> Result<ExitStatus> {
        let id = self.submit_one(cmd, true).await?;
        self.answer(id, true, Io::take_status).await?
    }

    /// Status requests for every command, sent as [`spawn_many`](Client::spawn_many) sends
    /// (up to 64 in one message, a message's statuses answered together when its last
    /// child has ended), then how each ended, in order; a command that fails, to encode or
    /// to spawn, is its own item's error. The server holds at most
    /// [`MAX_STATUS_IN_FLIGHT`](crate::serve::MAX_STATUS_IN_FLIGHT) of a connection's
    /// children (and at most half its fd limit in all): beyond, an item's error is EAGAIN,
    /// and the caller sends the rest later (unlike the blocking `status_many`, which
    /// sends them again itself). A server at its fd limit answers a message whose fds it
    /// could not take in with EMFILE for each of its items. Dropping the future abandons
    /// the answers (the children run on).
    pub async fn status_many<'c>(
        &self,
        cmds: impl IntoIterator<Item = &'c Command>,
    ) -> Result<Vec<Result<ExitStatus>>> {
        let cmds: Vec<&Command> = cmds.into_iter().collect();
        let (sent, mut all) = self.submit_all(&cmds, true).await?;
        let statuses = self.answers(sent, Io::take_status).await?;
        all.ids.clear();
        Ok(statuses)
    }

    /// Submit every command (all in flight at once, as far as the socket takes them: up to
    /// 64 in one message, their answers coalesced into one), then collect the children in
    /// order; a command that fails, to encode or to spawn, is its own item's error (so is a
    /// request turned away by a server that reaps its own children and already holds half
    /// its fd limit of them: EAGAIN, not sent again). Only a failure of the connection
    /// itself fails the call. Dropping the future abandons the requests sent (as
    /// [`spawn`](Client::spawn)).
    pub async fn spawn_many<'c>(
        &self,
        cmds: impl IntoIterator<Item = &'c Command>,
    ) -> Result<Vec<Result<Child>>> {
        let cmds: Vec<&Command> = cmds.into_iter().collect();
        let (sent, mut all) = self.submit_all(&cmds, false).await?;
        let children = self.answers(sent, Io::take_answer).await?;
        all.ids.clear();
        Ok(children.into_iter().map(|c| c.and_then(Child::new)).collect())
    }

    /// The answers to the requests `sent` (looked for with `take`), in order; an item that
    /// was not sent keeps its error.
    async fn answers<T>(
        &self,
        sent: Vec<Result<u64>>,
        take: impl Fn(&mut Io, u64) -> Result<Option<Result<T>>> + Copy,
    ) -> Result<Vec<Result<T>>> {
        let mut out = Vec::with_capacity(sent.len());
        for s in sent {
            out.push(match s {
                Ok(id) => self.answer(id, true, take).await?,
                Err(e) => Err(e),
            });
        }
        Ok(out)
    }

    /// Send every command (`status`: as status requests), frame by frame: each item's id,
    /// or its own error when it cannot be encoded or passed; a guard that abandons the
    /// requests sent when dropped (the caller empties it once their answers are taken).
    async fn submit_all(
        &self,
        cmds: &[&Command],
        status: bool,
    ) -> Result<(Vec<Result<u64>>, Abandon<'_>)> {
        let mut sent: Vec<Result<u64>> = Vec::with_capacity(cmds.len());
        let mut all = Abandon { io: &self.shared.io, ids: Vec::new() };
        let mut next = 0;
        while next < cmds.len() {
            match self.submit_frame(&cmds[next..], status).await {
                Ok(ids) => {
                    next += ids.len();
                    all.ids.extend_from_slice(&ids);
                    sent.extend(ids.into_iter().map(Ok));
                }
                Err(e) if lock(&self.shared.io).is_broken() => return Err(e),
                // A command of this frame cannot be encoded or passed (nothing was sent):
                // one by one, so that its error is that item's alone.
                Err(_) => {
                    let end = (next + crate::serve::frame::MAX_BATCH_REPLY).min(cmds.len());
                    for cmd in &cmds[next..end] {
                        match self.submit_one(cmd, status).await {
                            Ok(id) => {
                                all.ids.push(id);
                                sent.push(Ok(id));
                            }
                            Err(e) if lock(&self.shared.io).is_broken() => return Err(e),
                            Err(e) => sent.push(Err(e)),
                        }
                    }
                    next = end;
                }
            }
        }
        Ok((sent, all))
    }

    /// Send the front of `cmds` as one frame (as many as fit); their ids. Waits only while
    /// the socket is full; the whole frame has gone out when this returns.
    async fn submit_frame(&self, cmds: &[&Command], status: bool) -> Result<Vec<u64>> {
        self.send_whole(|io| io.try_submit_frame(cmds, status)).await
    }

    /// Send with `try_send` (None: the socket is full, nothing went out), reading answers
    /// while the socket is full; then, until the tail of a request that went out in part has
    /// followed (nothing else can go out before it), finish it here. Dropped meanwhile, the
    /// requests sent are abandoned (a later send finishes their tail).
    async fn send_whole(
        &self,
        mut try_send: impl FnMut(&mut Io) -> Result<Option<Vec<u64>>>,
    ) -> Result<Vec<u64>> {
        let sh = &*self.shared;
        let ids = loop {
            {
                let mut io = lock(&sh.io);
                if let Some(ids) = try_send(&mut io)? {
                    break ids;
                }
                if self.read_answers(&mut io)? {
                    continue;
                }
            }
            self.await_socket(true).await?;
        };
        let mut guard = Abandon { io: &sh.io, ids: ids.clone() };
        loop {
            {
                let mut io = lock(&sh.io);
                if io.flush_rest()? {
                    break;
                }
                if self.read_answers(&mut io)? {
                    continue;
                }
            }
            self.await_socket(true).await?;
        }
        guard.ids.clear();
        Ok(ids)
    }

    /// The answer to `id`, looked for with `take` ([`Io::take_answer`] for a child,
    /// [`Io::take_status`] for a status): the outer error is the connection's, the inner
    /// this request's. With `abandon`, dropping the future abandons the answer.
    async fn answer<T>(
        &self,
        id: u64,
        abandon: bool,
        take: impl Fn(&mut Io, u64) -> Result<Option<Result<T>>>,
    ) -> Result<Result<T>> {
        let sh = &*self.shared;
        let ids = if abandon { vec![id] } else { Vec::new() };
        let mut guard = Abandon { io: &sh.io, ids };
        loop {
            // Registered before looking, so an answer read by another task after the look
            // wakes this one.
            let notified = sh.answered.notified();
            ::tokio::pin!(notified);
            notified.as_mut().enable();
            let tail_waits = {
                let mut io = lock(&sh.io);
                let found = take(&mut io, id);
                if let Err(e) = &found {
                    drop(io);
                    sh.answered.notify_waiters();
                    guard.ids.clear();
                    return Err(e.clone());
                }
                if let Ok(Some(answer)) = found {
                    guard.ids.clear();
                    return Ok(answer);
                }
                // A request's tail still waiting (its submit was dropped) goes out first:
                // the server cannot answer before it has the whole frame.
                let tail_waits = !io.flush_rest()?;
                if self.read_answers(&mut io)? {
                    continue;
                }
                tail_waits
            };
            ::tokio::select! {
                r = sh.fd.readable() => r.map_err(reactor_error)?.clear_ready(),
                w = sh.fd.writable(), if tail_waits => w.map_err(reactor_error)?.clear_ready(),
                () = &mut notified => {}
            }
        }
    }

    /// Read what has arrived into answers, without waiting; tell the waiting tasks when some
    /// came (or the connection broke). False when there was nothing to read.
    fn read_answers(&self, io: &mut Io) -> Result<bool> {
        let mut answered = Vec::new();
        let read = io.try_collect(&mut answered);
        if read.is_err() || !answered.is_empty() {
            self.shared.answered.notify_waiters();
        }
        read
    }

    /// Wait until the socket is readable, or writable too when `write`. Called right after
    /// a read (and, for `write`, a send) found nothing to do, so a readiness it clears is one
    /// already used up (a newer event keeps the socket ready: tokio clears by event).
    async fn await_socket(&self, write: bool) -> Result<()> {
        let fd = &self.shared.fd;
        ::tokio::select! {
            r = fd.readable() => r.map_err(reactor_error)?.clear_ready(),
            w = fd.writable(), if write => w.map_err(reactor_error)?.clear_ready(),
        }
        Ok(())
    }
}
