//! Method 1, latency (Josh Triplett, LPC 2022, io_uring_spawn): the parent reads
//! CLOCK_MONOTONIC, starts the tiny child through a PATH search, and the child writes its own
//! CLOCK_MONOTONIC to a pipe; the difference is the time from "spawn" to the child running.
//! Repeated for every row, round-robin, from a small parent, one holding 1 GiB untouched, and
//! one holding 1 GiB with every page written; minimum and median reported.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::os::fd::{AsRawFd, RawFd};

use super::rows::Row;
use super::sys::{self, Ballast};
use super::Progress;

/// The parent sizes of the method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Size {
    Small,
    Allocated,
    Touched,
}

pub const SIZES: [Size; 3] = [Size::Small, Size::Allocated, Size::Touched];

const GIB: usize = 1 << 30;

impl Size {
    /// The key in the JSON file (and in the `ratios` object).
    pub fn key(self) -> &'static str {
        match self {
            Size::Small => "0",
            Size::Allocated => "1GiB",
            Size::Touched => "1GiB-touched",
        }
    }

    /// The column heading.
    pub fn label(self) -> &'static str {
        match self {
            Size::Small => "small parent",
            Size::Allocated => "1 GiB allocated",
            Size::Touched => "1 GiB touched",
        }
    }

    pub fn from_key(key: &str) -> Option<Size> {
        SIZES.into_iter().find(|s| s.key() == key)
    }

    fn ballast(self) -> Result<Option<Ballast>, String> {
        match self {
            Size::Small => Ok(None),
            Size::Allocated => Ballast::new(GIB, false),
            Size::Touched => Ballast::new(GIB, true),
        }
    }
}

/// Minimum, median and mean of one row at one parent size, in µs.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub min_us: f64,
    pub median_us: f64,
    pub mean_us: f64,
    pub runs: usize,
}

impl Stats {
    pub fn of(mut ns: Vec<i64>) -> Option<Stats> {
        if ns.is_empty() {
            return None;
        }
        ns.sort_unstable();
        let n = ns.len();
        let median =
            if n % 2 == 1 { ns[n / 2] as f64 } else { (ns[n / 2 - 1] + ns[n / 2]) as f64 / 2.0 };
        let mean = ns.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        Some(Stats {
            min_us: ns[0] as f64 / 1e3,
            median_us: median / 1e3,
            mean_us: mean / 1e3,
            runs: n,
        })
    }
}

/// One row of the latency table: stats per parent size, or why the row was skipped.
#[derive(Debug, Clone)]
pub struct LatencyRow {
    pub id: String,
    pub name: String,
    pub kind: String,
    pub sizes: BTreeMap<Size, Stats>,
    pub skipped: Option<String>,
}

impl LatencyRow {
    pub fn min(&self, size: Size) -> Option<f64> {
        self.sizes.get(&size).map(|s| s.min_us)
    }
}

/// How many spawns of `row` at `size`: fork rows from a touched 1 GiB parent take ~40 ms
/// each, so `fork_touched` caps them.
pub fn runs_for(row: Row, size: Size, runs: usize, fork_touched: usize) -> usize {
    if size == Size::Touched && row.forks() {
        runs.min(fork_touched)
    } else {
        runs
    }
}

/// Spawns of one row in a row before the next row's turn. Rows take turns in blocks, not
/// spawn by spawn: each row's code and data are as warm as in the published single-row runs,
/// while drift on a shared machine still hits every row alike. (Spawn-by-spawn turns would
/// charge each row for the caches the seven others evicted, and the fork rows leave the
/// parent's pages write-protected, so a row that writes more memory pays more page faults.)
pub const BLOCK: usize = 10;

/// One measurement: spawn, read the child's timestamp, reap (reaping is outside the time).
fn once(row: Row, prog: &CStr, read_fd: RawFd, write_fd: RawFd) -> Result<i64, String> {
    let mut buf = [0u8; 16];
    let t0 = sys::mono_ns();
    let started = row.spawn(prog, write_fd)?;
    let read = sys::read_exact(started.own_fd().unwrap_or(read_fd), &mut buf);
    started.reap()?;
    read?;
    Ok(sys::timestamp_ns(&buf) - t0)
}

/// Measure every row at every size in `sizes`.
pub fn run(
    rows: &[Row],
    sizes: &[Size],
    runs: usize,
    fork_touched: usize,
    prog: &CStr,
    progress: &Progress,
) -> Result<Vec<LatencyRow>, String> {
    let mut out: Vec<LatencyRow> = rows
        .iter()
        .map(|r| LatencyRow {
            id: r.id().into(),
            name: r.name(),
            kind: r.kind().into(),
            sizes: BTreeMap::new(),
            skipped: None,
        })
        .collect();
    for &size in sizes {
        progress.phase(&format!("latency, {}", size.label()));
        let ballast = size.ballast()?;
        let (r, w) = sys::pipe()?;
        let mut samples: Vec<Vec<i64>> = vec![Vec::with_capacity(runs); rows.len()];
        for round in 0..runs.div_ceil(BLOCK) {
            // Rotate the starting row so no row always follows the same one.
            for k in 0..rows.len() {
                let i = (round + k) % rows.len();
                let row = rows[i];
                let want = runs_for(row, size, runs, fork_touched);
                for _ in 0..BLOCK.min(want.saturating_sub(samples[i].len())) {
                    let ns = once(row, prog, r.as_raw_fd(), w.as_raw_fd())
                        .map_err(|e| format!("latency, {}: {e}", row.name()))?;
                    samples[i].push(ns);
                    progress.inc(1);
                }
            }
        }
        drop(ballast);
        for (row, ns) in out.iter_mut().zip(samples) {
            if let Some(s) = Stats::of(ns) {
                row.sizes.insert(size, s);
            }
        }
    }
    Ok(out)
}
