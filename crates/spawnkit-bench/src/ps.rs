//! Method 5, the process table and memory: N sleeping processes (the herd, bench/herd.c), then
//! the tools a user would run to see them, timed side by side:
//!
//! - `spawnkit ps -o pid,ppid,comm,state` with the BPF task iterator and with the /proc
//!   walker, beside procps `ps ax -o pid,ppid,comm,state`: the wall time of the whole command
//!   (start, read the table, print it to /dev/null, exit), as a user or a script pays it;
//! - in one Python interpreter (bench/python_ps.py): psutil's
//!   `process_iter(['pid','ppid','name'])` beside `spawnkit.ps()`, the call alone;
//! - `spawnkit mem --all` (smaps_rollup of every process) and `spawnkit mem --shared` beside
//!   `smem` (the full smaps of every process), wall time; smem is installed from Debian's
//!   packages when missing, unless `--no-install`.
//!
//! Rows take turns, one run each, so noise on a shared machine hits them alike. Before timing,
//! each row runs once untimed with its output captured, and must list at least the herd (a row
//! that lists less would time less than it names): a row that fails that check is skipped with
//! the reason, never timed.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command as Process, Stdio as ProcessStdio};
use std::time::Instant;

use serde_json::{json, Value};

use super::Progress;

/// The herd, built by build.rs.
const HERD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/herd"));
const HERD_NAME: &str = "spawnkit-herd";
const PY_SCRIPT: &str = include_str!("../../../bench/python_ps.py");

/// The targets of the issue, as (numerator row, denominator row, target ratio).
pub const TARGETS: [(&str, &str, f64); 4] = [
    ("ps_spawnkit_bpf", "ps_procps", 0.05),
    ("ps_spawnkit_procfs", "ps_procps", 0.30),
    ("py_spawnkit_ps", "py_psutil", 0.05),
    ("mem_spawnkit_all", "mem_smem", f64::NAN),
];

/// Every row, in the order of the tables and the JSON file.
pub const ROWS: [&str; 8] = [
    "ps_spawnkit_bpf",
    "ps_spawnkit_procfs",
    "ps_procps",
    "py_psutil",
    "py_spawnkit_ps",
    "mem_spawnkit_all",
    "mem_spawnkit_shared",
    "mem_smem",
];

/// A short label for charts.
pub fn short_name(id: &str) -> &str {
    match id {
        "ps_spawnkit_bpf" => "spawnkit ps (BPF)",
        "ps_spawnkit_procfs" => "spawnkit ps (/proc)",
        "ps_procps" => "ps ax (procps)",
        "py_psutil" => "psutil.process_iter",
        "py_spawnkit_ps" => "spawnkit.ps()",
        "mem_spawnkit_all" => "spawnkit mem --all",
        "mem_spawnkit_shared" => "spawnkit mem --shared",
        "mem_smem" => "smem",
        other => other,
    }
}

/// One row's result.
#[derive(Debug, Clone)]
pub struct PsRow {
    pub id: String,
    pub name: String,
    /// "cli" (wall time of a command) or "python" (the call alone).
    pub kind: &'static str,
    /// Milliseconds per run, in run order.
    pub runs_ms: Vec<f64>,
    /// How many processes (lines after the header, or objects) the untimed check run listed;
    /// for `spawnkit mem --shared`, its output lines.
    pub listed: Option<usize>,
    pub skipped: Option<String>,
}

impl PsRow {
    pub fn min_ms(&self) -> Option<f64> {
        self.runs_ms.iter().copied().reduce(f64::min)
    }

    pub fn median_ms(&self) -> Option<f64> {
        let mut v = self.runs_ms.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(v[v.len() / 2])
    }
}

/// Everything the method measured.
#[derive(Debug, Clone, Default)]
pub struct PsResults {
    /// Sleeping processes started for the run.
    pub herd: usize,
    /// Processes on the machine while the rows ran (the herd and everything else).
    pub processes: usize,
    pub runs: usize,
    pub mem_runs: usize,
    pub rows: Vec<PsRow>,
    pub tools: Vec<(String, String)>,
    pub notes: Vec<String>,
    /// The shared-memory fixture, or why it could not run.
    pub shm: Option<Result<ShmCheck, String>>,
}

