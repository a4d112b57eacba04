//! `spawnkit bench`: a short built-in comparison of the spawn strategies.
//!
//! Each row spawns the same program (`true`, found through the same PATH search) and waits
//! for it; the timing covers spawn + wait, and only the spawner differs between rows. Rows
//! run interleaved (one spawn of each row per round) so drift on a shared machine hits every
//! row alike. The parent runs once small and once holding 1 GiB of touched memory, where
//! fork()'s page-table copy shows. The full suite of published methods comes with
//! `spawnkit bench latency|throughput|cpu` (issue 4).

use std::io::Write;
use std::time::{Duration, Instant};

use spawnkit::{Command, Stdio, Strategy};

/// Options of `spawnkit bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Spawns per row and parent size.
    #[arg(long, default_value_t = 300)]
    pub runs: usize,
    /// Program to spawn (looked up in PATH by every row alike).
    #[arg(long, default_value = "true")]
    pub program: String,
    /// Skip the 1 GiB-touched parent.
    #[arg(long)]
    pub small_only: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Row {
    Spawnkit(Strategy),
    Std,
}

impl Row {
    fn name(self) -> String {
        match self {
            Row::Spawnkit(s) => format!("spawnkit {s}"),
            Row::Std => "std::process::Command".to_string(),
        }
    }

    fn spawn_wait(self, program: &str) -> Result<Duration, String> {
        let t = Instant::now();
        match self {
            Row::Spawnkit(s) => {
                let status = Command::new(program)
                    .strategy(s)
                    .stdin(Stdio::Null)
                    .status()
                    .map_err(|e| e.to_string())?;
                if !status.success() {
                    return Err(format!("{program}: {status}"));
                }
            }
            Row::Std => {
                let status = std::process::Command::new(program)
                    .stdin(std::process::Stdio::null())
                    .status()
                    .map_err(|e| e.to_string())?;
                if !status.success() {
                    return Err(format!("{program}: {status}"));
                }
            }
        }
        Ok(t.elapsed())
    }
}

struct Stats {
    min: Duration,
    median: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    Stats { min: v[0], median: v[v.len() / 2] }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Hold `bytes` of memory with every page written, so fork() must copy its page tables.
fn touched(bytes: usize) -> Vec<u8> {
    let mut v = vec![0u8; bytes];
    for i in (0..bytes).step_by(4096) {
        v[i] = 1;
    }
    v
}

fn measure(rows: &[Row], runs: usize, program: &str, label: &str) -> Result<Vec<Stats>, String> {
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); rows.len()];
    let err = std::io::stderr();
    for round in 0..runs {
        for (i, row) in rows.iter().enumerate() {
            times[i].push(row.spawn_wait(program)?);
        }
        if round % 10 == 9 || round + 1 == runs {
            let done = (round + 1) * 40 / runs;
            let _ = write!(
                err.lock(),
                "\r{label:<18} [{}{}] {}/{}",
                "#".repeat(done),
                " ".repeat(40 - done),
                round + 1,
                runs
            );
        }
    }
    let _ = writeln!(err.lock());
    Ok(times.into_iter().map(stats).collect())
}

/// Run the benchmark; returns the process exit code.
pub fn main(args: &BenchArgs) -> i32 {
    if args.runs == 0 {
        eprintln!("spawnkit bench: --runs must be at least 1");
        return 125;
    }
    let rows = [
        Row::Spawnkit(Strategy::CloneVfork),
        Row::Spawnkit(Strategy::PosixSpawn),
        Row::Spawnkit(Strategy::ForkExec),
        Row::Std,
    ];
    let mut sizes: Vec<(&str, usize)> = vec![("small parent", 0)];
    if !args.small_only {
        sizes.push(("1 GiB touched", 1 << 30));
    }
    println!(
        "spawn + wait of `{}` (PATH search), {} runs per row, interleaved; times in µs",
        args.program, args.runs
    );
    let mut results = Vec::new();
    for (label, size) in &sizes {
        let hold = touched(*size);
        match measure(&rows, args.runs, &args.program, label) {
            Ok(s) => results.push((*label, s)),
            Err(e) => {
                eprintln!("spawnkit bench: {e}");
                return 1;
            }
        }
        drop(hold);
    }
    print!("{:<24}", "row");
    for (label, _) in &results {
        print!(" {:>16} {:>16}", format!("{label} min"), "median");
    }
    println!();
    for (i, row) in rows.iter().enumerate() {
        print!("{:<24}", row.name());
        for (_, s) in &results {
            print!(" {:>16.1} {:>16.1}", us(s[i].min), us(s[i].median));
        }
        println!();
    }
    println!();
    for (label, s) in &results {
        let base = us(s[0].min);
        for (i, row) in rows.iter().enumerate().skip(1) {
            println!(
                "{label}: spawnkit clone-vfork / {} = {:.2} (min)",
                row.name(),
                base / us(s[i].min)
            );
        }
    }
    println!(
        "clone3 in use: {} (false means the engine fell back to clone(2))",
        spawnkit::uses_clone3()
    );
    0
}
