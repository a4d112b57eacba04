//! Method 7, async spawning (issue 15): start TOTAL processes (1,000) with at most LIMIT (64)
//! running and wait for all of them, from one event loop, with the tiny static child and with
//! /bin/true: `tokio::process` beside spawnkit's tokio face (`start_async`: the clone on the
//! runtime's thread and the exec awaited through the reactor; `spawn_async`: a clone-vfork
//! that returns once the child has exec'd; both wait on the pidfd) and its async `Client`
//! through a private server, on a current-thread tokio runtime (one per round, the same for
//! all four rows); two floor rows, the same children started and
//! reaped from one thread with no runtime at all (what `tokio::process` and the local face
//! could reach at best on the runtime's one thread); and asyncio's `create_subprocess_exec`
//! (default watcher, `PidfdChildWatcher`) beside `spawnkit.asyncio`, locally and through a
//! private server, through bench/python_async.py (embedded).
//!
//! Per row: the wall time, processes per second, the event loop's longest stall (the largest
//! gap between two ticks of a 1 ms timer running on the same loop while the spawning runs,
//! minus the 1 ms) and the threads created while it runs (the most threads the process had,
//! sampled by that timer, minus those it had before). The rows take turns, ROUNDS times; each
//! keeps its fastest round's wall time and the smallest of its rounds' longest stalls (a shared
//! machine's noise only ever slows a round or lengthens a stall).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::os::fd::AsRawFd;

use spawnkit::tokio::CommandExt;

use super::sys;
use super::Progress;

const SCRIPT: &str = include_str!("../../../bench/python_async.py");

/// Most running at once.
pub const LIMIT: usize = 64;

/// The two programs: the benchmark's tiny static child (by its bare name, along PATH) and a
/// dynamically linked one.
pub const TRUE: &str = "/bin/true";

/// One row's result for one program.
#[derive(Debug, Clone, Copy)]
pub struct Cell {
    pub wall_s: f64,
    pub per_s: f64,
    pub stall_ms: f64,
    /// Threads created while spawning (the most seen minus those before).
    pub threads: i64,
}

#[derive(Debug, Clone)]
pub struct AsyncRow {
    pub id: String,
    pub name: String,
    /// "tokio" or "asyncio".
    pub kind: String,
    /// Per program: [tiny child, /bin/true].
    pub cells: [Option<Cell>; 2],
    pub skipped: Option<String>,
}

pub struct AsyncResults {
    pub total: usize,
    pub limit: usize,
    pub rounds: usize,
    pub rows: Vec<AsyncRow>,
    pub python_version: Option<String>,
    pub notes: Vec<String>,
}

impl AsyncResults {
    fn per_s(&self, id: &str, prog: usize) -> Option<f64> {
        self.rows.iter().find(|r| r.id == id)?.cells[prog].map(|c| c.per_s)
    }

    /// `num`'s processes per second over `den`'s, for program 0 (tiny) or 1 (/bin/true).
    pub fn ratio(&self, num: &str, den: &str, prog: usize) -> Option<f64> {
        let (n, d) = (self.per_s(num, prog)?, self.per_s(den, prog)?);
        (d > 0.0).then_some(n / d)
    }
}

/// The ratios: (JSON key, numerator row, denominator row, target: at least).
pub const RATIOS: [(&str, &str, &str, f64); 2] = [
    ("async_spawnkit/tokio", "spawnkit_tokio_start", "tokio_process", 1.5),
    ("asyncio_spawnkit/asyncio", "asyncio_spawnkit", "asyncio", 2.0),
];