/// Issue 6's fixture, measured: 200 MiB mapped `MAP_SHARED | MAP_ANONYMOUS`, children wrote
/// 50 and 100 MiB and exited; what `shared_regions` reports against what Shmem grew by.
#[derive(Debug, Clone)]
pub struct ShmCheck {
    pub total_mib: u64,
    pub written_mib: [u64; 2],
    /// Regions the fixture maps, as reported (should be 1).
    pub regions: usize,
    /// Their resident bytes, summed (unknown ones count 0).
    pub resident_bytes: u64,
    /// Whether the fixture is each region's only mapper.
    pub only_mapper: bool,
    /// /proc/meminfo Shmem after the fixture is ready minus before it started.
    pub shmem_growth_bytes: i64,
    /// The fixture's own RSS (per-process views miss the region).
    pub fixture_rss_bytes: u64,
}

impl ShmCheck {
    /// (resident - Shmem growth) / Shmem growth, in percent.
    pub fn difference_pct(&self) -> Option<f64> {
        (self.shmem_growth_bytes > 0).then(|| {
            (self.resident_bytes as f64 - self.shmem_growth_bytes as f64) * 100.0
                / self.shmem_growth_bytes as f64
        })
    }
}

/// Run the fixture and measure it.
fn shm_check(dir: &Path) -> Result<ShmCheck, String> {
    let (total, a, b) = (200, 50, 100);
    let shmem = || spawnkit_observe::meminfo_shmem().ok_or("no Shmem in /proc/meminfo");
    let before = shmem()?;
    let fixture = Herd::shm(dir, total, a, b)?;
    let after = shmem()?;
    let pid = fixture.pid() as i32;
    let report = spawnkit_observe::shared_regions_of(&[pid]).map_err(|e| e.to_string())?;
    let rss = spawnkit_observe::memory(pid).ok().flatten().map_or(0, |m| m.rss);
    drop(fixture);
    Ok(ShmCheck {
        total_mib: total,
        written_mib: [a, b],
        regions: report.regions.len(),
        resident_bytes: report.regions.iter().filter_map(|r| r.resident_bytes).sum(),
        only_mapper: report.regions.iter().all(|r| r.pids == [pid]),
        shmem_growth_bytes: after as i64 - before as i64,
        fixture_rss_bytes: rss,
    })
}

impl PsResults {
    pub fn row(&self, id: &str) -> Option<&PsRow> {
        self.rows.iter().find(|r| r.id == id && r.skipped.is_none())
    }

    /// numerator ÷ denominator, by median and by minimum.
    pub fn ratio(&self, num: &str, den: &str) -> Option<(f64, f64)> {
        let (n, d) = (self.row(num)?, self.row(den)?);
        Some((n.median_ms()? / d.median_ms()?, n.min_ms()? / d.min_ms()?))
    }
}

/// A command row: argv, with the program resolved.
struct CliRow {
    id: &'static str,
    name: String,
    argv: Vec<String>,
    /// Lines of output that are not processes (headers, footers).
    kind: &'static str,
    mem: bool,
}

/// The herd: started, ready, killed (by closing its stdin) on drop.
struct Herd {
    child: Child,
    stdin: Option<ChildStdin>,
    path: PathBuf,
}

impl Herd {
    fn start(dir: &Path, n: usize) -> Result<Herd, String> {
        Herd::run(dir, &[n.to_string()], &format!("the herd of {n} processes"))
    }

    /// The shared-memory fixture: TOTAL MiB mapped shared, A and B MiB written by children
    /// that have exited.
    fn shm(dir: &Path, total: u64, a: u64, b: u64) -> Result<Herd, String> {
        let args = ["shm".to_string(), total.to_string(), a.to_string(), b.to_string()];
        Herd::run(dir, &args, "the shared-memory fixture")
    }

