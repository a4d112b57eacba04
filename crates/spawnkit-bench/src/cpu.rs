//! Method 3, CPU cost (the popen_noshell benchmarks): user and system CPU time, of this
//! process and its children together, to run the tiny child N times, without and with its
//! stdout captured through a pipe; each row relative to vfork+exec ("slower by X %").
//!
//! getrusage(RUSAGE_SELF) + getrusage(RUSAGE_CHILDREN) is read around blocks of 50 spawns,
//! and the blocks of all rows are interleaved so machine noise hits every row alike.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, RawFd};

use super::rows::Row;
use super::sys::{self, Popen};
use super::Progress;

/// CPU per spawn, in µs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cell {
    pub user_us: f64,
    pub sys_us: f64,
    pub spawns: usize,
}

impl Cell {
    pub fn total_us(&self) -> f64 {
        self.user_us + self.sys_us
    }
}

#[derive(Debug, Clone)]
pub struct CpuRow {
    pub id: String,
    pub name: String,
    pub kind: String,
    /// stdout to /dev/null (None where the row cannot do that: popen always pipes).
    pub plain: Option<Cell>,
    /// stdout captured through a pipe read to EOF.
    pub captured: Option<Cell>,
}

/// Spawns per turn of a row. Turns of 50 keep each row warm, as in the published runs of one
/// method at a time (turns of 10 charge the rows that touch more memory for the caches the
/// others evicted, as in the latency method), while load that comes and goes on a shared
/// machine is still spread over every row.
pub const BLOCK: usize = 50;

/// One spawn, waited for; with `capture` a fresh pipe is made, the child's output read to EOF.
fn once(row: Row, prog: &CStr, null_fd: RawFd, capture: bool) -> Result<(), String> {
    if !capture {
        return row.spawn(prog, null_fd)?.reap();
    }
    if row == Row::Popen {
        let p = Popen::open(prog)?;
        sys::read_to_eof(p.fd)?;
        sys::waited(p.close()?)
    } else {
        let (r, w) = sys::pipe()?;
        let started = row.spawn(prog, w.as_raw_fd())?;
        drop(w);
        let read = sys::read_to_eof(r.as_raw_fd());
        started.reap()?;
        read.map(|_| ())
    }
}

pub fn applies(row: Row, capture: bool) -> bool {
    capture || row != Row::Popen
}

pub fn run(
    rows: &[Row],
    spawns: usize,
    prog: &CStr,
    null_fd: RawFd,
    progress: &Progress,
) -> Result<Vec<CpuRow>, String> {
    progress.phase("cpu");
    let blocks = spawns.div_ceil(BLOCK).max(1);
    // [row][capture] accumulated (user, sys, spawns)
    let mut acc = vec![[Cell::default(); 2]; rows.len()];
    for b in 0..blocks {
        let n = spawns / blocks + usize::from(b < spawns % blocks);
        for k in 0..rows.len() {
            let i = (b + k) % rows.len();
            let row = rows[i];
            for capture in [false, true] {
                if !applies(row, capture) {
                    continue;
                }
                let (u0, s0) = sys::cpu_us();
                for _ in 0..n {
                    once(row, prog, null_fd, capture)
                        .map_err(|e| format!("cpu, {}: {e}", row.name()))?;
                }
                let (u1, s1) = sys::cpu_us();
                let cell = &mut acc[i][usize::from(capture)];
                cell.user_us += u1 - u0;
                cell.sys_us += s1 - s0;
                cell.spawns += n;
                progress.inc(n as u64);
            }
        }
    }
    let per = |c: Cell| {
        (c.spawns > 0).then(|| Cell {
            user_us: c.user_us / c.spawns as f64,
            sys_us: c.sys_us / c.spawns as f64,
            spawns: c.spawns,
        })
    };
    Ok(rows
        .iter()
        .zip(acc)
        .map(|(row, [plain, captured])| CpuRow {
            id: row.id().into(),
            name: row.name(),
            kind: row.kind().into(),
            plain: per(plain),
            captured: per(captured),
        })
        .collect())
}

/// "slower by X %" relative to `base` (negative: faster).
pub fn slower_pct(cell: &Cell, base: &Cell) -> f64 {
    (cell.total_us() / base.total_us() - 1.0) * 100.0
}
