//! Method 9, the remote-execution worker (issue 16): `spawnkit worker` in a real BuildGrid farm,
//! and the price of its fence beside bubblewrap's.
//!
//! - **The farm** (bench/worker_overhead.py, embedded with tests/buildgrid_farm.py and
//!   tests/reapi_client.py, run by the project's .venv Python): BuildGrid 0.4.4 on a throwaway
//!   PostgreSQL, two `spawnkit worker`s (this binary, concurrency 2 each), N tiny actions
//!   submitted at once (`/bin/true`; `/bin/true` with a 10-file input root), with the fence on
//!   (`--fence net,tmp,pid`, the default) and off (`--fence none`). Per row: actions per second
//!   and the worker's own time per action (lease received → result sent, minus the command's
//!   run time, which each worker writes with `--stats-file`): median and p90; and the median of
//!   that minus the action's waits on BuildGrid (its CAS calls, and the Bots call in flight when
//!   its result was whole), also from `--stats-file`. The floor: trivial RPCs to the same
//!   BuildGrid (GetCapabilities, FindMissingBlobs with no digests, BatchReadBlobs of one small
//!   blob) timed N times each after the rows, and per row what that round trip times the
//!   action's server calls (CAS calls + the reporting UpdateBotSession) comes to. BuildGrid is
//!   installed into .venv-buildgrid (pip) and PostgreSQL with apt-get when missing, unless
//!   `--no-install`; the rows are skipped with the reason where that cannot be done, or with
//!   `--no-python`.
//! - **The fence's price** (here, no farm needed): `/bin/true` spawn → exit, as the worker starts
//!   it (process group, parent-death signal, stdio to /dev/null), without a fence, with the
//!   worker's fence (private network with lo, a tmpfs on /tmp, a pid namespace: one clone), and
//!   bubblewrap as buildbox-run-bubblewrap would fence it (`bwrap --unshare-net --unshare-pid
//!   --tmpfs /tmp --dev-bind / / /bin/true`, started the same way without a fence). Rows take
//!   turns in blocks; each fence's price is its row minus the unfenced one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use spawnkit::{Command, Namespaces, Signal, Stdio, TmpOptions};

use super::latency::BLOCK;
use super::Progress;

const SCRIPT: &str = include_str!("../../../bench/worker_overhead.py");
const FARM: &str = include_str!("../../../tests/buildgrid_farm.py");
const CLIENT: &str = include_str!("../../../tests/reapi_client.py");

/// The command every row runs.
pub const TRUE: &str = "/bin/true";

/// bubblewrap's fence, as buildbox-run-bubblewrap builds it for an action without network.
pub const BWRAP_ARGS: [&str; 8] =
    ["--unshare-net", "--unshare-pid", "--tmpfs", "/tmp", "--dev-bind", "/", "/", TRUE];

/// The farm rows (the script's): id, `--fence`, input files. The `split_cas_` rows run on a
/// second farm whose CAS is a BuildGrid process of its own (the workers' `--remote-cas`).
pub const FARM_ROWS: [(&str, &str, usize); 7] = [
    ("fenced_true", "net,tmp,pid", 0),
    ("fenced_10_files", "net,tmp,pid", 10),
    ("unfenced_true", "none", 0),
    ("unfenced_10_files", "none", 10),
    // bench/worker_overhead.py: at most SERIAL_MAX (40) actions, one at a time.
    ("fenced_true_one_at_a_time", "net,tmp,pid", 0),
    ("split_cas_fenced_true", "net,tmp,pid", 0),
    ("split_cas_fenced_true_one_at_a_time", "net,tmp,pid", 0),
];

/// The fence rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceRow {
    Plain,
    Spawnkit,
    Bwrap,
}

impl FenceRow {
    pub const ALL: [FenceRow; 3] = [FenceRow::Plain, FenceRow::Spawnkit, FenceRow::Bwrap];

    pub fn id(self) -> &'static str {
        match self {
            FenceRow::Plain => "spawnkit_no_fence",
            FenceRow::Spawnkit => "spawnkit_worker_fence",
            FenceRow::Bwrap => "bwrap",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FenceRow::Plain => "spawnkit, no fence",
            FenceRow::Spawnkit => "spawnkit, the worker's fence (net,tmp,pid)",
            FenceRow::Bwrap => "bubblewrap (buildbox-run-bubblewrap's set)",
        }
    }

    pub fn command(self) -> String {
        match self {
            FenceRow::Plain => format!("Command::new({TRUE:?}).spawn(); wait"),
            FenceRow::Spawnkit => format!(
                "Command::new({TRUE:?}).private_network(true).private_tmp(None, ..)\
                 .unshare(Namespaces::PID).spawn(); wait"
            ),
            FenceRow::Bwrap => {
                format!("Command::new(\"bwrap\"): bwrap {}; wait", BWRAP_ARGS.join(" "))
            }
        }
    }
}