    fn run(dir: &Path, args: &[String], what: &str) -> Result<Herd, String> {
        use std::io::Read;
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(HERD_NAME);
        std::fs::write(&path, HERD).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut child = Process::new(&path)
            .args(args)
            .stdin(ProcessStdio::piped())
            .stdout(ProcessStdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let stdin = child.stdin.take();
        let mut out = child.stdout.take().ok_or("the herd has no stdout")?;
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        while !got.ends_with(b"\n") {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => got.extend_from_slice(&buf[..k]),
            }
        }
        let herd = Herd { child, stdin, path };
        if got != b"ready\n" {
            return Err(format!(
                "{what} did not start: {:?}",
                String::from_utf8_lossy(&got).trim()
            ));
        }
        Ok(herd)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Herd {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

fn first_line(prog: &Path, args: &[&str]) -> Option<String> {
    let out = Process::new(prog).args(args).stdin(ProcessStdio::null()).output().ok()?;
    let text = if out.stdout.is_empty() { out.stderr } else { out.stdout };
    String::from_utf8_lossy(&text).lines().map(str::trim).find(|l| !l.is_empty()).map(String::from)
}

/// smem, installed from Debian's packages when missing and allowed.
fn smem(install: bool, notes: &mut Vec<String>) -> Result<PathBuf, String> {
    if let Some(p) = which("smem") {
        return Ok(p);
    }
    if !install {
        return Err("smem is not installed (--no-install)".into());
    }
    if spawnkit::process::geteuid() != 0 || which("apt-get").is_none() {
        return Err("smem is not installed, and this is not root with apt-get".into());
    }
    crate::out::note!("spawnkit bench: smem not found in PATH; installing Debian's smem package");
    let apt = |args: &[&str]| {
        Process::new("apt-get")
            .args(["-o", "DPkg::Lock::Timeout=120", "-q"])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(ProcessStdio::null())
            .stdout(ProcessStdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let install = ["install", "-y", "--no-install-recommends", "smem"];
    let installed = apt(&install) || (apt(&["update"]) && apt(&install));
    if !installed {
        return Err("apt-get install smem failed".into());
    }
    notes.push("ps: installed smem from Debian's packages".into());
    which("smem").ok_or_else(|| "apt-get installed smem, but it is not in PATH".into())
}

/// psutil in `python`, installed with pip when missing and allowed; its version or why not.
fn psutil(python: &Path, install: bool, notes: &mut Vec<String>) -> Result<String, String> {
    let version = || {
        let out = Process::new(python)
            .args(["-c", "import psutil; print(psutil.__version__)"])
            .stdin(ProcessStdio::null())
            .output()
            .ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    if let Some(v) = version() {
        return Ok(v);
    }
    if !install {
        return Err("psutil is not installed (--no-install)".into());
    }
    crate::out::note!("spawnkit bench: installing psutil into {} with pip", python.display());
    let ok = Process::new(python)
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "psutil"])
        .stdin(ProcessStdio::null())
        .stdout(ProcessStdio::null())
        .status()
        .is_ok_and(|s| s.success());
    match (ok, version()) {
        (true, Some(v)) => {
            notes.push(format!("ps: installed psutil {v} into {} with pip", python.display()));
            Ok(v)
        }
        _ => Err(format!(
            "psutil is not installed in {} and pip could not install it",
            python.display()
        )),
    }
}

/// Run once with the output captured; the number of processes it listed, or why it failed.
fn check(row: &CliRow, herd: usize) -> Result<usize, String> {
    let out = Process::new(&row.argv[0])
        .args(&row.argv[1..])
        .stdin(ProcessStdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", row.argv[0]))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
        return Err(format!("exit status {}: {first}", out.status.code().unwrap_or(-1)));
    }
    let lines = out.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count();
    if row.mem && row.kind == "shared" {
        return Ok(lines);
    }
    // Every process row's output starts with one header line.
    let lines = lines.saturating_sub(1);
    if lines < herd {
        return Err(format!("{} listed {lines} lines, fewer than the {herd} processes", row.name));
    }
    Ok(lines)
}

/// One timed run: the whole command, output to /dev/null.
fn timed(row: &CliRow) -> Result<f64, String> {
    let t0 = Instant::now();
    let status = Process::new(&row.argv[0])
        .args(&row.argv[1..])
        .stdin(ProcessStdio::null())
        .stdout(ProcessStdio::null())
        .stderr(ProcessStdio::null())
        .status()
        .map_err(|e| format!("{}: {e}", row.argv[0]))?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    if !status.success() {
        return Err(format!("{} failed ({status})", row.name));
    }
    Ok(ms)
}

fn count_processes() -> usize {
    std::fs::read_dir("/proc").map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| {
                e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .count()
    })
}

/// How many timed runs the method will make (for the progress bar).
pub fn planned(runs: usize, mem_runs: usize) -> usize {
    3 * runs + 2 * runs + 3 * mem_runs
}

/// Run the method: start the herd, check and time every row.
pub fn run(
    herd_size: usize,
    runs: usize,
    mem_runs: usize,
    dir: &Path,
    python: Option<&Path>,
    install: bool,
    progress: &Progress,
) -> Result<PsResults, String> {
    let mut res = PsResults { herd: herd_size, runs, mem_runs, ..PsResults::default() };
    // Before the herd exists: installing takes a while and its output goes to stderr.
    let smem = smem(install, &mut res.notes);
    let psutil = match python {
        Some(py) => psutil(py, install, &mut res.notes),
        None => Err("--no-python".into()),
    };
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let exe = exe.to_string_lossy().into_owned();
    let ps = which("ps");
    progress.phase(&format!("ps: starting {herd_size} sleeping processes"));
    let herd = Herd::start(dir, herd_size)?;
    res.processes = count_processes();

    let sk = |args: &[&str]| -> Vec<String> {
        std::iter::once(exe.clone()).chain(args.iter().map(|s| s.to_string())).collect()
    };
    let fields = "pid,ppid,comm,state";
    let mut cli = vec![
        CliRow {
            id: "ps_spawnkit_bpf",
            name: format!("spawnkit ps --backend bpf -o {fields}"),
            argv: sk(&["ps", "--backend", "bpf", "-o", fields]),
            kind: "ps",
            mem: false,
        },
        CliRow {
            id: "ps_spawnkit_procfs",
            name: format!("spawnkit ps --backend procfs -o {fields}"),
            argv: sk(&["ps", "--backend", "procfs", "-o", fields]),
            kind: "ps",
            mem: false,
        },
    ];
    let mut skipped: Vec<PsRow> = Vec::new();
    let skip = |id: &str, name: String, kind: &'static str, why: String| PsRow {
        id: id.into(),
        name,
        kind,
        runs_ms: Vec::new(),
        listed: None,
        skipped: Some(why),
    };
    match &ps {
        Some(p) => {
            res.tools.push(("ps".into(), first_line(p, &["--version"]).unwrap_or_default()));
            cli.push(CliRow {
                id: "ps_procps",
                name: format!("ps ax -o {fields}"),
                argv: vec![
                    p.to_string_lossy().into_owned(),
                    "ax".into(),
                    "-o".into(),
                    fields.into(),
                ],
                kind: "ps",
                mem: false,
            });
        }
        None => skipped.push(skip(
            "ps_procps",
            format!("ps ax -o {fields}"),
            "cli",
            "ps is not installed".into(),
        )),
    }
    cli.push(CliRow {
        id: "mem_spawnkit_all",
        name: "spawnkit mem --all".into(),
        argv: sk(&["mem", "--all"]),
        kind: "all",
        mem: true,
    });
    cli.push(CliRow {
        id: "mem_spawnkit_shared",
        name: "spawnkit mem --shared".into(),
        argv: sk(&["mem", "--shared"]),
        kind: "shared",
        mem: true,
    });
    match &smem {
        Ok(p) => {
            res.tools.push(("smem".into(), "Debian package".into()));
            cli.push(CliRow {
                id: "mem_smem",
                name: "smem (every process)".into(),
                argv: vec![p.to_string_lossy().into_owned()],
                kind: "all",
                mem: true,
            });
        }
        Err(e) => skipped.push(skip("mem_smem", "smem".into(), "cli", e.clone())),
    }

    // The untimed check of every command row.
    progress.phase("ps: checking each row lists the herd");
    let mut rows: Vec<(CliRow, PsRow)> = Vec::new();
    for row in cli {
        let mut r = PsRow {
            id: row.id.into(),
            name: row.name.clone(),
            kind: "cli",
            runs_ms: Vec::new(),
            listed: None,
            skipped: None,
        };
        match check(&row, herd_size) {
            Ok(n) => r.listed = Some(n),
            Err(e) => r.skipped = Some(e),
        }
        rows.push((row, r));
    }

    // Timed: command rows take turns, the starting row rotating.
    let live: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].1.skipped.is_none()).collect();
    let ps_rows: Vec<usize> = live.iter().copied().filter(|&i| !rows[i].0.mem).collect();
    let mem_rows: Vec<usize> = live.iter().copied().filter(|&i| rows[i].0.mem).collect();
    for (set, n) in [(&ps_rows, runs), (&mem_rows, mem_runs)] {
        for k in 0..n {
            for j in 0..set.len() {
                let i = set[(j + k) % set.len()];
                progress.phase(&format!("ps: {}", rows[i].0.name));
                if rows[i].1.skipped.is_some() {
                    continue;
                }
                match timed(&rows[i].0) {
                    Ok(ms) => rows[i].1.runs_ms.push(ms),
                    Err(e) => rows[i].1.skipped = Some(e),
                }
                progress.inc(1);
            }
        }
    }
    res.rows.extend(rows.into_iter().map(|(_, r)| r));
    res.rows.extend(skipped);