/// More ratios worth having (in `other_ratios`): (key, numerator, denominator, program).
pub const OTHER_RATIOS: [(&str, &str, &str, usize); 14] = [
    ("async_spawnkit_spawn_async/tokio", "spawnkit_tokio", "tokio_process", 0),
    ("async_spawnkit_start/floor_vfork", "spawnkit_tokio_start", "floor_vfork", 0),
    ("async_spawnkit_server/tokio", "spawnkit_tokio_server", "tokio_process", 0),
    ("async_spawnkit_server/tokio, /bin/true", "spawnkit_tokio_server", "tokio_process", 1),
    ("async_spawnkit/tokio, /bin/true", "spawnkit_tokio_start", "tokio_process", 1),
    ("async_floor_vfork/tokio", "floor_vfork", "tokio_process", 0),
    ("async_floor_engine/tokio", "floor_engine", "tokio_process", 0),
    ("async_spawnkit/floor_engine", "spawnkit_tokio", "floor_engine", 0),
    ("asyncio_spawnkit/asyncio, /bin/true", "asyncio_spawnkit", "asyncio", 1),
    ("asyncio_spawnkit/asyncio_pidfd", "asyncio_spawnkit", "asyncio_pidfd", 0),
    ("asyncio_spawnkit/asyncio_pidfd, /bin/true", "asyncio_spawnkit", "asyncio_pidfd", 1),
    ("asyncio_spawnkit_server/asyncio", "asyncio_spawnkit_server", "asyncio", 0),
    ("asyncio_spawnkit_server/asyncio, /bin/true", "asyncio_spawnkit_server", "asyncio", 1),
    ("asyncio_spawnkit_server/asyncio_pidfd", "asyncio_spawnkit_server", "asyncio_pidfd", 0),
];

/// The asyncio rows (bench/python_async.py): (id, name).
const PY_ROWS: [(&str, &str); 4] = [
    ("asyncio", "asyncio create_subprocess_exec (default watcher)"),
    ("asyncio_pidfd", "asyncio create_subprocess_exec (PidfdChildWatcher)"),
    ("asyncio_spawnkit", "spawnkit.asyncio create_subprocess_exec"),
    ("asyncio_spawnkit_server", "spawnkit.asyncio create_subprocess_exec, server"),
];

/// How many processes the method starts (for the progress bar).
pub fn planned(rounds: usize, total: usize, python: bool) -> usize {
    2 * rounds * total * (6 + if python { PY_ROWS.len() } else { 0 })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tokio {
    Process,
    Spawnkit,
    /// Through a private spawn server, with `spawnkit::tokio::Client` (a task per child
    /// submits, awaits the answer, then awaits the exit).
    Server,
    /// The tokio face's `start_async`: the clone on the loop, the exec awaited in the task.
    Start,
}

/// A child's end as a row sees it: success, or its status as the error.
fn ended_ok(success: bool, status: impl std::fmt::Display) -> Result<(), String> {
    if success {
        Ok(())
    } else {
        Err(status.to_string())
    }
}

fn threads_now() -> i64 {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count() as i64)
}

