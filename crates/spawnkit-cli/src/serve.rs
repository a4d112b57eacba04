//! `spawnkit serve`: run a spawn server in the foreground (parse, call
//! `spawnkit::Server`, print the socket path).

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser as _;
use spawnkit::{Server, ServerOptions, SigSet, Signal, SignalFd};

use crate::out::note;
use crate::run::parse_seconds;

const AFTER_HELP: &str = "\
A spawn server starts programs for other processes: `spawnkit run --via SOCKET`, the Rust
`spawnkit::Client`, Python's `spawnkit.connect()`. A huge, threaded or sandboxed caller then
pays one authenticated message per spawn instead of a clone of itself, and can keep many
spawns in flight from one thread.

Files:
  The socket defaults to $XDG_RUNTIME_DIR/spawnkit/server.sock, else
  /tmp/spawnkit-UID/server.sock; that directory is created 0700 and refused if it is not
  ours or others can open it. A fresh 32-byte key is written (mode 0600) to SOCKET.key, or
  --key-file, before the socket accepts; clients read it (or $SPAWNKIT_SERVER_KEY). Both
  files are removed when the server stops.

Who may connect:
  A peer with the server's own uid (SO_PEERCRED) that proves the key (HMAC-SHA256
  challenge-response in both directions). A root server also lets in the uid named by
  --allow-uid; its children run as that uid, and it may not ask for what would be root
  (namespaces, credentials, chroot, cgroups, negative nice...). See docs/protocol.md.

What a child started here differs in:
  Its parent is the server (getppid, --pdeathsig and --setsid are relative to the server);
  its limits, cgroup and nice are the server's unless the command sets them. Its cwd (a
  relative one resolved against the client's), environment and standard streams are the
  client's (one the client has closed is closed in the child too). Every signal starts at
  its default action: neither the server's ignored signals (a server started with & from
  a script ignores SIGINT and SIGQUIT) nor the client's reach it.

Limits:
  The server raises its soft fd limit to its hard one (ulimit -Hn) when it starts, as Go
  programs do: it holds a pidfd per status child (and, on kernels before 6.15, per running
  child) and one fd per client, at most half its fd limit of children. Each child gets the
  soft limit the server was started with back, unless its command sets one, its strategy
  is posix-spawn (which cannot set limits), or the server's limit was changed since
  (prlimit --pid: children then start with it as it is, but up to --pool children per
  spawning thread, the loop thread too, parked before the change, start with the limit
  they were made with: if that was the raised one, the one the server was given).
  An --allow-uid peer's children get the peer's own limits.

Stopping:
  SIGTERM, SIGINT or SIGHUP: stop accepting and exit; running children keep running (their
  clients hold pidfds). --idle-exit SECS: exit after SECS with no client connected.

Examples:
  spawnkit serve &                               (prints the socket path)
  spawnkit run --via /run/user/1000/spawnkit/server.sock -- make -j4
  SPAWNKIT_SERVER=/tmp/s.sock spawnkit run -- ./job
  spawnkit serve --socket /tmp/s.sock --idle-exit 600 --max-clients 64";

/// The most `--pool` children per spawning thread: each is a parked process, and the server
/// keeps one pool per spawning thread (a CPU each), so an unbounded N forks without end.
pub const MAX_POOL: i64 = 64;

/// Options of `spawnkit serve`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct ServeArgs {
    /// Listen here (default: $XDG_RUNTIME_DIR/spawnkit/server.sock, else
    /// /tmp/spawnkit-UID/server.sock).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Write the key here instead of SOCKET.key (mode 0600).
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,

    /// Exit after SECS with no client connected (children keep running).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = parse_seconds)]
    pub idle_exit: Option<Duration>,

    /// Close connections beyond N at once.
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_clients: Option<u32>,

    /// Close a connection whose request stays half sent for SECS (default 30).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = parse_seconds)]
    pub frame_timeout: Option<Duration>,

    /// Kill a child that has not reached execve SECS after its clone (default 10): a client
    /// that stops its child before the exec cannot hold a spawning thread.
    #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = parse_seconds)]
    pub exec_timeout: Option<Duration>,

    /// Keep N children made ahead of time per spawning thread, woken by a request that comes
    /// alone instead of cloned for it (default 2; 0: none; at most 64). Requests a client
    /// sends together (one SpawnMany frame: spawn_many, status_many), and those that need
    /// namespaces or a cgroup at the clone, clone as usual.
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u32).range(0..=MAX_POOL).map(|n| n as usize)
    )]
    pub pool: Option<usize>,

    /// Root only: also let this user in (name or number); its children run as it.
    #[arg(
        long,
        value_name = "USER|UID",
        allow_negative_numbers = true,
        value_parser = crate::run::parse_user
    )]
    pub allow_uid: Option<spawnkit::User>,
}

/// Run `spawnkit serve`; returns the exit code.
pub fn main(args: &ServeArgs) -> i32 {
    match serve(args) {
        Ok(()) => 0,
        Err(m) => {
            note!("spawnkit serve: {m}");
            crate::USAGE_ERROR
        }
    }
}

fn serve(args: &ServeArgs) -> Result<(), String> {
    let allow_uid = match &args.allow_uid {
        None => None,
        Some(u) => Some(u.uid().map_err(|e| format!("--allow-uid {u}: {e}"))?),
    };
    if allow_uid.is_some() && spawnkit::process::geteuid() != 0 {
        return Err("--allow-uid: only a server running as root can let another uid in".into());
    }
    let stop =
        [Signal::TERM, Signal::INT, Signal::HUP].into_iter().fold(SigSet::empty(), SigSet::with);
    let signals = SignalFd::block(stop).map_err(|e| format!("signalfd: {e}"))?;
    let opts = ServerOptions {
        idle_exit: args.idle_exit,
        max_clients: args.max_clients.map(|n| n as usize),
        frame_timeout: args.frame_timeout,
        exec_timeout: args.exec_timeout,
        allow_uid,
        // This process is the server's alone: it reaps every child of it (see `owns_process`).
        owns_process: true,
        spawn_threads: spawnkit::serve::default_spawn_threads(),
        pool: args.pool,
    };
    let mut server = Server::bind(args.socket.as_deref(), args.key_file.as_deref(), opts)
        .map_err(|e| e.to_string())?;
    server.stop_on(signals);
    // Its path is printed for whoever started it; a stdout closed from the start (`spawnkit
    // serve >&- &`) has nobody to tell, and the server runs all the same.
    if let Some(p) = server.socket_path().filter(|_| !crate::closed::at_start(1)) {
        // A reader that went away does not stop the server.
        if let Err(crate::out::Failure::Msg(m)) =
            crate::out::print_stdout(&format!("{}\n", p.display()))
        {
            return Err(m);
        }
    }
    server.run().map_err(|e| e.to_string())
}
