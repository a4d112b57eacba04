//! Method 8, multiprocessing start methods (issue 14): Gregory P. Smith's method (CPython PR
//! #99309) for `fork`, `forkserver`, `spawn` and `spawnkit` (`import spawnkit.multiprocessing`),
//! measured by bench/python_mp.py (embedded) in a Python process started by this one: processes
//! per second (mean ± sd over ITERATIONS) per total, at most 2 × CPUs + 1 alive, from a small
//! parent and from one holding 1 GiB touched; and the time to the first result of a 4-worker
//! Pool's map.

use std::collections::BTreeMap;
use std::path::Path;

use super::latency::Size;
use super::Progress;

const SCRIPT: &str = include_str!("../../../bench/python_mp.py");

/// The start methods (the rows), by their multiprocessing name, with a display name.
pub const METHODS: [(&str, &str); 4] = [
    ("fork", "fork"),
    ("forkserver", "forkserver"),
    ("spawn", "spawn"),
    ("spawnkit", "spawnkit (import spawnkit.multiprocessing)"),
];

/// The parent sizes, in the script's words.
pub const SIZES: [Size; 2] = [Size::Small, Size::Touched];

/// The ratios: (JSON key, numerator, denominator, target: at least, per size as in `SIZES`).
pub const RATIOS: [(&str, &str, &str, [f64; 2]); 2] = [
    ("mp_spawnkit/mp_fork", "spawnkit", "fork", [1.0, 10.0]),
    ("mp_spawnkit/mp_forkserver", "spawnkit", "forkserver", [3.5, 3.5]),
];

/// Processes per second at one total.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub total: usize,
    pub mean: f64,
    pub sd: f64,
}

#[derive(Debug, Clone)]
pub struct MpRow {
    pub id: String,
    pub name: String,
    /// Per parent size: one point per total, in the order of the totals.
    pub per_s: BTreeMap<Size, Vec<Point>>,
    /// Per parent size: seconds from creating a 4-worker Pool to its map's first result (the
    /// best of ITERATIONS tries).
    pub first_map_s: BTreeMap<Size, f64>,
    pub skipped: Option<String>,
}

pub struct MpResults {
    pub totals: Vec<usize>,
    pub iterations: usize,
    /// Most processes alive at once (the script's 2 × CPUs + 1).
    pub alive: Option<usize>,
    pub python_version: Option<String>,
    pub rows: Vec<MpRow>,
    pub notes: Vec<String>,
}

impl MpResults {
    /// The largest total measured, at which the ratios are taken.
    pub fn ratio_total(&self) -> Option<usize> {
        self.totals.iter().copied().max()
    }

    fn mean_at(&self, id: &str, size: Size, total: usize) -> Option<f64> {
        let row = self.rows.iter().find(|r| r.id == id)?;
        row.per_s.get(&size)?.iter().find(|p| p.total == total).map(|p| p.mean)
    }

    /// `num`'s processes per second over `den`'s at the largest total, from parent `size`.
    pub fn ratio(&self, num: &str, den: &str, size: Size) -> Option<f64> {
        let t = self.ratio_total()?;
        let (n, d) = (self.mean_at(num, size, t)?, self.mean_at(den, size, t)?);
        (d > 0.0).then_some(n / d)
    }
}

/// How many processes the method starts (for the progress bar; Pool workers not counted).
pub fn planned(totals: &[usize], iterations: usize, python: bool) -> usize {
    if python {
        totals.iter().sum::<usize>() * iterations * METHODS.len() * SIZES.len()
    } else {
        0
    }
}

fn empty_rows(why: Option<&str>) -> Vec<MpRow> {
    METHODS
        .iter()
        .map(|(id, name)| MpRow {
            id: (*id).into(),
            name: (*name).into(),
            per_s: BTreeMap::new(),
            first_map_s: BTreeMap::new(),
            skipped: why.map(String::from),
        })
        .collect()
}

/// Run the script with `python` (None: `--no-python`, every row skipped) in `dir`. A Python
/// that fails marks every row skipped with its last line of stderr; no spawnkit package marks
/// the spawnkit row skipped with the script's reason.
pub fn run(
    python: Option<&Path>,
    dir: &Path,
    totals: &[usize],
    iterations: usize,
    progress: &Progress,
) -> MpResults {
    let mut res = MpResults {
        totals: totals.to_vec(),
        iterations,
        alive: None,
        python_version: None,
        rows: empty_rows(None),
        notes: Vec::new(),
    };
    match python {
        None => res.rows = empty_rows(Some("--no-python")),
        Some(py) => {
            progress.phase("mp, multiprocessing start methods (Python)");
            if let Err(e) = run_script(py, dir, &mut res) {
                res.rows = empty_rows(Some(&e));
            }
            progress.inc(planned(totals, iterations, true) as u64);
        }
    }
    for r in &res.rows {
        if let Some(why) = &r.skipped {
            res.notes.push(format!("mp: {} skipped: {why}", r.id));
        }
    }
    res
}

fn run_script(py: &Path, dir: &Path, res: &mut MpResults) -> Result<(), String> {
    let script = dir.join("python_mp.py");
    std::fs::write(&script, SCRIPT).map_err(|e| format!("{}: {e}", script.display()))?;
    let totals: Vec<String> = res.totals.iter().map(usize::to_string).collect();
    let out = std::process::Command::new(py)
        .arg(&script)
        .arg(totals.join(","))
        .arg(res.iterations.to_string())
        .args(SIZES.iter().map(|s| s.key()))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", py.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("");
        return Err(format!("{} failed ({}): {last}", py.display(), out.status));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("bench/python_mp.py printed no JSON: {e}"))?;
    res.python_version = v["python"].as_str().map(String::from);
    res.alive = v["alive"].as_u64().map(|a| a as usize);
    for row in &mut res.rows {
        if let Some(why) = v["skipped"][&row.id].as_str() {
            row.skipped = Some(why.into());
            continue;
        }
        for size in SIZES {
            let s = &v["sizes"][size.key()];
            let points: Vec<Point> = res
                .totals
                .iter()
                .filter_map(|&t| {
                    let p = &s["per_s"][&row.id][t.to_string()];
                    Some(Point { total: t, mean: p["mean"].as_f64()?, sd: p["sd"].as_f64()? })
                })
                .collect();
            if !points.is_empty() {
                row.per_s.insert(size, points);
            }
            if let Some(f) = s["first_map_s"][&row.id].as_f64() {
                row.first_map_s.insert(size, f);
            }
        }
        if row.per_s.is_empty() {
            row.skipped = Some("bench/python_mp.py reported nothing for it".into());
        }
    }
    Ok(())
}
