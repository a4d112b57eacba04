//! spawnkit-bench: the benchmark lab behind `spawnkit bench`. The field's three published spawn
//! benchmarks, reproduced, with spawnkit beside the alternatives in one run, the cost of a
//! fence, and the process table beside ps, psutil and smem; tables, JSON and charts.
//!
//! The `spawnkit` binary parses the flags into [`Options`] and calls [`run`].
//!
//! 1. **latency** (module `latency`, Josh Triplett, LPC 2022): spawn → the child's own
//!    CLOCK_MONOTONIC, from a small parent, 1 GiB allocated, and 1 GiB touched;
//! 2. **throughput** (module `throughput`, Gregory P. Smith, CPython PR #99309): processes per
//!    second with at most N alive;
//! 3. **cpu** (module `cpu`, the popen_noshell benchmarks): user + system CPU per spawn, without and
//!    with stdout captured, relative to vfork+exec;
//! 4. **fence** (module `fence`): the latency method for a launch inside a user namespace with a
//!    private /tmp and a private network, built by spawnkit in one spawn, by `unshare -Urmn` +
//!    mount + ip in a shell, and by bubblewrap, against the same launches without a fence;
//! 5. **ps** (module `ps`): N sleeping processes, then `spawnkit ps` (BPF and /proc backends)
//!    beside `ps ax`, `spawnkit.ps()` beside psutil, `spawnkit mem` beside smem;
//! 6. **server** (module `server`): a spawn through a private spawn server beside vfork+exec
//!    and the local spawn: latency, the calling thread's CPU, one thread's throughput, from a
//!    small and a 1 GiB touched parent; `spawnkit.subprocess` through the server in Python;
//! 7. **async** (module `async_spawn`): 1,000 processes, at most 64 running, from one event
//!    loop: tokio::process beside spawnkit's tokio face, asyncio beside spawnkit.asyncio;
//! 8. **mp** (module `mp`, Smith's method again, issue 14): processes per second of Python's
//!    multiprocessing start methods fork, forkserver, spawn and spawnkit, from a small and a
//!    1 GiB touched parent, and the time to a 4-worker Pool's first map result;
//! 9. **worker** (module `worker`, issue 16): N tiny actions through a real BuildGrid farm with
//!    two `spawnkit worker`s, fence on and off (actions/s, the worker's own time per action),
//!    and the worker's fence beside bubblewrap's, spawn → exit of /bin/true.
//!
//! Every row starts the same tiny static child (bench/tinychild.c, embedded) by the same bare
//! name, found through the same PATH whose first entry is the directory it was written to; the
//! C baselines (bench/baselines.c) are built by build.rs. Only [`rows::Row::spawn`] differs
//! between rows; rows are interleaved so noise on a shared machine hits them alike.

#![deny(unsafe_code)]

mod async_spawn;
mod cpu;
mod fence;
mod latency;
mod mp;
pub mod out;
mod plot;
mod ps;
mod python;
mod report;
mod rows;
mod server;
#[allow(unsafe_code)]
mod sys;
mod throughput;
mod worker;

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub use latency::Size;
pub use rows::Row;

/// The tiny child, built by build.rs.
const TINYCHILD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tinychild"));
/// Its file name in the temporary directory put first in PATH.
const TINY_NAME: &str = "spawnkit-tinychild";

/// Which method(s) to run. The variants' doc comments are also the help of
/// `spawnkit bench METHOD` (with the `clap` feature, as the binary builds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Method {
    /// Spawn-to-running time (min and median), three parent sizes.
    Latency,
    /// Processes per second with at most N alive.
    Throughput,
    /// User + system CPU per spawn, without and with stdout captured.
    Cpu,
    /// Spawn-to-running with a private /tmp, private network and user namespace: spawnkit,
    /// unshare + mount + ip in a shell, bubblewrap; the fence's cost in µs.
    Fence,
    /// N sleeping processes, then `spawnkit ps` (BPF, /proc) beside `ps ax`, `spawnkit.ps()`
    /// beside psutil's process_iter, `spawnkit mem` beside smem.
    Ps,
    /// A spawn through a private spawn server beside vfork+exec and the local spawn: latency,
    /// the calling thread's CPU per spawn, one thread's throughput (16 in flight), small and
    /// 1 GiB touched parent; spawnkit.subprocess through the server; multiprocessing forkserver.
    Server,
    /// 1,000 processes, at most 64 running, from one event loop: tokio::process beside
    /// spawnkit's tokio face (local, server) and a single thread's floor, asyncio (default and
    /// pidfd watchers) beside spawnkit.asyncio (local, server).
    Async,
    /// Python multiprocessing start methods (Smith's method): processes per second of fork,
    /// forkserver, spawn and spawnkit, small and 1 GiB touched parent; a 4-worker Pool's first
    /// map result.
    Mp,
    /// The remote-execution worker (issue 16): N tiny actions (/bin/true; a 10-file input
    /// root) through BuildGrid with two `spawnkit worker`s, fence on and off: actions/s and
    /// the worker's own time per action; the worker's fence beside bubblewrap's.
    Worker,
    /// All nine.
    All,
}

