//! Method 2, throughput (Gregory P. Smith, CPython PR #99309): start `total` processes keeping
//! at most `active` running at once, wait for each, and report processes per second; several
//! iterations per total, mean and standard deviation. Rows are interleaved per iteration.

use std::ffi::CStr;
use std::os::fd::RawFd;
use std::time::Instant;

use super::rows::{Row, Started};
use super::sys;
use super::Progress;

/// Processes per second at one total.
#[derive(Debug, Clone)]
pub struct Point {
    pub total: usize,
    pub mean: f64,
    pub stddev: f64,
    pub samples: Vec<f64>,
}

#[derive(Debug, Clone)]
pub struct ThroughputRow {
    pub id: String,
    pub name: String,
    pub kind: String,
    pub points: Vec<Point>,
}

/// Mean and sample standard deviation.
pub fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n.max(1.0);
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// One iteration: `total` spawns, at most `active` alive; returns processes per second.
/// Exits are noticed with waitid(P_ALL, WNOWAIT) and each child is then reaped by its own
/// row's means (waitpid, or a spawnkit Child's pidfd), so waiting costs every row the same.
fn one(row: Row, prog: &CStr, out_fd: RawFd, total: usize, active: usize) -> Result<f64, String> {
    let mut live: Vec<(i32, Started)> = Vec::with_capacity(active);
    let mut started = 0;
    let t = Instant::now();
    while started < total || !live.is_empty() {
        while started < total && live.len() < active {
            let s = row.spawn(prog, out_fd)?;
            let pid = s.pid().ok_or("the row cannot run children concurrently")?;
            live.push((pid, s));
            started += 1;
        }
        let pid = sys::wait_any_exited()?;
        let i = live
            .iter()
            .position(|(p, _)| *p == pid)
            .ok_or_else(|| format!("pid {pid} exited, which this benchmark did not start"))?;
        live.swap_remove(i).1.reap()?;
    }
    Ok(total as f64 / t.elapsed().as_secs_f64())
}

pub fn run(
    rows: &[Row],
    totals: &[usize],
    iterations: usize,
    active: usize,
    prog: &CStr,
    out_fd: RawFd,
    progress: &Progress,
) -> Result<Vec<ThroughputRow>, String> {
    let mut out = Vec::new();
    let mut samples: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); totals.len()]; rows.len()];
    for (t, &total) in totals.iter().enumerate() {
        progress.phase(&format!("throughput, {total} processes"));
        for it in 0..iterations {
            for k in 0..rows.len() {
                let i = (it + k) % rows.len();
                let rate = one(rows[i], prog, out_fd, total, active)
                    .map_err(|e| format!("throughput, {}: {e}", rows[i].name()))?;
                samples[i][t].push(rate);
                progress.inc(total as u64);
            }
        }
    }
    for (row, per_total) in rows.iter().zip(samples) {
        let points = totals
            .iter()
            .zip(per_total)
            .map(|(&total, s)| {
                let (mean, stddev) = mean_sd(&s);
                Point { total, mean, stddev, samples: s }
            })
            .collect();
        out.push(ThroughputRow {
            id: row.id().into(),
            name: row.name(),
            kind: row.kind().into(),
            points,
        });
    }
    Ok(out)
}
