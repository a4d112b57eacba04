//! The spawn server's frames and authentication for the Python zygote
//! (`spawnkit.multiprocessing`): the same Rust decoder and HMAC handshake, driven by Python
//! sockets. `Frames` turns received bytes and fds into frames (every byte hostile), `header`
//! encodes one, and the `auth_*` functions are the handshake's two sides.

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;
use std::sync::Mutex;

use spawnkit::serve::auth::{self, Key};
use spawnkit::serve::frame::{Expect, Header, Inbox, Kind, MAX_BODY};

use crate::child::Child;

const NONCE: usize = 32;
const MAC: usize = 32;

/// What a zygote expects next, and what its client does.
fn expect(phase: &str) -> PyResult<Expect> {
    Ok(match phase {
        // Client side of the handshake.
        "challenge" => Expect { kinds: &[Kind::Challenge], max_body: NONCE, fds: false },
        "welcome" => Expect { kinds: &[Kind::Welcome, Kind::Failure], max_body: 256, fds: false },
        // Zygote side.
        "answer" => Expect { kinds: &[Kind::Answer], max_body: NONCE + MAC, fds: false },
        "request" => Expect { kinds: &[Kind::Fork, Kind::Want], max_body: MAX_BODY, fds: true },
        // Client side, after the handshake.
        "reply" => Expect {
            kinds: &[Kind::Spawned, Kind::Error, Kind::Workers],
            max_body: 64 << 10,
            fds: true,
        },
        _ => return Err(PyValueError::new_err(format!("unknown phase {phase:?}"))),
    })
}

fn kind_of(n: u8) -> PyResult<Kind> {
    Ok(match n {
        1 => Kind::Challenge,
        2 => Kind::Answer,
        3 => Kind::Welcome,
        4 => Kind::Failure,
        17 => Kind::Spawned,
        18 => Kind::Error,
        32 => Kind::Fork,
        33 => Kind::Workers,
        34 => Kind::Want,
        _ => return Err(PyValueError::new_err(format!("not a zygote frame kind: {n}"))),
    })
}

fn key_of(key: &[u8]) -> PyResult<Key> {
    let bytes: [u8; 32] = key.try_into().map_err(|_| PyValueError::new_err("a key is 32 bytes"))?;
    Ok(Key::from_bytes(bytes))
}

fn nonce_of(n: &[u8]) -> PyResult<[u8; NONCE]> {
    n.try_into().map_err(|_| PyValueError::new_err("a nonce is 32 bytes"))
}

/// A frame header (16 bytes): `kind`, `flags`, the number of fds passed with it, the request
/// id and the body's length.
#[pyfunction]
pub(crate) fn frame_header(
    py: Python<'_>,
    kind: u8,
    nfds: u8,
    id: u64,
    length: u32,
) -> PyResult<Bound<'_, PyBytes>> {
    let h = Header { len: length, kind: kind_of(kind)?, flags: 0, nfds, id };
    Ok(PyBytes::new(py, &h.encode()))
}

/// A fresh 32-byte nonce (getrandom).
#[pyfunction]
pub(crate) fn auth_nonce(py: Python<'_>) -> PyResult<Bound<'_, PyBytes>> {
    let n = auth::nonce().map_err(|e| PyOSError::new_err(e.to_string()))?;
    Ok(PyBytes::new(py, &n))
}

// A key is `bytes` or `bytearray` (the zygote keeps its key in a bytearray).

/// The client's Answer body for the zygote's nonce, and the client's own nonce.
#[pyfunction]
pub(crate) fn auth_answer<'py>(
    py: Python<'py>,
    key: PyBackedBytes,
    server_nonce: &[u8],
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let (body, nc) = auth::client_answer(&key_of(&key)?, &nonce_of(server_nonce)?)
        .map_err(|e| PyOSError::new_err(e.to_string()))?;
    Ok((PyBytes::new(py, &body), PyBytes::new(py, &nc)))
}