/// Spawn → exit, µs.
#[derive(Debug, Clone, Copy)]
pub struct Dist {
    pub min_us: f64,
    pub median_us: f64,
    pub p90_us: f64,
    pub runs: usize,
}

impl Dist {
    fn of(mut v: Vec<f64>) -> Option<Dist> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Dist { min_us: v[0], median_us: median, p90_us: v[(n * 9 / 10).min(n - 1)], runs: n })
    }
}

#[derive(Debug, Clone)]
pub struct FenceResult {
    pub row: FenceRow,
    pub dist: Option<Dist>,
    pub skipped: Option<String>,
}

/// One farm row, as the script reported it.
#[derive(Debug, Clone)]
pub struct FarmRow {
    pub id: String,
    pub fence: String,
    pub input_files: usize,
    pub actions_per_s: Option<f64>,
    pub own_median_us: Option<f64>,
    pub own_p90_us: Option<f64>,
    /// The median of own time minus the waits on BuildGrid (CAS calls, the Bots call in
    /// flight when the result was whole), per action.
    pub own_excl_server_median_us: Option<f64>,
    /// (CAS calls + the reporting UpdateBotSession) × the floor's trivial round trip.
    pub floor_us: Option<f64>,
    /// The median answer time of a trivial CAS read (one small blob) by a client beside the
    /// workers, every 20 ms while the row loaded the farm (rows with actions in flight only).
    pub cas_probe_us: Option<f64>,
    /// The script's whole object for the row (phases, counts) for the JSON file.
    pub raw: serde_json::Value,
    pub skipped: Option<String>,
}

pub struct WorkerResults {
    pub actions: usize,
    pub fence_runs: usize,
    pub farm: Vec<FarmRow>,
    /// The script's top-level fields (BuildGrid, PostgreSQL, farm start time).
    pub farm_info: serde_json::Value,
    pub fence: Vec<FenceResult>,
    pub bwrap_version: Option<String>,
    pub notes: Vec<String>,
}

impl WorkerResults {
    fn dist(&self, r: FenceRow) -> Option<Dist> {
        self.fence.iter().find(|f| f.row == r)?.dist
    }

    /// A fence's price: its row minus the unfenced one, (min, median) µs.
    pub fn price(&self, r: FenceRow) -> Option<(f64, f64)> {
        let (d, base) = (self.dist(r)?, self.dist(FenceRow::Plain)?);
        Some((d.min_us - base.min_us, d.median_us - base.median_us))
    }

    /// The worker's fence's price over bubblewrap's, at the median (`min`: at the minimum).
    pub fn fence_ratio(&self, min: bool) -> Option<f64> {
        let (s, b) = (self.price(FenceRow::Spawnkit)?, self.price(FenceRow::Bwrap)?);
        let (s, b) = if min { (s.0, b.0) } else { (s.1, b.1) };
        (b > 0.0).then_some(s / b)
    }

    /// Spawn → exit of the fenced row over bubblewrap's, medians (the whole launch, not the price).
    pub fn total_ratio(&self) -> Option<f64> {
        let (s, b) = (self.dist(FenceRow::Spawnkit)?, self.dist(FenceRow::Bwrap)?);
        (b.median_us > 0.0).then_some(s.median_us / b.median_us)
    }

    pub fn farm_row(&self, id: &str) -> Option<&FarmRow> {
        self.farm.iter().find(|r| r.id == id && r.skipped.is_none())
    }
}

/// For the progress bar.
pub fn planned(actions: usize, fence_runs: usize) -> usize {
    FenceRow::ALL.len() * fence_runs + FARM_ROWS.len() * actions
}

fn command(row: FenceRow, bwrap: Option<&Path>) -> Result<Command, String> {
    let mut c = match row {
        FenceRow::Bwrap => {
            let mut c = Command::new(bwrap.ok_or("no bwrap")?);
            c.args(BWRAP_ARGS);
            c
        }
        _ => Command::new(TRUE),
    };
    c.stdin(Stdio::Null)
        .stdout(Stdio::Null)
        .stderr(Stdio::Null)
        .process_group(0)
        .parent_death_signal(Signal::KILL);
    if row == FenceRow::Spawnkit {
        c.private_network(true).private_tmp(None, TmpOptions::default()).unshare(Namespaces::PID);
    }
    Ok(c)
}