/// What to run and where to write it: the options of `spawnkit bench`, whose help (in the
/// `spawnkit` binary) says what each one means. `None` takes the preset's value.
#[derive(Debug, Clone)]
pub struct Options {
    pub method: Method,
    pub runs: Option<usize>,
    pub quick: bool,
    pub full: bool,
    pub totals: Option<Vec<usize>>,
    pub iterations: Option<usize>,
    pub active: Option<usize>,
    pub sizes: Option<Vec<Size>>,
    pub rows: Option<Vec<Row>>,
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub python: Option<PathBuf>,
    pub no_python: bool,
    pub procs: Option<usize>,
    pub async_total: Option<usize>,
    pub actions: Option<usize>,
    pub no_install: bool,
    pub steps: bool,
    /// Server: pool children per spawning thread of the private server (`None`: its default).
    pub server_pool: Option<usize>,
}

/// A row by its id as in the JSON file (`vfork_exec`, `spawnkit_clone_vfork`, ...).
pub fn parse_row(s: &str) -> Result<Row, String> {
    rows::ALL.into_iter().find(|r| r.id() == s).ok_or_else(|| {
        let ids: Vec<&str> = rows::ALL.iter().map(|r| r.id()).collect();
        format!("unknown row {s:?} (one of {})", ids.join(", "))
    })
}

/// A parent size of the latency method: `0`, `1GiB` or `1GiB-touched`.
pub fn parse_size(s: &str) -> Result<Size, String> {
    Size::from_key(s).ok_or_else(|| format!("unknown parent size {s:?} (0, 1GiB, 1GiB-touched)"))
}

/// The sizes of one run, from --quick/--full and the explicit flags.
#[derive(Debug, Clone)]
pub struct Config {
    pub preset: &'static str,
    pub runs: usize,
    /// Latency runs of the fork rows from a parent with 1 GiB touched (~40 ms each).
    pub fork_touched_runs: usize,
    pub totals: Vec<usize>,
    pub iterations: usize,
    pub active: usize,
    pub cpu_spawns: usize,
    pub fence_runs: usize,
    pub fence_steps: bool,
    pub ps_procs: usize,
    pub ps_runs: usize,
    pub ps_mem_runs: usize,
    /// Server: spawns per row, parent size and measure (latency, CPU).
    pub server_runs: usize,
    /// Server: throughput samples per row and parent size.
    pub server_iterations: usize,
    /// Server: spawns per throughput sample.
    pub server_tp_spawns: usize,
    /// Server: multiprocessing forkserver starts per parent size.
    pub forkserver_runs: usize,
    /// Async: rounds per row and program.
    pub async_rounds: usize,
    /// Async: processes per row and round (at most 64 running).
    pub async_total: usize,
    /// Mp: the process totals.
    pub mp_totals: Vec<usize>,
    /// Mp: iterations per total.
    pub mp_iterations: usize,
    /// Worker: actions per farm row.
    pub worker_actions: usize,
    /// Worker: spawns per fence row.
    pub worker_fence_runs: usize,
}

