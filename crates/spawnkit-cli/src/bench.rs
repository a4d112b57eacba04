//! `spawnkit bench`: the flags (clap) and their help, mapped onto [`spawnkit_bench::Options`];
//! the benchmark lab itself is the spawnkit-bench crate.

use std::path::PathBuf;

use clap::builder::TypedValueParser as _;

use spawnkit_bench::{Method, Row, Size};

/// Options of `spawnkit bench`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Examples:
  spawnkit bench                          (all methods, --quick: about 1.5 minutes)
  spawnkit bench latency --full           (the published 2000 runs per row and parent size)
  spawnkit bench fence --runs 1000        (the cost of a private /tmp + network + user namespace)
  spawnkit bench ps --full                (10,000 sleeping processes: spawnkit ps beside ps, psutil, smem)
  spawnkit bench server --json s.json     (the spawn server beside vfork+exec and a local spawn)
  spawnkit bench async                    (1,000 processes from tokio and asyncio event loops)
  spawnkit bench mp --full                (multiprocessing fork, forkserver, spawn, spawnkit)
  spawnkit bench worker --actions 200     (spawnkit worker in a BuildGrid farm; its fence beside bwrap)
  spawnkit bench all --full --json bench.json --plot docs/bench")]
pub struct BenchArgs {
    /// Which method to run.
    #[arg(value_enum, default_value_t = Method::All)]
    pub method: Method,
    /// Spawns per row and parent size (latency; server: per measure too), per row and mode
    /// (cpu), per row (fence) [default: 500 with --quick, 2000 with --full].
    #[arg(long, value_name = "N")]
    pub runs: Option<usize>,
    /// Small sizes that still cover every row (the default).
    #[arg(long, conflicts_with = "full")]
    pub quick: bool,
    /// The published sizes: 2000 runs, totals up to 2048, 5 iterations (about 4 minutes on 2 cores;
    /// mp: 3 iterations, about 17 minutes more).
    #[arg(long)]
    pub full: bool,
    /// Throughput, mp: the process totals [default: 32,128,384 with --quick,
    /// 32,128,384,1024,2048 with --full; mp: 32,64 with --quick, 32,128,512,2048 with --full].
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    pub totals: Option<Vec<usize>>,
    /// Throughput, mp: iterations per total; server: throughput samples; async: rounds
    /// [default: 5; async: 2 with --quick, 5 with --full; mp: 2 with --quick, 3 with --full].
    #[arg(long, value_name = "N")]
    pub iterations: Option<usize>,
    /// Throughput: most processes alive at once [default: 2 × cores + 1].
    #[arg(long, value_name = "N")]
    pub active: Option<usize>,
    /// Latency: the parent sizes to measure [default: 0,1GiB,1GiB-touched].
    #[arg(long, value_delimiter = ',', value_name = "SIZE,...", value_parser = spawnkit_bench::parse_size)]
    pub sizes: Option<Vec<Size>>,
    /// Latency, throughput, cpu: only these rows (ids as in the JSON file: vfork_exec,
    /// spawnkit_clone_vfork, ...) [default: every row]. The fence method runs all of its rows.
    #[arg(long, value_delimiter = ',', value_name = "ID,...", value_parser = spawnkit_bench::parse_row)]
    pub rows: Option<Vec<Row>>,
    /// Write every row, the machine and the ratios as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write PNG and SVG charts into this folder.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Python for the subprocess rows [default: .venv/bin/python if found, else python3].
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Skip the Python rows.
    #[arg(long)]
    pub no_python: bool,
    /// Ps: how many sleeping processes to start [default: 1000 with --quick, 10000 with --full].
    #[arg(long, value_name = "N")]
    pub procs: Option<usize>,
    /// Async: processes per row and round, at most 64 running [default: 1000].
    #[arg(long, value_name = "N")]
    pub async_total: Option<usize>,
    /// Worker: actions per farm row [default: 40 with --quick, 200 with --full].
    #[arg(long, value_name = "N")]
    pub actions: Option<usize>,
    /// Fence, ps, worker: when bwrap, smem, psutil, BuildGrid or PostgreSQL is missing, skip its
    /// rows instead of installing it (bubblewrap, smem and postgresql from Debian's packages with
    /// apt-get, psutil with pip, BuildGrid with pip into .venv-buildgrid).
    #[arg(long)]
    pub no_install: bool,
    /// Fence: also build each fence one piece at a time (spawnkit: user ns, + mount ns and
    /// tmpfs, + net ns, + lo up; unshare, + sh, + mount, + ip; bwrap: user ns, + tmpfs, + net)
    /// and print what each piece adds.
    #[arg(long)]
    pub steps: bool,
    /// Server: children made ahead of time per spawning thread of the private server
    /// (`spawnkit serve --pool`, at most 64) [default: the server's, 2; 0: none].
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u32).range(0..=crate::serve::MAX_POOL).map(|n| n as usize)
    )]
    pub server_pool: Option<usize>,
}

impl BenchArgs {
    /// The options, field for field.
    fn options(&self) -> spawnkit_bench::Options {
        let a = self.clone();
        spawnkit_bench::Options {
            method: a.method,
            runs: a.runs,
            quick: a.quick,
            full: a.full,
            totals: a.totals,
            iterations: a.iterations,
            active: a.active,
            sizes: a.sizes,
            rows: a.rows,
            json: a.json,
            plot: a.plot,
            python: a.python,
            no_python: a.no_python,
            procs: a.procs,
            async_total: a.async_total,
            actions: a.actions,
            no_install: a.no_install,
            steps: a.steps,
            server_pool: a.server_pool,
        }
    }
}

/// Run the benchmark; returns the process exit code.
pub fn main(args: &BenchArgs) -> i32 {
    spawnkit_bench::run(&args.options())
}
