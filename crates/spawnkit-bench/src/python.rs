//! The Python rows: CPython's `subprocess.Popen` and `spawnkit.subprocess.Popen`, measured by
//! bench/python_rows.py (embedded here) with the latency method, in a Python process started
//! by this one, with the same tiny child and the same PATH.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::latency::{LatencyRow, Size, Stats};

pub(crate) const SCRIPT: &str = include_str!("../../../bench/python_rows.py");

/// The row ids and names, also used for rows that could not run at all.
pub const ROWS: [(&str, &str); 2] = [
    ("py_subprocess", "CPython subprocess.Popen"),
    ("py_spawnkit_subprocess", "spawnkit.subprocess.Popen"),
];

/// The interpreter: `--python`, else the project's `.venv/bin/python` (looked for from the
/// current directory upwards, then in the source tree this binary was built from), else
/// `python3` along PATH.
pub fn interpreter(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_owned();
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        dirs.extend(cwd.ancestors().map(Path::to_owned));
    }
    dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    dirs.into_iter()
        .map(|d| d.join(".venv/bin/python"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// Both rows marked skipped with `why`.
pub fn skipped(why: &str) -> Vec<LatencyRow> {
    ROWS.iter()
        .map(|(id, name)| LatencyRow {
            id: (*id).into(),
            name: (*name).into(),
            kind: "python".into(),
            sizes: BTreeMap::new(),
            skipped: Some(why.into()),
        })
        .collect()
}

/// What the Python side said about itself.
pub struct PythonInfo {
    pub version: String,
    pub executable: String,
}

/// Run the script; `tmp` is the directory of the tiny child (first in PATH).
pub fn run(
    python: &Path,
    tmp: &Path,
    tiny: &str,
    runs: usize,
    sizes: &[Size],
) -> Result<(Vec<LatencyRow>, PythonInfo), String> {
    let script = tmp.join("python_rows.py");
    std::fs::write(&script, SCRIPT).map_err(|e| format!("{}: {e}", script.display()))?;
    let out = Command::new(python)
        .arg(&script)
        .arg(tiny)
        .arg(runs.to_string())
        .args(sizes.iter().map(|s| s.key()))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("");
        return Err(format!("{} failed ({}): {last}", python.display(), out.status));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("the Python rows printed no JSON: {e}"))?;
    let info = PythonInfo {
        version: v["python"].as_str().unwrap_or("?").into(),
        executable: v["executable"].as_str().unwrap_or("?").into(),
    };
    let mut rows = Vec::new();
    for r in v["rows"].as_array().into_iter().flatten() {
        let mut sizes = BTreeMap::new();
        for (key, s) in r["sizes"].as_object().into_iter().flatten() {
            let (Some(size), Some(min), Some(median), Some(mean), Some(n)) = (
                Size::from_key(key),
                s["min_us"].as_f64(),
                s["median_us"].as_f64(),
                s["mean_us"].as_f64(),
                s["runs"].as_u64(),
            ) else {
                continue;
            };
            sizes.insert(
                size,
                Stats { min_us: min, median_us: median, mean_us: mean, runs: n as usize },
            );
        }
        rows.push(LatencyRow {
            id: r["id"].as_str().unwrap_or("?").into(),
            name: r["name"].as_str().unwrap_or("?").into(),
            kind: "python".into(),
            sizes,
            skipped: r["skipped"].as_str().map(String::from),
        });
    }
    Ok((rows, info))
}