    // The Python rows, in one interpreter.
    progress.phase("ps: Python rows");
    let py = match python {
        Some(python) => python_rows(python, runs, herd_size, herd.pid(), dir),
        None => Err("--no-python".to_string()),
    };
    match py {
        Ok((rows, info)) => {
            res.tools.push(("python".into(), info));
            res.rows.extend(rows.into_iter().map(|mut r| {
                // Say why psutil is missing (not installed, install refused or failed).
                if let (Some(_), Err(e)) = (&r.skipped, &psutil) {
                    if r.id == "py_psutil" {
                        r.skipped = Some(e.clone());
                    }
                }
                r
            }));
        }
        Err(e) => {
            for (id, name) in
                [("py_psutil", "psutil.process_iter"), ("py_spawnkit_ps", "spawnkit.ps()")]
            {
                res.rows.push(skip(id, name.into(), "python", e.clone()));
            }
        }
    }
    progress.inc(2 * runs as u64);
    drop(herd);
    progress.phase("ps: the shared-memory fixture");
    res.shm = Some(shm_check(dir));
    res.rows.sort_by_key(|r| ROWS.iter().position(|id| *id == r.id).unwrap_or(ROWS.len()));
    Ok(res)
}

fn python_rows(
    python: &Path,
    runs: usize,
    herd: usize,
    herd_pid: u32,
    dir: &Path,
) -> Result<(Vec<PsRow>, String), String> {
    let script = dir.join("python_ps.py");
    std::fs::write(&script, PY_SCRIPT).map_err(|e| format!("{}: {e}", script.display()))?;
    let out = Process::new(python)
        .arg(&script)
        .args([runs.to_string(), herd.to_string(), herd_pid.to_string()])
        .stdin(ProcessStdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} ({}): {}",
            python.display(),
            out.status,
            err.lines().last().unwrap_or("")
        ));
    }
    let v: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("the Python ps rows printed no JSON: {e}"))?;
    let mut info = format!(
        "{} ({})",
        v["python"].as_str().unwrap_or("?"),
        v["executable"].as_str().unwrap_or("?")
    );
    if let Some(b) = v["spawnkit_backend"].as_str() {
        info += &format!(", spawnkit.ps() backend: {b}");
    }
    if let Some(p) = v["psutil"].as_str() {
        info += &format!(", psutil {p}");
    }
    let rows = v["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| PsRow {
            id: r["id"].as_str().unwrap_or("?").into(),
            name: r["name"].as_str().map_or_else(
                || {
                    if r["id"] == "py_psutil" {
                        "psutil.process_iter".into()
                    } else {
                        "spawnkit.ps()".into()
                    }
                },
                String::from,
            ),
            kind: "python",
            runs_ms: r["runs_ms"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_f64)
                .collect(),
            listed: r["listed"].as_u64().map(|n| n as usize),
            skipped: r["skipped"].as_str().map(String::from),
        })
        .collect();
    Ok((rows, info))
}