/// One round of one tokio row: a fresh current-thread runtime, a 1 ms ticker task on it, and
/// the spawning loop (at most LIMIT children alive, each waited for by a task of its own).
fn tokio_round(
    row: Tokio,
    prog: &str,
    total: usize,
    server: Option<&spawnkit::Client>,
    progress: &Progress,
) -> Result<Cell, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let before = threads_now();
    rt.block_on(async {
        let done = Arc::new(AtomicBool::new(false));
        let stall = Arc::new(Mutex::new(Duration::ZERO));
        let most = Arc::new(AtomicUsize::new(before as usize));
        let ticker = {
            let (done, stall, most) = (done.clone(), stall.clone(), most.clone());
            tokio::spawn(async move {
                let mut last = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let now = Instant::now();
                    let gap = (now - last).saturating_sub(Duration::from_millis(1));
                    let mut s = stall.lock().unwrap_or_else(|e| e.into_inner());
                    *s = (*s).max(gap);
                    last = now;
                    most.fetch_max(threads_now() as usize, Ordering::Relaxed);
                }
            })
        };
        // The async face of the private server's connection (registered with this runtime).
        let client = match (row, server) {
            (Tokio::Server, Some(c)) => {
                Some(spawnkit::tokio::Client::new(c).map_err(|e| format!("async client: {e}"))?)
            }
            (Tokio::Server, None) => return Err("no private server".into()),
            _ => None,
        };
        let mut server_cmd = spawnkit::Command::new(prog);
        server_cmd.stdin(spawnkit::Stdio::Null).stdout(spawnkit::Stdio::Null);
        let server_cmd = Arc::new(server_cmd);
        tokio::time::sleep(Duration::from_millis(5)).await; // the ticker runs
        let t = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        let mut started = 0;
        while started < total || !set.is_empty() {
            if started < total && set.len() < LIMIT {
                match row {
                    Tokio::Process => {
                        let mut child = tokio::process::Command::new(prog)
                            .stdin(std::process::Stdio::null())
                            .stdout(std::process::Stdio::null())
                            .spawn()
                            .map_err(|e| format!("tokio::process {prog}: {e}"))?;
                        set.spawn(async move {
                            let st = child.wait().await.map_err(|e| e.to_string())?;
                            ended_ok(st.success(), st)
                        });
                    }
                    Tokio::Server => {
                        let (client, cmd) = (client.clone(), server_cmd.clone());
                        set.spawn(async move {
                            let Some(client) = client else { return Err("no client".into()) };
                            let mut child = client.spawn(&cmd).await.map_err(|e| e.to_string())?;
                            let st = child.wait().await.map_err(|e| e.to_string())?;
                            ended_ok(st.success(), st)
                        });
                    }
                    Tokio::Start => {
                        let start = spawnkit::Command::new(prog)
                            .stdin(spawnkit::Stdio::Null)
                            .stdout(spawnkit::Stdio::Null)
                            .start_async();
                        set.spawn(async move {
                            let mut child = start.await.map_err(|e| e.to_string())?;
                            let st = child.wait().await.map_err(|e| e.to_string())?;
                            ended_ok(st.success(), st)
                        });
                    }
                    Tokio::Spawnkit => {
                        let mut child = spawnkit::Command::new(prog)
                            .stdin(spawnkit::Stdio::Null)
                            .stdout(spawnkit::Stdio::Null)
                            .spawn_async()
                            .map_err(|e| e.to_string())?;
                        set.spawn(async move {
                            let st = child.wait().await.map_err(|e| e.to_string())?;
                            ended_ok(st.success(), st)
                        });
                    }
                }
                started += 1;
                continue;
            }
            if let Some(r) = set.join_next().await {
                r.map_err(|e| format!("task: {e}"))?.map_err(|e| format!("{prog}: {e}"))?;
                progress.inc(1);
            }
        }
        let wall = t.elapsed().as_secs_f64();
        done.store(true, Ordering::Relaxed);
        let _ = ticker.await;
        let stall = *stall.lock().unwrap_or_else(|e| e.into_inner());
        Ok(Cell {
            wall_s: wall,
            per_s: total as f64 / wall,
            stall_ms: stall.as_secs_f64() * 1e3,
            threads: most.load(Ordering::Relaxed) as i64 - before,
        })
    })
}

/// The floor rows: one thread, no runtime, no event loop, the same children (stdout to
/// /dev/null) with at most LIMIT running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Floor {
    /// glibc's vfork + execvp (bench/baselines.c), reaped with a blocking waitpid(-1).
    Vfork,
    /// The engine's spawn (`spawnkit::Command::spawn`: clone3 CLONE_VM|CLONE_VFORK|
    /// CLONE_PIDFD, stdin and stdout /dev/null as the tokio rows), each pidfd in one epoll,
    /// reaped by `try_wait` when it is readable.
    Engine,
}

