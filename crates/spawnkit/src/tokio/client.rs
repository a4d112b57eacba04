//! [`Client`]: the spawn server's connection, async. Requests go out without waiting for the
//! server and their answers are awaited by id, so one task can keep many in flight
//! ([`Client::spawn_many`]) and many tasks can share one connection.

use std::collections::HashMap;
use std::future::poll_fn;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;

use super::Child;
use crate::error::{Error, ErrorKind, Result};
use crate::serve::client::Io;
use crate::Command;

/// Tasks waiting for an answer, by request id. Locked after the connection's lock.
#[derive(Default)]
struct Waiters(HashMap<u64, Waker>);

/// An async connection to a spawn server, sharing the connection of a [`crate::Client`]
/// (requests from both are in flight on it). Cheap to clone; every clone is the same
/// connection.
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
/// readiness, and the child's exit through its pidfd ([`Child::wait`]).
#[derive(Clone)]
pub struct Client {
    io: Arc<Mutex<Io>>,
    fd: Arc<AsyncFd<OwnedFd>>,
    waiters: Arc<Mutex<Waiters>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("spawnkit::tokio::Client").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
        Ok(Client { io, fd: Arc::new(fd), waiters: Arc::new(Mutex::new(Waiters::default())) })
    }

    /// Send a request without waiting for its answer (only for room in the socket); the
    /// answer comes from [`receive`](Client::receive) under the id returned.
    pub async fn submit(&self, cmd: &Command) -> Result<u64> {
        poll_fn(|cx| self.poll_submit(cmd, cx)).await
    }

    /// The child (or the spawn's error) of request `id`.
    pub async fn receive(&self, id: u64) -> Result<Child> {
        let child = poll_fn(|cx| self.poll_answer(id, cx)).await?;
        Child::new(child)
    }

    /// Spawn through the server: submit, then await the answer. The [`Child`] is the tokio
    /// face's (its parent is the server; see docs/protocol.md for what differs).
    pub async fn spawn(&self, cmd: &Command) -> Result<Child> {
        let id = self.submit(cmd).await?;
        self.receive(id).await
    }

    /// Submit every command (all in flight at once, as far as the socket takes them), then
    /// collect the children in order, a failed spawn as its own error. An error of the
    /// connection itself fails the whole call.
    pub async fn spawn_many<'c>(
        &self,
        cmds: impl IntoIterator<Item = &'c Command>,
    ) -> Result<Vec<Result<Child>>> {
        let mut ids = Vec::new();
        for cmd in cmds {
            ids.push(self.submit(cmd).await?);
        }
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(match poll_fn(|cx| self.poll_answer(id, cx)).await {
                Ok(child) => Child::new(child),
                Err(e) if lock(&self.io).is_broken() => return Err(e),
                Err(e) => Err(e),
            });
        }
        Ok(out)
    }

    fn poll_submit(&self, cmd: &Command, cx: &mut Context<'_>) -> Poll<Result<u64>> {
        loop {
            let mut io = lock(&self.io);
            if let Some(id) = io.try_submit(cmd)? {
                return Poll::Ready(Ok(id));
            }
            // The socket is full: the server may be waiting for us to read its answers
            // (it stops reading a client whose answers queue), so read them meanwhile.
            let mut answered = Vec::new();
            let read = io.try_collect(&mut answered)?;
            drop(io);
            self.wake(&answered);
            if read {
                continue;
            }
            match self.fd.poll_write_ready(cx) {
                Poll::Ready(Ok(mut guard)) => {
                    guard.clear_ready();
                    // Registered for reading too, so an answer also wakes this task.
                    if let Poll::Ready(Ok(mut g)) = self.fd.poll_read_ready(cx) {
                        g.clear_ready();
                    }
                    continue;
                }
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(Err(Error::os(
                        "epoll_wait",
                        "server connection",
                        e.raw_os_error().unwrap_or(0),
                    )))
                }
                Poll::Pending => {
                    let _ = self.fd.poll_read_ready(cx);
                    return Poll::Pending;
                }
            }
        }
    }

    fn poll_answer(&self, id: u64, cx: &mut Context<'_>) -> Poll<Result<crate::Child>> {
        loop {
            let mut io = lock(&self.io);
            if let Some(answer) = io.take_answer(id) {
                drop(io);
                self.done_waiting(id);
                return Poll::Ready(answer);
            }
            if let Err(e) = io.flush_rest() {
                drop(io);
                self.done_waiting(id);
                return Poll::Ready(Err(e));
            }
            let mut answered = Vec::new();
            let read = match io.try_collect(&mut answered) {
                Ok(read) => read,
                Err(e) => {
                    drop(io);
                    self.done_waiting(id);
                    return Poll::Ready(Err(e));
                }
            };
            if read {
                drop(io);
                self.wake(&answered);
                continue;
            }
            // Nothing to read: wait for the socket, under the connection's lock so that no
            // answer can be read by another task between this check and the registration.
            lock(&self.waiters).0.insert(id, cx.waker().clone());
            match self.fd.poll_read_ready(cx) {
                Poll::Ready(Ok(mut guard)) => {
                    guard.clear_ready();
                    continue;
                }
                Poll::Ready(Err(e)) => {
                    drop(io);
                    self.done_waiting(id);
                    return Poll::Ready(Err(Error::os(
                        "epoll_wait",
                        "server connection",
                        e.raw_os_error().unwrap_or(0),
                    )));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Wake the tasks whose answers another task read.
    fn wake(&self, answered: &[u64]) {
        if answered.is_empty() {
            return;
        }
        let mut w = lock(&self.waiters);
        for id in answered {
            if let Some(waker) = w.0.remove(id) {
                waker.wake();
            }
        }
    }

    /// `id` has its answer. The reactor wakes only the last task that registered for the
    /// socket's readiness, and that may have been this one: wake another waiting task, which
    /// registers itself when it polls.
    fn done_waiting(&self, id: u64) {
        let mut w = lock(&self.waiters);
        w.0.remove(&id);
        let next = w.0.keys().next().copied();
        if let Some(waker) = next.and_then(|k| w.0.remove(&k)) {
            drop(w);
            waker.wake();
        }
    }
}
