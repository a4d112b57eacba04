//! `spawnkit._native.Server`: a connection to a spawn server, `spawnkit serve`'s socket or a
//! private server forked early from this process; `Command.spawn_child(via=...)` sends
//! through it.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::{PyConnectionError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use spawnkit::serve::{default_socket_path, Client};
use spawnkit::PrivateServer;

use crate::convert::fs_os;

enum Conn {
    Private(Box<PrivateServer>),
    Socket(Box<Client>),
    Closed,
}

/// A spawn server to start children through: `Server()` forks a private one now (do it
/// early, while this process is small and has no threads), `Server.connect(path)` joins
/// `spawnkit serve`'s. A child started through it has the server as its parent; its pidfd
/// comes back by SCM_RIGHTS, so waiting and signalling work as for a local child.
#[pyclass(frozen, module = "spawnkit._native", name = "Server")]
pub(crate) struct Server {
    conn: Mutex<Conn>,
    pid: Option<u32>,
    path: Option<PathBuf>,
    /// The process that made the connection: a fork()ed copy must not write into it.
    owner: u32,
}

/// An engine error as `OSError` (its subclass by errno), or `ConnectionError` for a protocol
/// or authentication failure, with the engine's message.
fn engine_error(e: spawnkit::Error) -> PyErr {
    match e.raw_os_error() {
        Some(errno) => PyOSError::new_err((errno, e.to_string())),
        None => PyConnectionError::new_err(e.to_string()),
    }
}

impl Server {
    /// The connection, for a spawn from this process (not a fork()ed copy of it).
    pub(crate) fn client(&self) -> PyResult<ClientGuard<'_>> {
        if std::process::id() != self.owner {
            return Err(PyRuntimeError::new_err(
                "this spawn server connection belongs to the process that made it (this is a \
                 fork of it): connect again",
            ));
        }
        let guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*guard, Conn::Closed) {
            return Err(PyValueError::new_err("the spawn server connection is closed"));
        }
        Ok(ClientGuard(guard))
    }
}

/// A Wake on a locked connection: the outer error if it is closed, the inner one the
/// client's.
fn wake_conn(conn: &mut Conn) -> PyResult<spawnkit::Result<()>> {
    match conn {
        Conn::Private(p) => Ok(p.client().wake()),
        Conn::Socket(c) => Ok(c.wake()),
        Conn::Closed => Err(PyValueError::new_err("the spawn server connection is closed")),
    }
}

/// The locked connection.
pub(crate) struct ClientGuard<'a>(MutexGuard<'a, Conn>);

impl ClientGuard<'_> {
    pub(crate) fn get(&mut self) -> &mut Client {
        match &mut *self.0 {
            Conn::Private(p) => p.client(),
            Conn::Socket(c) => c,
            Conn::Closed => unreachable!("checked by Server::client"),
        }
    }
}

#[pymethods]
impl Server {
    /// Fork a private spawn server now, connected over a socketpair (the key never leaves
    /// memory); it exits when this object is closed or this process ends.
    #[new]
    fn new(py: Python<'_>) -> PyResult<Server> {
        let private = py.detach(PrivateServer::start).map_err(engine_error)?;
        Ok(Server {
            pid: Some(private.pid()),
            conn: Mutex::new(Conn::Private(Box::new(private))),
            path: None,
            owner: std::process::id(),
        })
    }

    /// Connect to `spawnkit serve`'s socket (default: `$XDG_RUNTIME_DIR/spawnkit/server.sock`
    /// or `/tmp/spawnkit-UID/server.sock`), with the key from `key_file`, else
    /// `$SPAWNKIT_SERVER_KEY`, else `SOCKET.key`.
    #[staticmethod]
    #[pyo3(signature = (path = None, *, key_file = None))]
    fn connect(
        py: Python<'_>,
        path: Option<&Bound<'_, PyAny>>,
        key_file: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Server> {
        let path: PathBuf = match path.filter(|p| !p.is_none()) {
            Some(p) => fs_os(p)?.into(),
            None => default_socket_path(),
        };
        let key_file: Option<PathBuf> = match key_file.filter(|k| !k.is_none()) {
            Some(k) => Some(fs_os(k)?.into()),
            None => None,
        };
        let client = py
            .detach(|| match &key_file {
                Some(k) => Client::connect_with_key_file(&path, k),
                None => Client::connect(&path),
            })
            .map_err(engine_error)?;
        Ok(Server {
            conn: Mutex::new(Conn::Socket(Box::new(client))),
            pid: None,
            path: Some(path),
            owner: std::process::id(),
        })
    }

    /// Tell the server a request is coming (a Wake frame): its CPU wakes while this process
    /// prepares the spawn, not when the request arrives. A lone request within 60 µs then
    /// sends no Wake of its own. Nothing is sent while requests are in flight, nor while
    /// another thread uses the connection (never waited for: the GIL is let go, and a busy
    /// lock means the server is busy). Raises only if the connection is broken or closed.
    fn wake(&self, py: Python<'_>) -> PyResult<()> {
        if std::process::id() != self.owner {
            return self.client().map(drop);
        }
        let woke = py.detach(|| match self.conn.try_lock() {
            Ok(mut guard) => wake_conn(&mut guard),
            Err(std::sync::TryLockError::Poisoned(e)) => wake_conn(&mut e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Ok(Ok(())),
        });
        woke?.map_err(engine_error)
    }

    /// The private server's pid (the parent of the children it starts); `None` for a
    /// connection to `spawnkit serve`.
    #[getter]
    fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The socket path of `spawnkit serve`; `None` for a private server.
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.path.clone()
    }

    /// Close the connection (a private server exits; children it started keep running).
    fn close(&self, py: Python<'_>) {
        let old = {
            let mut guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut *guard, Conn::Closed)
        };
        // Dropping a private server reaps it: without the GIL.
        py.detach(move || drop(old));
    }

    /// The connection's socket, for an event loop to watch: readable when answers to
    /// requests sent with `Command.submit_child` arrive (then call `answered`). Never read
    /// or write it.
    fn fileno(&self) -> PyResult<i32> {
        Ok(self.client()?.get().as_raw_fd())
    }

    /// Read the answers that have arrived, without waiting: the ids of every request whose
    /// answer is waiting (`Command.receive_child` then returns at once for them).
    fn answered(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        let ids = py.detach(|| self.client().map(|mut c| c.get().poll_answers()))?;
        ids.map_err(engine_error)
    }

    /// Whether children started through this connection learn their exit status from the
    /// server's frames (a kernel before 6.15 cannot tell a non-parent): their pidfd alone
    /// does not give it, and waiting for them reads the connection.
    #[getter]
    fn exit_frames(&self) -> PyResult<bool> {
        Ok(self.client()?.get().uses_exit_frames())
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        matches!(*self.conn.lock().unwrap_or_else(|e| e.into_inner()), Conn::Closed)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _ty: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) {
        self.close(py);
    }

    fn __repr__(&self) -> String {
        match (&self.path, self.pid) {
            (Some(p), _) => format!("<spawnkit.Server {}>", p.display()),
            (None, Some(pid)) => format!("<spawnkit.Server private pid={pid}>"),
            _ => "<spawnkit.Server>".into(),
        }
    }
}