fn fmt_ms(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v < 10.0 => format!("{v:.2}"),
        Some(v) if v < 100.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.0}"),
    }
}

/// The table.
pub fn print(o: &mut super::report::Text, res: &PsResults) {
    writeln!(
        o,
        "5. Process table and memory: {} sleeping processes started ({} on the machine), \
         wall time of each command (cli) or of the call alone (python), ms",
        res.herd, res.processes
    );
    writeln!(
        o,
        "   {} runs per ps/python row, {} per mem row, rows taking turns",
        res.runs, res.mem_runs
    );
    let w = res.rows.iter().map(|r| r.name.chars().count()).max().unwrap_or(10).max(10) + 2;
    writeln!(o, "   {:<w$}{:>7}{:>10}{:>10}{:>9}", "row", "kind", "min", "median", "listed");
    for r in &res.rows {
        match &r.skipped {
            Some(why) => writeln!(o, "   {:<w$}{:>7}  skipped: {why}", r.name, r.kind),
            None => writeln!(
                o,
                "   {:<w$}{:>7}{:>10}{:>10}{:>9}",
                r.name,
                r.kind,
                fmt_ms(r.min_ms()),
                fmt_ms(r.median_ms()),
                r.listed.map_or("-".into(), |n| n.to_string())
            ),
        }
    }
    if !res.tools.is_empty() {
        let tools: Vec<String> = res.tools.iter().map(|(t, v)| format!("{t}: {v}")).collect();
        writeln!(o, "   tools: {}", tools.join("; "));
    }
    match &res.shm {
        Some(Ok(c)) => writeln!(
            o,
            "   shared-memory fixture ({} MiB MAP_SHARED|MAP_ANONYMOUS, children wrote {} and {} \
             MiB, exited): {} region(s), {:.1} MiB resident, the fixture {}its only mapper; \
             Shmem grew {:.1} MiB; the fixture's own RSS {} KiB",
            c.total_mib,
            c.written_mib[0],
            c.written_mib[1],
            c.regions,
            c.resident_bytes as f64 / MIB,
            if c.only_mapper { "" } else { "NOT " },
            c.shmem_growth_bytes as f64 / MIB,
            c.fixture_rss_bytes / 1024
        ),
        Some(Err(e)) => writeln!(o, "   shared-memory fixture: not measured: {e}"),
        None => {}
    }
    writeln!(o);
}