impl Config {
    fn from_args(a: &Options) -> Result<Config, String> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (preset, runs, cap, totals, iterations) = if a.full {
            ("full", 2000, 2000, vec![32, 128, 384, 1024, 2048], 5)
        } else {
            ("quick", 500, 50, vec![32, 128, 384], 5)
        };
        let (ps_procs, ps_runs, ps_mem_runs) = if a.full { (10_000, 10, 3) } else { (1000, 5, 2) };
        let runs = a.runs.unwrap_or(runs);
        let (forkserver_runs, async_rounds) = if a.full { (100, 5) } else { (20, 2) };
        let (mp_totals, mp_iterations) =
            if a.full { (vec![32, 128, 512, 2048], 3) } else { (vec![32, 64], 2) };
        let c = Config {
            preset,
            runs,
            fork_touched_runs: runs.min(cap),
            totals: a.totals.clone().unwrap_or(totals),
            iterations: a.iterations.unwrap_or(iterations),
            active: a.active.unwrap_or(2 * cores + 1),
            cpu_spawns: runs,
            fence_runs: runs,
            fence_steps: a.steps,
            ps_procs: a.procs.unwrap_or(ps_procs),
            ps_runs,
            ps_mem_runs,
            server_runs: runs,
            server_iterations: a.iterations.unwrap_or(iterations),
            // 1,000 per sample in the quick preset too: in samples of 250 the server's rate
            // was a burst's (~14.8k/s against ~12.2k/s in steady state) and vfork+exec's
            // below its own (~7.8k against ~8.9k/s), 1.9x for a steady 1.35x (BENCHMARKS.md
            // §6, "Throughput in longer samples").
            server_tp_spawns: (runs * 2).clamp(16, 1000),
            forkserver_runs: forkserver_runs.min(runs),
            async_rounds: a.iterations.unwrap_or(async_rounds),
            async_total: a.async_total.unwrap_or(1000),
            mp_totals: a.totals.clone().unwrap_or(mp_totals),
            mp_iterations: a.iterations.unwrap_or(mp_iterations),
            worker_actions: a.actions.unwrap_or(if a.full { 200 } else { 40 }),
            worker_fence_runs: runs,
        };
        if c.runs == 0
            || c.iterations == 0
            || c.active == 0
            || c.totals.contains(&0)
            || c.async_total == 0
            || c.worker_actions == 0
        {
            return Err(
                "--runs, --iterations, --active, --totals, --async-total and --actions must be \
                 at least 1"
                    .into(),
            );
        }
        Ok(c)
    }
}

/// The progress bar on stderr (hidden when stderr is not a terminal).
pub struct Progress(ProgressBar);

impl Progress {
    fn new(len: u64) -> Progress {
        let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        pb.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:24}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Progress(pb)
    }

    pub fn phase(&self, what: &str) {
        self.0.set_message(what.to_string());
    }

    pub fn inc(&self, n: u64) {
        self.0.inc(n);
    }
}

/// The machine the numbers come from.
#[derive(Debug, Clone)]
pub struct Machine {
    pub date: String,
    pub kernel: String,
    pub cpu: String,
    pub cores: usize,
    pub glibc: String,
}

fn machine() -> Machine {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    let glibc = sys::glibc_version();
    Machine {
        date: utc_now(),
        kernel,
        cpu,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        glibc,
    }
}

/// Now, as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The temporary directory holding the tiny child, first in PATH; removed on drop.
struct ChildDir(PathBuf);

/// Where the tiny child's directory goes: the temporary directory, unless that is /tmp (or
/// below it), which the fence method replaces with a tmpfs: then /var/tmp, when there is one.
fn child_base() -> PathBuf {
    let tmp = std::env::temp_dir();
    let var_tmp = Path::new("/var/tmp");
    if tmp.starts_with("/tmp") && var_tmp.is_dir() {
        var_tmp.to_owned()
    } else {
        tmp
    }
}