/// One round of a floor row: the wall time (no loop to stall: `stall_ms` is NaN).
fn floor_round(kind: Floor, prog: &str, total: usize, progress: &Progress) -> Result<Cell, String> {
    let mut started = 0;
    let t;
    match kind {
        Floor::Vfork => {
            let argv = sys::Argv::new(&[prog])?;
            let null = sys::dev_null()?;
            let mut running = std::collections::HashSet::new();
            t = Instant::now();
            while started < total || !running.is_empty() {
                if started < total && running.len() < LIMIT {
                    running.insert(sys::vfork_execvp(&argv, null.as_raw_fd(), None)?);
                    started += 1;
                    continue;
                }
                let (pid, status) = sys::wait_any()?;
                if !running.remove(&pid) {
                    return Err(format!("reaped pid {pid}, which this row did not start"));
                }
                sys::waited(status).map_err(|e| format!("{prog}: {e}"))?;
                progress.inc(1);
            }
        }
        Floor::Engine => {
            let mut cmd = spawnkit::Command::new(prog);
            cmd.stdin(spawnkit::Stdio::Null).stdout(spawnkit::Stdio::Null);
            let epoll = sys::Epoll::new()?;
            let mut slots: Vec<Option<spawnkit::Child>> = (0..LIMIT).map(|_| None).collect();
            let mut free: Vec<usize> = (0..LIMIT).rev().collect();
            let mut ready = Vec::with_capacity(LIMIT);
            t = Instant::now();
            while started < total || free.len() < LIMIT {
                if started < total && !free.is_empty() {
                    let child = cmd.spawn().map_err(|e| e.to_string())?;
                    let i = free.pop().unwrap_or_default();
                    epoll.add(child.pidfd().as_raw_fd(), i as u64)?;
                    slots[i] = Some(child);
                    started += 1;
                    continue;
                }
                epoll.wait(&mut ready)?;
                for i in ready.drain(..) {
                    let i = i as usize;
                    let Some(child) = slots[i].as_mut() else { continue };
                    if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
                        ended_ok(st.success(), st).map_err(|e| format!("{prog}: {e}"))?;
                        // Dropping the child closes its pidfd, which leaves the epoll set.
                        slots[i] = None;
                        free.push(i);
                        progress.inc(1);
                    }
                }
            }
        }
    }
    let wall = t.elapsed().as_secs_f64();
    Ok(Cell { wall_s: wall, per_s: total as f64 / wall, stall_ms: f64::NAN, threads: 0 })
}

/// Keep the fastest round's wall time and the smallest longest stall; the most threads.
fn best(old: Option<Cell>, new: Cell) -> Cell {
    match old {
        None => new,
        Some(o) => {
            let mut b = if new.wall_s < o.wall_s { new } else { o };
            b.stall_ms = o.stall_ms.min(new.stall_ms); // NaN (a floor row) stays NaN
            b.threads = o.threads.max(new.threads);
            b
        }
    }
}