/// One spawn → exit, µs; an error if it did not exit 0.
fn once(c: &mut Command) -> Result<f64, String> {
    let t = Instant::now();
    let mut child = c.spawn().map_err(|e| e.to_string())?;
    let st = child.wait().map_err(|e| e.to_string())?;
    let us = t.elapsed().as_secs_f64() * 1e6;
    if st.success() {
        Ok(us)
    } else {
        Err(format!("exited with {st:?}"))
    }
}

/// The trial run of a row, with stderr captured: its message when it fails.
fn trial(row: FenceRow, bwrap: Option<&Path>) -> Result<(), String> {
    let mut c = command(row, bwrap)?;
    let err =
        std::env::temp_dir().join(format!("spawnkit-bench-worker-{}.err", std::process::id()));
    let f = std::fs::File::create(&err).map_err(|e| format!("{}: {e}", err.display()))?;
    c.stderr(Stdio::File(f));
    let r = once(&mut c);
    let said = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = std::fs::remove_file(&err);
    r.map(|_| ()).map_err(|e| {
        let said: Vec<&str> = said.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        if said.is_empty() {
            e
        } else {
            format!("{e}: {}", said.join(" / "))
        }
    })
}

fn fence_rows(
    runs: usize,
    install: bool,
    notes: &mut Vec<String>,
    progress: &Progress,
) -> (Vec<FenceResult>, Option<String>) {
    progress.phase("worker: the fence's price beside bubblewrap's");
    let bwrap = match super::fence::which("bwrap") {
        Some(p) => Ok(p),
        None if !install => Err("bwrap not found in PATH (--no-install)".to_string()),
        None => super::fence::install_bwrap().inspect(|_| {
            notes.push("worker: bwrap was missing; installed it with apt-get".into());
        }),
    };
    let version = bwrap.as_ref().ok().and_then(|p| super::fence::version(p, &["--version"]));
    let mut out: Vec<FenceResult> =
        FenceRow::ALL.iter().map(|&row| FenceResult { row, dist: None, skipped: None }).collect();
    let mut cmds: Vec<Option<Command>> = Vec::new();
    for r in &mut out {
        let b = bwrap.as_ref().ok().map(PathBuf::as_path);
        let prepared = match (&bwrap, r.row) {
            (Err(why), FenceRow::Bwrap) => Err(why.clone()),
            _ => trial(r.row, b).and_then(|()| command(r.row, b)),
        };
        match prepared {
            Ok(c) => cmds.push(Some(c)),
            Err(e) => {
                r.skipped = Some(e);
                cmds.push(None);
            }
        }
    }
    let n = out.len();
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); n];
    for round in 0..runs.div_ceil(BLOCK) {
        for k in 0..n {
            let i = (round + k) % n;
            let Some(c) = cmds[i].as_mut() else { continue };
            let mut failed = None;
            for _ in 0..BLOCK.min(runs.saturating_sub(samples[i].len())) {
                match once(c) {
                    Ok(us) => samples[i].push(us),
                    Err(e) => {
                        failed = Some(format!("failed after {} runs: {e}", samples[i].len()));
                        break;
                    }
                }
                progress.inc(1);
            }
            if let Some(why) = failed {
                out[i].skipped = Some(why);
                samples[i].clear();
                cmds[i] = None;
            }
        }
    }
    for (r, s) in out.iter_mut().zip(samples) {
        if r.skipped.is_none() {
            r.dist = Dist::of(s);
        }
    }
    (out, version)
}