impl ChildDir {
    fn create() -> Result<ChildDir, String> {
        let dir = child_base().join(format!("spawnkit-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let d = ChildDir(dir);
        let tiny = d.0.join(TINY_NAME);
        std::fs::write(&tiny, TINYCHILD).map_err(|e| format!("{}: {e}", tiny.display()))?;
        std::fs::set_permissions(&tiny, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", tiny.display()))?;
        // Every row (execvp, posix_spawnp, sh, spawnkit, Python) searches this PATH; the child
        // is found at the first entry. Set while this process has no other thread.
        let old = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
        let mut path = d.0.clone().into_os_string();
        path.push(":");
        path.push(old);
        std::env::set_var("PATH", path);
        Ok(d)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ChildDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `cargo run` puts its own directories (the target directory's, the toolchain's libraries)
/// in front of LD_LIBRARY_PATH. Every dynamically linked program a row starts (the shell of
/// system() and popen(); unshare, sh, mount, ip and bwrap in the fence method) would then look
/// for each of its libraries there first: ~0.85 ms more for the shell chain, ~0.2 ms for
/// bwrap, here. Drop those entries, so `cargo run -- bench` measures what running the binary
/// measures; returns a note saying so. Call while this process has no other thread.
fn drop_cargo_library_path() -> Option<String> {
    std::env::var_os("CARGO")?;
    let old = std::env::var_os("LD_LIBRARY_PATH")?;
    let target = std::env::current_exe().ok()?.parent()?.parent()?.to_path_buf();
    let toolchains = std::env::var_os("RUSTUP_HOME").map(|h| PathBuf::from(h).join("toolchains"));
    let is_cargos = |d: &Path| {
        d.starts_with(&target)
            || toolchains.as_ref().is_some_and(|t| d.starts_with(t))
            || d.to_string_lossy().contains("/.rustup/toolchains/")
    };
    let all: Vec<PathBuf> = std::env::split_paths(&old).collect();
    let kept: Vec<&PathBuf> = all.iter().filter(|d| !is_cargos(d)).collect();
    let dropped = all.len() - kept.len();
    if dropped == 0 {
        return None;
    }
    if kept.is_empty() {
        std::env::remove_var("LD_LIBRARY_PATH");
    } else {
        std::env::set_var("LD_LIBRARY_PATH", std::env::join_paths(kept).ok()?);
    }
    Some(format!(
        "LD_LIBRARY_PATH: dropped {dropped} of its {} entries, cargo's (they slow down every \
         dynamically linked program a row starts)",
        all.len()
    ))
}

/// Everything one run measured; what is not run stays empty.
pub struct Results {
    pub machine: Machine,
    pub config: Config,
    pub latency: Vec<latency::LatencyRow>,
    pub latency_sizes: Vec<Size>,
    pub throughput: Vec<throughput::ThroughputRow>,
    pub cpu: Vec<cpu::CpuRow>,
    pub fence: Vec<fence::FenceRow>,
    /// The fence rows' tools and their versions (unshare, sh, mount, ip, bwrap).
    pub fence_tools: Vec<(String, String)>,
    pub ps: Option<ps::PsResults>,
    pub server: Option<server::ServerResults>,
    pub asyncs: Option<async_spawn::AsyncResults>,
    pub mp: Option<mp::MpResults>,
    pub worker: Option<worker::WorkerResults>,
    pub notes: Vec<String>,
    pub python: Option<python::PythonInfo>,
    pub seconds: f64,
}

fn planned_spawns(c: &Config, m: Method, sizes: &[Size], all: &[rows::Row], python: bool) -> u64 {
    let mut n = 0;
    if matches!(m, Method::Latency | Method::All) {
        for &size in sizes {
            for &row in all {
                n += latency::runs_for(row, size, c.runs, c.fork_touched_runs);
            }
        }
    }
    if matches!(m, Method::Throughput | Method::All) {
        let concurrent = all.iter().filter(|r| r.concurrent()).count();
        n += c.totals.iter().sum::<usize>() * c.iterations * concurrent;
    }
    if matches!(m, Method::Cpu | Method::All) {
        let cells: usize = all
            .iter()
            .map(|&r| usize::from(cpu::applies(r, false)) + usize::from(cpu::applies(r, true)))
            .sum();
        n += c.cpu_spawns * cells;
    }
    if matches!(m, Method::Fence | Method::All) {
        n += fence::planned(c.fence_runs, c.fence_steps);
    }
    if matches!(m, Method::Ps | Method::All) {
        n += ps::planned(c.ps_runs, c.ps_mem_runs);
    }
    if matches!(m, Method::Server | Method::All) {
        n += server::planned(c.server_runs, c.server_iterations, c.server_tp_spawns, python);
    }
    if matches!(m, Method::Async | Method::All) {
        n += async_spawn::planned(c.async_rounds, c.async_total, python);
    }
    if matches!(m, Method::Mp | Method::All) {
        n += mp::planned(&c.mp_totals, c.mp_iterations, python);
    }
    if matches!(m, Method::Worker | Method::All) {
        n += worker::planned(c.worker_actions, c.worker_fence_runs);
    }
    n as u64
}

fn measure(args: &Options, config: Config) -> Result<Results, String> {
    let started = Instant::now();
    // First of all, while this process is small and has one thread: the private spawn server
    // is a fork of it.
    // A server that cannot start (no fork allowed here) skips the method, not the run.
    let (early, early_err) = match matches!(args.method, Method::Server | Method::All)
        .then(|| server::start(args.server_pool))
    {
        Some(Ok(e)) => (Some(e), None),
        Some(Err(e)) => (None, Some(format!("server: the method was skipped: {e}"))),
        None => (None, None),
    };
    // The async method's tokio row through a server: a private server of its own, forked
    // here for the same reason.
    let mut async_server = matches!(args.method, Method::Async | Method::All).then(|| {
        spawnkit::PrivateServer::start().map_err(|e| format!("private spawn server: {e}"))
    });
    let cargo_note = drop_cargo_library_path();
    let dir = ChildDir::create()?;
    let prog = CString::new(TINY_NAME).map_err(|e| e.to_string())?;
    let null = sys::dev_null()?;
    let mut res = Results {
        machine: machine(),
        latency: Vec::new(),
        latency_sizes: Vec::new(),
        throughput: Vec::new(),
        cpu: Vec::new(),
        fence: Vec::new(),
        fence_tools: Vec::new(),
        ps: None,
        server: None,
        asyncs: None,
        mp: None,
        worker: None,
        notes: cargo_note.into_iter().chain(early_err).collect(),
        python: None,
        seconds: 0.0,
        config,
    };
    let c = res.config.clone();
    let sizes = args.sizes.clone().unwrap_or(latency::SIZES.to_vec());
    let all: Vec<rows::Row> = args.rows.clone().unwrap_or(rows::ALL.to_vec());
    let m = args.method;
    // Before the progress bar: this may run apt-get, whose output goes to stderr.
    let fence_setup = matches!(m, Method::Fence | Method::All)
        .then(|| fence::setup(TINY_NAME, dir.path(), !args.no_install, c.fence_steps));
    let progress = Progress::new(planned_spawns(&c, args.method, &sizes, &all, !args.no_python));
    if matches!(m, Method::Latency | Method::All) {
        res.latency_sizes = sizes.clone();
        res.latency_sizes.sort();
        res.latency_sizes.dedup();
        res.latency =
            latency::run(&all, &res.latency_sizes, c.runs, c.fork_touched_runs, &prog, &progress)?;
        if c.fork_touched_runs < c.runs {
            res.notes.push(format!(
                "latency: the fork rows ran {} times from the 1 GiB touched parent (~40 ms each), \
                 the others {}",
                c.fork_touched_runs, c.runs
            ));
        }
        let py_sizes: Vec<Size> = [Size::Small, Size::Touched]
            .into_iter()
            .filter(|s| res.latency_sizes.contains(s))
            .collect();
        if args.no_python {
            res.latency.extend(python::skipped("--no-python"));
        } else if py_sizes.is_empty() {
            res.latency.extend(python::skipped("measured only at parent sizes 0 and 1GiB-touched"));
        } else {
            progress.phase("latency, Python rows");
            let py = python::interpreter(args.python.as_deref());
            match python::run(&py, dir.path(), TINY_NAME, c.runs, &py_sizes) {
                Ok((rows, info)) => {
                    for r in &rows {
                        if let Some(why) = &r.skipped {
                            res.notes.push(format!("{} skipped: {why}", r.name));
                        }
                    }
                    res.latency.extend(rows);
                    res.python = Some(info);
                }
                Err(e) => {
                    res.notes.push(format!("Python rows skipped: {e}"));
                    res.latency.extend(python::skipped(&e));
                }
            }
        }
    }
    if matches!(m, Method::Throughput | Method::All) {
        let rows: Vec<rows::Row> = all.iter().copied().filter(|r| r.concurrent()).collect();
        res.throughput = throughput::run(
            &rows,
            &c.totals,
            c.iterations,
            c.active,
            &prog,
            null.as_raw_fd(),
            &progress,
        )?;
        res.notes.push(
            "throughput: system() and popen() are not rows (system() waits for its child)".into(),
        );
    }
    if matches!(m, Method::Cpu | Method::All) {
        res.cpu = cpu::run(&all, c.cpu_spawns, &prog, null.as_raw_fd(), &progress)?;
    }
    if let Some(setup) = &fence_setup {
        res.fence = fence::run(setup, c.fence_runs, &prog, &progress);
        res.fence_tools = setup.tools.clone();
        res.notes.extend(setup.notes.iter().cloned());
        for r in &res.fence {
            if let Some(why) = &r.skipped {
                res.notes.push(format!("fence: {} skipped: {why}", r.fence.name()));
            }
        }
    }
    if matches!(m, Method::Ps | Method::All) {
        let py = python::interpreter(args.python.as_deref());
        let r = ps::run(
            c.ps_procs,
            c.ps_runs,
            c.ps_mem_runs,
            dir.path(),
            (!args.no_python).then_some(py.as_path()),
            !args.no_install,
            &progress,
        )?;
        res.notes.extend(r.notes.iter().cloned());
        res.ps = Some(r);
    }
    if let Some(early) = early {
        let py = python::interpreter(args.python.as_deref());
        let r = server::run(
            early,
            c.server_runs,
            c.server_iterations,
            c.server_tp_spawns,
            &prog,
            null.as_raw_fd(),
            dir.path(),
            (!args.no_python).then_some((py.as_path(), TINY_NAME)),
            c.forkserver_runs,
            &progress,
        )?;
        res.notes.extend(r.notes.iter().cloned());
        res.server = Some(r);
    }
    if matches!(m, Method::Async | Method::All) {
        let py = python::interpreter(args.python.as_deref());
        let r = async_spawn::run(
            TINY_NAME,
            dir.path(),
            c.async_rounds,
            c.async_total,
            (!args.no_python).then_some(py.as_path()),
            match async_server.as_mut() {
                Some(Ok(s)) => Ok(s),
                Some(Err(e)) => Err(e.clone()),
                None => Err("not started".into()),
            },
            &progress,
        )?;
        res.notes.extend(r.notes.iter().cloned());
        res.asyncs = Some(r);
    }
    if matches!(m, Method::Mp | Method::All) {
        let py = python::interpreter(args.python.as_deref());
        let r = mp::run(
            (!args.no_python).then_some(py.as_path()),
            dir.path(),
            &c.mp_totals,
            c.mp_iterations,
            &progress,
        );
        res.notes.extend(r.notes.iter().cloned());
        res.mp = Some(r);
    }
    if matches!(m, Method::Worker | Method::All) {
        let py = python::interpreter(args.python.as_deref());
        let r = worker::run(
            (!args.no_python).then_some(py.as_path()),
            dir.path(),
            c.worker_actions,
            c.worker_fence_runs,
            !args.no_install,
            &progress,
        );
        res.notes.extend(r.notes.iter().cloned());
        res.worker = Some(r);
    }
    progress.0.finish_and_clear();
    res.seconds = started.elapsed().as_secs_f64();
    Ok(res)
}

/// Run the benchmark: the tables on stdout, the progress bar and notes on stderr, then the
/// JSON file and the charts when asked for; returns the process exit code (125 for options
/// that do not fit together, 1 when a measurement or a file failed).
pub fn run(args: &Options) -> i32 {
    let config = match Config::from_args(args) {
        Ok(c) => c,
        Err(e) => {
            crate::out::note!("spawnkit bench: {e}");
            return 125;
        }
    };
    // Nowhere for the tables to go and no file asked for: say so now, not after the run.
    if args.json.is_none() && args.plot.is_none() {
        if let Err(e) = crate::out::stdout_open() {
            crate::out::note!("spawnkit bench: write to stdout: {e}");
            return 1;
        }
    }
    let res = match measure(args, config) {
        Ok(r) => r,
        Err(e) => {
            crate::out::note!("spawnkit bench: {e}");
            return 1;
        }
    };
    // The tables go out first, then the files are written whatever became of them: a
    // closed stdout (`| head`) is no error, a full one is told once.
    let mut code = 0;
    if let Err(crate::out::Failure::Msg(m)) = crate::out::print_stdout(&report::render(&res)) {
        crate::out::note!("spawnkit bench: {m}");
        code = 1;
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report::json(&res)).unwrap_or_default() + "\n";
        if let Err(e) = std::fs::write(path, text) {
            crate::out::note!("spawnkit bench: {}: {e}", path.display());
            code = 1;
        }
    }
    if let Some(dir) = &args.plot {
        match plot::write_all(&res, dir) {
            Ok(files) => {
                for f in files {
                    crate::out::note!("wrote {}", f.display());
                }
            }
            Err(e) => {
                crate::out::note!("spawnkit bench: plot: {e}");
                code = 1;
            }
        }
    }
    code
}