/// Run every row on both programs; `tiny` is the tiny child's bare name (first in PATH, in
/// `dir`), `python` the interpreter (None: `--no-python`).
pub fn run(
    tiny: &str,
    dir: &Path,
    rounds: usize,
    total: usize,
    python: Option<&Path>,
    server: Result<&mut spawnkit::PrivateServer, String>,
    progress: &Progress,
) -> Result<AsyncResults, String> {
    let progs = [tiny, TRUE];
    let mut cells = [[None; 2]; 4];
    let mut floors = [[None; 2]; 2];
    let (server, server_skip) = match server {
        Ok(s) => (Some(&*s.client()), None),
        Err(why) => (None, Some(why)),
    };
    for (p, prog) in progs.iter().enumerate() {
        progress.phase(&format!("async, tokio, {prog}"));
        for round in 0..rounds {
            let mut order = [Tokio::Process, Tokio::Spawnkit, Tokio::Server, Tokio::Start];
            order.rotate_left(round % 4);
            for row in order {
                let i = row as usize;
                if row == Tokio::Server && server.is_none() {
                    progress.inc(total as u64);
                    continue;
                }
                let c = tokio_round(row, prog, total, server, progress)
                    .map_err(|e| format!("async, tokio row {i}: {e}"))?;
                cells[i][p] = Some(best(cells[i][p], c));
            }
            let mut order = [Floor::Vfork, Floor::Engine];
            order.rotate_left(round % 2);
            for kind in order {
                let i = kind as usize;
                let c = floor_round(kind, prog, total, progress)
                    .map_err(|e| format!("async, floor row {i}: {e}"))?;
                floors[i][p] = Some(best(floors[i][p], c));
            }
        }
    }
    let mut res = AsyncResults {
        total,
        limit: LIMIT,
        rounds,
        rows: vec![
            AsyncRow {
                id: "tokio_process".into(),
                name: "tokio::process".into(),
                kind: "tokio".into(),
                cells: cells[0],
                skipped: None,
            },
            AsyncRow {
                id: "spawnkit_tokio".into(),
                name: "spawnkit tokio face (spawn_async)".into(),
                kind: "tokio".into(),
                cells: cells[1],
                skipped: None,
            },
            AsyncRow {
                id: "spawnkit_tokio_start".into(),
                name: "spawnkit tokio face (start_async)".into(),
                kind: "tokio".into(),
                cells: cells[3],
                skipped: None,
            },
            AsyncRow {
                id: "spawnkit_tokio_server".into(),
                name: "spawnkit tokio face, server".into(),
                kind: "tokio".into(),
                cells: cells[2],
                skipped: server_skip.clone(),
            },
            AsyncRow {
                id: "floor_vfork".into(),
                name: "floor: vfork+execvp, waitpid(-1), no runtime".into(),
                kind: "floor".into(),
                cells: floors[0],
                skipped: None,
            },
            AsyncRow {
                id: "floor_engine".into(),
                name: "floor: engine spawn + pidfd epoll, no runtime".into(),
                kind: "floor".into(),
                cells: floors[1],
                skipped: None,
            },
        ],
        python_version: None,
        notes: vec![
            "async: the tokio rows run on a current-thread runtime (a fresh one per round), the \
             1 ms ticker a task on it"
                .into(),
            "async: the floor rows start and reap the same children from one thread with no \
             runtime and no timer (no stall to measure): what a single thread can do at best"
                .into(),
        ],
    };
    if let Some(why) = &server_skip {
        res.notes.push(format!("async: spawnkit tokio face, server skipped: {why}"));
    }
    let mut py_rows: Vec<AsyncRow> = PY_ROWS
        .iter()
        .map(|(id, name)| AsyncRow {
            id: (*id).into(),
            name: (*name).into(),
            kind: "asyncio".into(),
            cells: [None, None],
            skipped: None,
        })
        .collect();
    match python {
        None => {
            for r in &mut py_rows {
                r.skipped = Some("--no-python".into());
            }
        }
        Some(py) => {
            for (p, prog) in progs.iter().enumerate() {
                progress.phase(&format!("async, asyncio, {prog}"));
                match run_python(py, dir, prog, total, rounds) {
                    Ok((version, got)) => {
                        res.python_version = Some(version);
                        for r in &mut py_rows {
                            match got.iter().find(|(id, _)| *id == r.id) {
                                Some((_, Ok(c))) => r.cells[p] = Some(*c),
                                Some((_, Err(why))) => r.skipped = Some(why.clone()),
                                None => {}
                            }
                        }
                    }
                    Err(e) => {
                        for r in &mut py_rows {
                            r.skipped = Some(e.clone());
                        }
                    }
                }
                progress.inc((PY_ROWS.len() * rounds * total) as u64);
            }
        }
    }
    for r in &py_rows {
        if let Some(why) = &r.skipped {
            res.notes.push(format!("async: {} skipped: {why}", r.name));
        }
    }
    res.rows.extend(py_rows);
    Ok(res)
}

type PyCells = Vec<(String, Result<Cell, String>)>;

fn run_python(
    py: &Path,
    dir: &Path,
    prog: &str,
    total: usize,
    rounds: usize,
) -> Result<(String, PyCells), String> {
    let script = dir.join("python_async.py");
    std::fs::write(&script, SCRIPT).map_err(|e| format!("{}: {e}", script.display()))?;
    let out = std::process::Command::new(py)
        .arg(&script)
        .args([prog.to_string(), total.to_string(), LIMIT.to_string(), rounds.to_string()])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", py.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("");
        return Err(format!("{} failed ({}): {last}", py.display(), out.status));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("bench/python_async.py printed no JSON: {e}"))?;
    let at_start = v["threads_at_start"].as_i64().unwrap_or(1);
    let mut got = Vec::new();
    for (id, r) in v["rows"].as_object().into_iter().flatten() {
        let (Some(wall), Some(per), Some(stall), Some(threads)) = (
            r["wall_s"].as_f64(),
            r["per_s"].as_f64(),
            r["stall_ms"].as_f64(),
            r["threads"].as_i64(),
        ) else {
            continue;
        };
        got.push((
            id.clone(),
            Ok(Cell { wall_s: wall, per_s: per, stall_ms: stall, threads: threads - at_start }),
        ));
    }
    for (id, why) in v["skipped"].as_object().into_iter().flatten() {
        got.push((id.clone(), Err(why.as_str().unwrap_or("?").to_string())));
    }
    Ok((v["python"].as_str().unwrap_or("?").into(), got))
}
