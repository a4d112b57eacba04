//! `spawnkit worker`: a bot of the Remote Workers API (`google.devtools.remoteworkers.v1test2
//! .Bots`, as BuildGrid serves it) that runs REAPI actions with the spawnkit engine.
//!
//! The worker creates a bot session, long-polls `UpdateBotSession` for leases, and for each
//! lease fetches the `Action` and `Command` from the CAS, lays out the input root (hard links
//! from a local content cache), runs the command fenced in one spawn (private network unless
//! the platform property `network=on`, private /tmp, a pid namespace, the configured uid,
//! rlimits, the action's timeout), uploads outputs, stdout and stderr, and reports the
//! `ActionResult`. See [`Config`] and [`run`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod auth;
mod bot;
mod cas;
mod exec;
pub mod proto;

pub use auth::Tls;
pub use bot::Stats;
pub use exec::Fence;

/// One line on stderr, `spawnkit worker: LINE`. Unlike `eprintln!`, a stderr that cannot be
/// written (/dev/full, a closed pipe) is no panic: the line is lost, the worker goes on (as
/// the CLI's `note!` does).
pub(crate) fn note(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "spawnkit worker: {line}");
}

/// Everything `spawnkit worker` is configured with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server with the Bots service (`http://host:port`; port 50051 by default).
    pub remote: String,
    /// The CAS/ByteStream server, when not `remote`.
    pub remote_cas: Option<String>,
    /// The instance name (BuildGrid's `instances[].name`; empty for the unnamed one).
    pub instance: String,
    /// Leases run at once (BuildGrid's bot capacity).
    pub concurrency: usize,
    /// Where input roots and the content cache live.
    pub work_dir: PathBuf,
    /// Properties advertised on the primary device (the platform the scheduler matches).
    pub platform: Vec<(String, String)>,
    pub fence: Fence,
    /// The local content cache's size limit in bytes.
    pub cache_size: u64,
    /// The bot id (default: hostname and pid).
    pub bot_id: Option<String>,
    pub tls: Tls,
    pub cas_tls: Tls,
    pub auth_token: Option<PathBuf>,
    /// The timeout of an action that sets none, and the cap on one it sets.
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    /// How long SIGTERM lets running actions finish before their leases are returned.
    pub drain_timeout: Duration,
    /// Write the bot's figures (actions; per action: overhead, and its part waiting on the
    /// servers) as JSON here at exit.
    pub stats_file: Option<PathBuf>,
}

/// The in-memory cache of input-root `Directory` messages: encoded bytes at most.
const DIR_CACHE_BYTES: u64 = 64 << 20;

