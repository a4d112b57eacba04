//! `spawnkit worker`: a remote-execution worker for a BuildGrid farm (parse flags, call
//! `spawnkit_worker::run`).

use std::path::PathBuf;
use std::time::Duration;

use crate::out::note;
use crate::run::parse_seconds;

const AFTER_HELP: &str = "\
What it does:
  Creates one bot session per --concurrency slot with the server's Remote Workers API (Bots:
  CreateBotSession, then UpdateBotSession to take leases and report results); each session
  has capacity 1 and the bot id ID/SLOT (ID: --bot-id), so a finished action is reported at
  once, never behind another slot's call. For each lease: fetches the Command (and the
  input root's directories not cached yet) from the CAS, lays out the input root under
  --work-dir (hard links from a local content cache, --cache-size bounded), runs the
  command with spawnkit's engine, uploads output files, output directories (as Tree),
  symlinks, stdout and stderr, and reports the ActionResult with exit code and timestamps.
  A failing command is a result; a missing input blob is FAILED_PRECONDITION naming the
  digest; a timeout kills the command's whole process tree and reports DEADLINE_EXCEEDED.

The fence (--fence, default net,tmp,pid):
  net  a network namespace with only lo (the platform property network=on lifts it)
  tmp  a fresh tmpfs on /tmp
  pid  a pid namespace: the command is pid 1, and everything it started dies with it
  --uid/--gid run the command as that user (the input root is handed to it); --rlimit sets
  limits (repeatable). A fenced command starts with no capabilities, even as root.

Stopping:
  SIGTERM or SIGINT: take no new leases, let running actions finish (up to
  --drain-timeout), report them, exit. A second signal, or the timeout, kills running
  actions and returns their leases (UNAVAILABLE: the scheduler retries them elsewhere).
  The worker reconnects by itself when the server restarts.

Examples:
  spawnkit worker --remote http://localhost:50051 --instance main --work-dir /var/lib/sk
  spawnkit worker --remote http://bgd:50051 --instance main --concurrency 8 \\
      --platform OSFamily=linux --platform ISA=x86-64 --uid nobody --rlimit nofile=1024
  bgd execute --remote http://localhost:50051 --instance-name main command . -- echo hi";

/// Options of `spawnkit worker`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct WorkerArgs {
    /// The server with the Bots service: http://HOST[:PORT] or https://... (port 50051 by
    /// default, as bgd's).
    #[arg(long, value_name = "URL", help_heading = "Server")]
    pub remote: String,

    /// The CAS and ByteStream server, if not --remote.
    #[arg(long, value_name = "URL", help_heading = "Server")]
    pub remote_cas: Option<String>,

    /// The instance name (BuildGrid's instances[].name; "" for the unnamed instance).
    #[arg(long, value_name = "NAME", default_value = "", help_heading = "Server")]
    pub instance: String,

    /// A file holding the bearer token sent with every request.
    #[arg(long, value_name = "FILE", help_heading = "Server")]
    pub auth_token: Option<PathBuf>,

    /// TLS: the server's certificate, PEM (https is used when given).
    #[arg(long, value_name = "FILE", help_heading = "Server")]
    pub server_cert: Option<PathBuf>,

    /// TLS: this worker's private key, PEM (with --client-cert).
    #[arg(long, value_name = "FILE", help_heading = "Server")]
    pub client_key: Option<PathBuf>,

    /// TLS: this worker's certificate, PEM (with --client-key).
    #[arg(long, value_name = "FILE", help_heading = "Server")]
    pub client_cert: Option<PathBuf>,

    /// TLS for --remote-cas: the CAS server's certificate.
    #[arg(long, value_name = "FILE", help_heading = "Server")]
    pub cas_server_cert: Option<PathBuf>,

    /// TLS for --remote-cas: the private key.
    #[arg(long, value_name = "FILE", help_heading = "Server")]
    pub cas_client_key: Option<PathBuf>,

    /// TLS for --remote-cas: the certificate.
    #[arg(long, value_name = "FILE", help_heading = "Server")]
    pub cas_client_cert: Option<PathBuf>,

    /// Actions run at once: one bot session of capacity 1 each (default: the number of CPUs).
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u32).range(1..=4096)
    )]
    pub concurrency: Option<u32>,

    /// Where input roots (DIR/actions) and the content cache (DIR/cache) live.
    #[arg(long, value_name = "DIR")]
    pub work_dir: PathBuf,

    /// A platform property to advertise, KEY=VALUE (repeatable; the scheduler matches
    /// actions' platforms against them).
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_property)]
    pub platform: Vec<(String, String)>,

    /// The bot id (default: HOSTNAME-PID-RANDOM); slot N's session has the bot id ID/N.
    #[arg(long, value_name = "ID")]
    pub bot_id: Option<String>,

    /// The local content cache's size limit: bytes, or with K, M, G, T (powers of 1024).
    #[arg(long, value_name = "SIZE", default_value = "4G", value_parser = parse_size)]
    pub cache_size: u64,

    /// Fences around each action: a comma-separated list of net, tmp, pid; "none" for none.
    #[arg(long, value_name = "LIST", default_value = "net,tmp,pid", value_parser = parse_fence, help_heading = "Fence")]
    pub fence: FenceSet,

    /// Run actions as this user (name or number).
    #[arg(long, value_name = "USER|UID", allow_negative_numbers = true, value_parser = crate::run::parse_user, help_heading = "Fence")]
    pub uid: Option<spawnkit::User>,

    /// Run actions with this group (default: the group of --uid's number).
    #[arg(long, value_name = "GROUP|GID", allow_negative_numbers = true, value_parser = crate::run::parse_group, help_heading = "Fence")]
    pub gid: Option<spawnkit::Group>,

    /// A resource limit for each action, NAME=SOFT[:HARD] (nofile=1024, as=4G...; repeatable).
    #[arg(long, value_name = "NAME=SOFT[:HARD]", value_parser = str::parse::<spawnkit::Rlimit>, help_heading = "Fence")]
    pub rlimit: Vec<spawnkit::Rlimit>,

    /// Timeout of an action that sets none, in seconds.
    #[arg(long, value_name = "SECS", default_value = "3600", allow_negative_numbers = true, value_parser = parse_seconds, help_heading = "Fence")]
    pub default_timeout: Duration,

    /// The longest timeout an action may set, in seconds.
    #[arg(long, value_name = "SECS", default_value = "86400", allow_negative_numbers = true, value_parser = parse_seconds, help_heading = "Fence")]
    pub max_timeout: Duration,

    /// After SIGTERM, how long running actions may finish before their leases are returned.
    #[arg(long, value_name = "SECS", default_value = "60", allow_negative_numbers = true, value_parser = parse_seconds)]
    pub drain_timeout: Duration,

    /// Write the worker's figures (actions; per action, in µs: overhead, and its part waiting
    /// on the servers) as JSON here at exit.
    #[arg(long, value_name = "FILE")]
    pub stats_file: Option<PathBuf>,
}