const MIB: f64 = 1048576.0;

/// The ratio lines (median, then minimum), with the targets.
pub fn summary(res: &PsResults) -> Vec<String> {
    let mut out = Vec::new();
    for (num, den, target) in TARGETS {
        let Some((med, min)) = res.ratio(num, den) else { continue };
        let t = if target.is_nan() {
            String::new()
        } else {
            format!(" (target, with 10,000 processes: ≤ {target:.2})")
        };
        out.push(format!("{num} ÷ {den}: {med:.3} median, {min:.3} minimum{t}"));
    }
    if let Some(Ok(c)) = &res.shm {
        if let Some(pct) = c.difference_pct() {
            out.push(format!(
                "shared regions ÷ Shmem growth (fixture): {:+.2} % (target: within 1 %)",
                pct
            ));
        }
    }
    out
}

/// The JSON section.
pub fn json(res: &PsResults) -> Value {
    let rows: Vec<Value> = res
        .rows
        .iter()
        .map(|r| {
            json!({"id": r.id, "name": r.name, "kind": r.kind, "runs_ms": r.runs_ms,
                   "min_ms": r.min_ms(), "median_ms": r.median_ms(), "listed": r.listed,
                   "skipped": r.skipped})
        })
        .collect();
    let ratios: serde_json::Map<String, Value> = TARGETS
        .iter()
        .map(|(n, d, t)| {
            let r = res.ratio(n, d);
            (
                format!("{n}/{d}"),
                json!({"median": r.map(|r| r.0), "min": r.map(|r| r.1),
                       "target": (!t.is_nan()).then_some(*t)}),
            )
        })
        .collect();
    let tools: serde_json::Map<String, Value> =
        res.tools.iter().map(|(t, v)| (t.clone(), json!(v))).collect();
    let shm = match &res.shm {
        Some(Ok(c)) => json!({"total_mib": c.total_mib, "written_mib": c.written_mib,
                              "regions": c.regions, "resident_bytes": c.resident_bytes,
                              "only_mapper": c.only_mapper,
                              "shmem_growth_bytes": c.shmem_growth_bytes,
                              "fixture_rss_bytes": c.fixture_rss_bytes,
                              "difference_pct": c.difference_pct()}),
        Some(Err(e)) => json!({"skipped": e}),
        None => Value::Null,
    };
    json!({"unit": "ms", "herd": res.herd, "processes": res.processes, "runs": res.runs,
           "mem_runs": res.mem_runs, "tools": tools, "rows": rows, "ratios": ratios,
           "shm_fixture": shm})
}