/// A random 128-bit id in hex (upload names, temporary files, bot ids).
pub(crate) fn random_id() -> String {
    let mut b = [0u8; 16];
    // getrandom(2) never fails for 16 bytes once the pool is initialised; on failure the
    // fallback below still differs per call.
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_ok();
    if !ok {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        b.copy_from_slice(&t.to_le_bytes());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// Run the worker until SIGTERM or SIGINT (a second one stops at once, returning leases).
/// Errors are one line, for the CLI to print.
pub fn run(config: Config) -> Result<Stats, String> {
    if config.concurrency == 0 {
        return Err("--concurrency must be at least 1".into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.concurrency.clamp(2, 8))
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(run_async(config))
}

async fn run_async(config: Config) -> Result<Stats, String> {
    use tokio::signal::unix::{signal, SignalKind};

    let auth = auth::Auth::from_file(config.auth_token.as_deref())?;
    let bots_channel = auth::channel(&config.remote, &config.tls)?;
    let cas_channel = match &config.remote_cas {
        Some(url) => auth::channel(url, &config.cas_tls)?,
        None => bots_channel.clone(),
    };
    std::fs::create_dir_all(&config.work_dir)
        .map_err(|e| format!("--work-dir {}: {e}", config.work_dir.display()))?;
    let work_dir = std::fs::canonicalize(&config.work_dir)
        .map_err(|e| format!("--work-dir {}: {e}", config.work_dir.display()))?;
    if config.fence.private_tmp && work_dir.starts_with("/tmp") {
        return Err(format!(
            "--work-dir {} is under /tmp, which the tmp fence replaces with a fresh tmpfs: \
             choose a directory elsewhere (/var/tmp, /var/lib/...) or --fence without tmp",
            config.work_dir.display()
        ));
    }
    let actions = work_dir.join("actions");
    // Left over from a worker that died: nothing in it belongs to a live action.
    exec::remove_tree(&actions);
    std::fs::create_dir_all(&actions).map_err(|e| format!("mkdir {}: {e}", actions.display()))?;
    let cache = cas::LocalCache::open(work_dir.join("cache"), config.cache_size)
        .map_err(|e| format!("the content cache in {}: {e}", config.work_dir.display()))?;
    let bot_id = config
        .bot_id
        .clone()
        .unwrap_or_else(|| format!("{}-{}-{}", hostname(), std::process::id(), &random_id()[..8]));
    let exec = Arc::new(exec::Executor {
        cas: cas::Cas::new(cas_channel, &config.instance, auth.clone()),
        cache,
        dirs: cas::DirCache::new(DIR_CACHE_BYTES),
        work_dir,
        fence: config.fence.clone(),
        bot_id: bot_id.clone(),
        default_timeout: config.default_timeout,
        max_timeout: config.max_timeout,
        workspaces: Default::default(),
        next_workspace: Default::default(),
    });
    let (tx, rx) = tokio::sync::watch::channel(0u32);
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT: {e}"))?;
    let signals = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tx.send_modify(|n| *n += 1);
        }
    });
    // One bot session per slot, each of capacity 1: a slot's result is reported the moment
    // it is whole, never behind another slot's call (calls are serial per session).
    let mut bots = Vec::with_capacity(config.concurrency);
    for slot in 0..config.concurrency {
        let bot = bot::Bot {
            client: proto::BotsClient::new(bots_channel.clone()),
            auth: auth.clone(),
            config: bot::BotConfig {
                instance: config.instance.clone(),
                bot_id: bot::slot_bot_id(&bot_id, slot),
                capacity: 1,
                platform: config.platform.clone(),
                drain_timeout: config.drain_timeout,
            },
            exec: exec.clone(),
        };
        bots.push(tokio::spawn(bot.run(rx.clone())));
    }
    drop(rx);
    let mut stats = Stats::default();
    for b in bots {
        match b.await {
            Ok(s) => stats.merge(s),
            Err(e) => note(format_args!("a bot session's task failed: {e}")),
        }
    }
    signals.abort();
    exec::remove_tree(&actions);
    if let Some(path) = &config.stats_file {
        let us = |v: &[Duration]| {
            v.iter().map(|d| d.as_micros().to_string()).collect::<Vec<_>>().join(", ")
        };
        let calls: Vec<String> = stats.cas_calls.iter().map(u32::to_string).collect();
        let json = format!(
            "{{\"completed\": {}, \"failed\": {}, \"returned\": {}, \"cancelled\": {}, \
             \"sessions\": {}, \
             \"overhead_us\": [{}], \"server_wait_us\": [{}], \"cas_wait_us\": [{}], \
             \"cas_calls\": [{}], \"report_wait_us\": [{}], \"start_us\": [{}], \
             \"handoff_us\": [{}]}}\n",
            stats.completed,
            stats.failed,
            stats.returned,
            stats.cancelled,
            stats.sessions,
            us(&stats.overhead),
            us(&stats.server_wait),
            us(&stats.cas_wait),
            calls.join(", "),
            us(&stats.report_wait),
            us(&stats.start),
            us(&stats.handoff),
        );
        std::fs::write(path, json).map_err(|e| format!("--stats-file {}: {e}", path.display()))?;
    }
    note(format_args!(
        "stopped: {} actions completed, {} failed, {} leases returned, {} cancelled",
        stats.completed, stats.failed, stats.returned, stats.cancelled
    ));
    Ok(stats)
}