/// The fences `--fence` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceSet {
    net: bool,
    tmp: bool,
    pid: bool,
}

fn parse_fence(s: &str) -> Result<FenceSet, String> {
    let mut f = FenceSet { net: false, tmp: false, pid: false };
    if s.trim() == "none" {
        return Ok(f);
    }
    for item in s.split(',').map(str::trim) {
        match item {
            "net" => f.net = true,
            "tmp" => f.tmp = true,
            "pid" => f.pid = true,
            "" => return Err(format!("{s:?}: an empty item (use net, tmp, pid, or none)")),
            other => return Err(format!("unknown fence {other:?} (use net, tmp, pid, or none)")),
        }
    }
    Ok(f)
}

fn parse_property(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("{s:?}: unknown unit (use K, M, G, T)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("{s:?} is not a size"))?;
    n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"))
}

fn config(args: &WorkerArgs) -> Result<spawnkit_worker::Config, String> {
    let uid = match &args.uid {
        Some(u) => Some(u.uid().map_err(|e| format!("--uid: {e}"))?),
        None => None,
    };
    let gid = match &args.gid {
        Some(g) => Some(g.gid().map_err(|e| format!("--gid: {e}"))?),
        None => None,
    };
    if args.default_timeout.is_zero() || args.max_timeout.is_zero() {
        return Err("--default-timeout and --max-timeout must be above 0".into());
    }
    let concurrency = match args.concurrency {
        Some(n) => n as usize,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    Ok(spawnkit_worker::Config {
        remote: args.remote.clone(),
        remote_cas: args.remote_cas.clone(),
        instance: args.instance.clone(),
        concurrency,
        work_dir: args.work_dir.clone(),
        platform: args.platform.clone(),
        fence: spawnkit_worker::Fence {
            private_net: args.fence.net,
            private_tmp: args.fence.tmp,
            private_pid: args.fence.pid,
            uid,
            gid,
            rlimits: args.rlimit.clone(),
        },
        cache_size: args.cache_size,
        bot_id: args.bot_id.clone(),
        tls: spawnkit_worker::Tls {
            server_cert: args.server_cert.clone(),
            client_key: args.client_key.clone(),
            client_cert: args.client_cert.clone(),
        },
        cas_tls: spawnkit_worker::Tls {
            server_cert: args.cas_server_cert.clone(),
            client_key: args.cas_client_key.clone(),
            client_cert: args.cas_client_cert.clone(),
        },
        auth_token: args.auth_token.clone(),
        default_timeout: args.default_timeout,
        max_timeout: args.max_timeout,
        drain_timeout: args.drain_timeout,
        stats_file: args.stats_file.clone(),
    })
}

/// Run `spawnkit worker`; returns the exit code.
pub fn main(args: &WorkerArgs) -> i32 {
    match config(args).and_then(spawnkit_worker::run) {
        Ok(_) => 0,
        Err(m) => {
            note!("spawnkit worker: {m}");
            crate::USAGE_ERROR
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("4X").is_err());
        assert!(parse_size("G").is_err());
    }

    #[test]
    fn fences() {
        assert_eq!(parse_fence("none"), Ok(FenceSet { net: false, tmp: false, pid: false }));
        assert_eq!(parse_fence("net,pid"), Ok(FenceSet { net: true, tmp: false, pid: true }));
        assert!(parse_fence("net,,pid").is_err());
        assert!(parse_fence("user").is_err());
    }

    #[test]
    fn properties() {
        assert_eq!(parse_property("OSFamily=linux"), Ok(("OSFamily".into(), "linux".into())));
        assert_eq!(parse_property("k=a=b"), Ok(("k".into(), "a=b".into())));
        assert!(parse_property("=x").is_err());
        assert!(parse_property("novalue").is_err());
    }
}