/// The zygote's check of an Answer body: the Welcome body if the client proved the key,
/// else `None` (constant time).
#[pyfunction]
pub(crate) fn auth_check_answer<'py>(
    py: Python<'py>,
    key: PyBackedBytes,
    server_nonce: &[u8],
    answer: &[u8],
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let welcome = auth::server_check(&key_of(&key)?, &nonce_of(server_nonce)?, answer);
    Ok(welcome.map(|w| PyBytes::new(py, &w)))
}

/// The client's check of the Welcome body (constant time).
#[pyfunction]
pub(crate) fn auth_check_welcome(
    key: PyBackedBytes,
    server_nonce: &[u8],
    client_nonce: &[u8],
    welcome: &[u8],
) -> PyResult<bool> {
    Ok(auth::client_check(
        &key_of(&key)?,
        &nonce_of(server_nonce)?,
        &nonce_of(client_nonce)?,
        welcome,
    ))
}

/// A frame for Python: kind, flags, request id, body, fds.
type FrameTuple<'py> = (u8, u8, u64, Bound<'py, PyBytes>, Vec<i32>);

/// Received bytes and fds, turned into frames by the spawn server's decoder.
#[pyclass(frozen, module = "spawnkit._native")]
pub(crate) struct Frames {
    inbox: Mutex<Inbox>,
}

#[pymethods]
impl Frames {
    #[new]
    fn new() -> Frames {
        Frames { inbox: Mutex::new(Inbox::new()) }
    }

    /// Add what one recvmsg returned: its bytes and the fds that came with them (owned from
    /// now on: closed if no frame takes them).
    fn push(&self, data: &[u8], fds: Vec<i32>) {
        let owned: Vec<OwnedFd> = fds.into_iter().filter(|&fd| fd >= 0).map(owned_fd).collect();
        self.inbox.lock().unwrap_or_else(|e| e.into_inner()).push(data, owned);
    }

    /// The next complete frame allowed in `phase` (`"challenge"`, `"welcome"`, `"answer"`,
    /// `"request"`, `"reply"`), as `(kind, flags, id, body, fds)` with the fds now the
    /// caller's; `None` if more bytes are needed. A frame that breaks the rules (a foreign
    /// version, a kind not allowed now, a body over the limit, fds missing or flooding) is a
    /// `ValueError`: close the connection.
    fn next<'py>(&self, py: Python<'py>, phase: &str) -> PyResult<Option<FrameTuple<'py>>> {
        let expect = expect(phase)?;
        let mut inbox = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        match inbox.next(expect) {
            Ok(None) => Ok(None),
            Ok(Some((frame, body))) => {
                let body = PyBytes::new(py, body);
                let h = frame.header;
                let fds = frame.fds.into_iter().map(IntoRawFd::into_raw_fd).collect();
                Ok(Some((h.kind as u8, h.flags, h.id, body, fds)))
            }
            Err(e) => Err(PyValueError::new_err(e.to_string())),
        }
    }

    /// Bytes received and not yet part of a frame.
    fn buffered(&self) -> usize {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner()).buffered()
    }
}

/// Take ownership of an fd the Python side received and hands over (`spawnkit._zygote`
/// passes each fd recvmsg gave it exactly once and never touches it again).
fn owned_fd(fd: i32) -> OwnedFd {
    // SAFETY: per the contract above, `fd` is open and owned by no one else from now on.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A `Child` for a process that another process started (the zygote's worker), known by
/// its pid and a pidfd (the fd is taken over).
#[pyfunction]
pub(crate) fn remote_child(pid: u32, pidfd: i32) -> PyResult<Child> {
    if pidfd < 0 {
        return Err(PyValueError::new_err("not a pidfd"));
    }
    Ok(Child::new(spawnkit::Child::from_remote_pidfd(pid, owned_fd(pidfd))))
}