/// Where BuildGrid's venv is (or goes): $SPAWNKIT_BUILDGRID_VENV, else beside the project's
/// .venv the Python came from, else in the source tree this binary was built from.
fn buildgrid_venv(python: &Path) -> PathBuf {
    if let Some(v) = std::env::var_os("SPAWNKIT_BUILDGRID_VENV") {
        return PathBuf::from(v);
    }
    let beside = python
        .parent()
        .and_then(Path::parent)
        .filter(|v| v.file_name().is_some_and(|n| n == ".venv"))
        .and_then(Path::parent);
    match beside {
        Some(root) => root.join(".venv-buildgrid"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-buildgrid"),
    }
}

fn skipped_farm(why: &str) -> Vec<FarmRow> {
    FARM_ROWS
        .iter()
        .map(|(id, fence, files)| FarmRow {
            id: (*id).into(),
            fence: (*fence).into(),
            input_files: *files,
            actions_per_s: None,
            own_median_us: None,
            own_p90_us: None,
            own_excl_server_median_us: None,
            floor_us: None,
            cas_probe_us: None,
            raw: serde_json::Value::Null,
            skipped: Some(why.into()),
        })
        .collect()
}

fn farm_rows(
    python: &Path,
    dir: &Path,
    actions: usize,
    install: bool,
) -> Result<(Vec<FarmRow>, serde_json::Value), String> {
    for (name, text) in
        [("worker_overhead.py", SCRIPT), ("buildgrid_farm.py", FARM), ("reapi_client.py", CLIENT)]
    {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let exe = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
    let mut cmd = std::process::Command::new(python);
    cmd.arg(dir.join("worker_overhead.py"))
        .arg(actions.to_string())
        .env("SPAWNKIT_BIN", exe)
        .env("SPAWNKIT_BUILDGRID_VENV", buildgrid_venv(python))
        .stdin(std::process::Stdio::null());
    if !install {
        cmd.env("SPAWNKIT_FARM_NO_INSTALL", "1");
    }
    let out = cmd.output().map_err(|e| format!("{}: {e}", python.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last: Vec<&str> = err.lines().rev().take(3).collect();
        return Err(format!(
            "{} bench/worker_overhead.py failed ({}): {}",
            python.display(),
            out.status,
            last.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("bench/worker_overhead.py printed no JSON: {e}"))?;
    if let Some(why) = v["skipped"].as_str() {
        return Ok((skipped_farm(why), v));
    }
    let mut rows = Vec::new();
    for (id, fence, files) in FARM_ROWS {
        let r = v["rows"].as_array().into_iter().flatten().find(|r| r["id"] == id);
        let Some(r) = r else {
            rows.extend(
                skipped_farm("bench/worker_overhead.py reported nothing for it")
                    .into_iter()
                    .filter(|x| x.id == id),
            );
            continue;
        };
        rows.push(FarmRow {
            id: id.into(),
            fence: fence.into(),
            input_files: files,
            actions_per_s: r["actions_per_s"].as_f64(),
            own_median_us: r["own_us"]["median"].as_f64(),
            own_p90_us: r["own_us"]["p90"].as_f64(),
            own_excl_server_median_us: r["own_excl_server_ms_median"].as_f64().map(|m| m * 1e3),
            floor_us: r["floor_ms"].as_f64().map(|m| m * 1e3),
            cas_probe_us: r["cas_probe_ms_median"].as_f64().map(|m| m * 1e3),
            raw: r.clone(),
            skipped: r["skipped"].as_str().map(String::from),
        });
    }
    let mut info = v;
    if let Some(o) = info.as_object_mut() {
        o.remove("rows");
    }
    Ok((rows, info))
}

/// Run the method: the fence rows here, then the farm through `python` (None: `--no-python`).
pub fn run(
    python: Option<&Path>,
    dir: &Path,
    actions: usize,
    fence_runs: usize,
    install: bool,
    progress: &Progress,
) -> WorkerResults {
    let mut notes = Vec::new();
    let (fence, bwrap_version) = fence_rows(fence_runs, install, &mut notes, progress);
    let (farm, farm_info) = match python {
        None => (skipped_farm("--no-python"), serde_json::Value::Null),
        Some(py) => {
            progress.phase("worker: BuildGrid farm, two spawnkit workers (Python driver)");
            let r = farm_rows(py, dir, actions, install)
                .unwrap_or_else(|e| (skipped_farm(&e), serde_json::Value::Null));
            progress.inc((FARM_ROWS.len() * actions) as u64);
            r
        }
    };
    for r in &fence {
        if let Some(why) = &r.skipped {
            notes.push(format!("worker: fence row {} skipped: {why}", r.row.id()));
        }
    }
    let mut reasons: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in &farm {
        if let Some(why) = &r.skipped {
            reasons.entry(why.as_str()).or_default().push(r.id.as_str());
        }
    }
    for (why, ids) in reasons {
        notes.push(format!("worker: farm rows {} skipped: {why}", ids.join(", ")));
    }
    WorkerResults { actions, fence_runs, farm, farm_info, fence, bwrap_version, notes }
}
