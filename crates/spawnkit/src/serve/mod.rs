//! The spawn server and its client: a small process that spawns for others, so that a huge,
//! threaded or sandboxed caller starts programs for the price of one authenticated message.
//!
//! - [`frame`]: length-prefixed, versioned frames with a fixed size limit; a decoder that
//!   treats every byte and fd as hostile.
//! - [`auth`]: the 32-byte key and the mutual HMAC-SHA256 challenge-response.
//! - `gate`: what a client may ask of a process running with the server's rights.
//! - [`Server`]: the epoll loop (`spawnkit serve`); [`PrivateServer`]: one forked early for
//!   this process alone; [`Client`]: `spawn(&Command) -> Child`, `submit`/`receive`, and
//!   `status(&Command) -> ExitStatus` (spawn and wait, the pidfd kept in the server).
//!
//! The protocol, byte by byte, and the policy: docs/protocol.md.

pub mod auth;
pub(crate) mod client;
pub mod frame;
mod gate;
mod private;
mod reaper;
mod reply;
mod server;
mod watchdog;

pub use auth::Key;
pub use client::{Client, KEY_ENV, SERVER_ENV};
pub use private::PrivateServer;
pub use server::{
    default_socket_dir, default_socket_path, default_spawn_threads, ensure_private_dir,
    kernel_has_pidfd_exit_info, key_path_for, Counts, Server, ServerOptions, Stopper, DEFAULT_POOL,
    FRAME_TIMEOUT, HANDSHAKE_TIMEOUT, MAX_STATUS_IN_FLIGHT,
};
pub use watchdog::EXEC_TIMEOUT;
