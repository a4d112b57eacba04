//! [`PrivateServer`]: a spawn server of this process's own, forked early over a socketpair,
//! gone when its owner is (the "alive" pipe, as CPython's forkserver does).

use std::os::fd::{AsFd, AsRawFd, IntoRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use super::auth::Key;
use super::client::Client;
use super::server::{Server, ServerOptions};
use crate::error::{Error, Result};
use crate::sys::{parent, pidfd, sock};

/// A spawn server forked from this process, reachable only through the [`Client`] it comes
/// with (a socketpair: no file to find, no other process can connect).
///
/// Start it **early**, before this process grows large or starts threads: it is a `fork()`
/// of the caller (a thread holding malloc's lock at that instant would leave the copy
/// stuck), and it stays small only if the caller was small. The key never leaves memory (the
/// forked server has its copy; nothing goes through argv, the environment or a file). The
/// server keeps fds 0-2 and closes every other fd it inherited, ignores SIGINT (a terminal's
/// Ctrl-C is for its owner) and exits when the write end of its "alive" pipe, held only
/// here, closes: when this value is dropped or this process ends, however it ends. Children
/// it started keep running.
pub struct PrivateServer {
    client: Option<Client>,
    alive: Option<OwnedFd>,
    pid: i32,
    pidfd: OwnedFd,
}

impl std::fmt::Debug for PrivateServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateServer").field("pid", &self.pid).finish_non_exhaustive()
    }
}

impl PrivateServer {
    /// Fork the server and connect to it. Safe to call from a function PyO3 calls: the
    /// forked child never returns into the caller; it `_exit`s when the server stops.
    pub fn start() -> Result<PrivateServer> {
        PrivateServer::start_with_pool(None)
    }

    /// [`start`](PrivateServer::start) with `pool` children made ahead of time per spawning
    /// thread (`None`: [`DEFAULT_POOL`](super::DEFAULT_POOL); `Some(0)`: none), as
    /// [`ServerOptions::pool`].
    pub fn start_with_pool(pool: Option<usize>) -> Result<PrivateServer> {
        let key = Key::generate()?;
        let (ours, theirs) = UnixStream::pair()
            .map_err(|e| Error::os("socketpair", "", e.raw_os_error().unwrap_or(0)))?;
        let (alive_r, alive_w) = parent::pipe().map_err(|e| Error::os("pipe2", "alive", e))?;
        let mut ours = Some(ours);
        let mut theirs = Some(theirs);
        let mut alive_r = Some(alive_r);
        let mut alive_w = Some(alive_w);
        let pid = sock::fork_run(&mut || {
            // In the child: forget the parent's ends (closed below with everything else).
            let _ = ours.take().map(IntoRawFd::into_raw_fd);
            let _ = alive_w.take().map(IntoRawFd::into_raw_fd);
            let (Some(sock_end), Some(alive)) = (theirs.take(), alive_r.take()) else { return 1 };
            let mut keep = [sock_end.as_raw_fd(), alive.as_raw_fd()];
            keep.sort_unstable();
            // The owner's dropped children are not this server's: forget their pidfds before
            // their numbers are closed below (and reused by the server's own fds).
            crate::orphans::forget_inherited();
            sock::private_server_setup(&keep);
            let Ok(mut server) = Server::new(
                None,
                key.clone(),
                ServerOptions {
                    owns_process: true,
                    spawn_threads: super::server::default_spawn_threads(),
                    pool,
                    ..ServerOptions::default()
                },
            ) else {
                return 1;
            };
            server.add_connection(sock_end);
            server.stop_on_eof(alive);
            match server.run() {
                Ok(()) => 0,
                Err(_) => 1,
            }
        })
        .map_err(|e| Error::os("fork", "private spawn server", e))?;
        drop(theirs);
        drop(alive_r);
        let pidfd =
            pidfd::open(pid).map_err(|e| Error::os("pidfd_open", format!("pid {pid}"), e))?;
        let Some(ours) = ours else { unreachable!("the parent keeps its end") };
        let client = Client::from_stream(ours, &key)?;
        Ok(PrivateServer { client: Some(client), alive: alive_w, pid, pidfd })
    }

    /// The server's pid (the parent of every child it starts).
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// The connection to it.
    pub fn client(&mut self) -> &mut Client {
        self.client.as_mut().unwrap_or_else(|| unreachable!("taken only by drop"))
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        drop(self.client.take());
        drop(self.alive.take());
        // It exits on the EOF at once; reap it so it is no zombie of ours.
        let _ = pidfd::wait(self.pidfd.as_fd(), false);
    }
}
