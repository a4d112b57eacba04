//! `spawnkit bench`, driven through the real binary with tiny sizes: every row and method
//! shows up in the tables and the JSON file, the ratios are there, the charts are written.
//! No timing assertions: these machines are shared and noisy (benchmarks are programs).
//! `--no-install` everywhere: a test never installs bubblewrap (the fence method's bwrap row is
//! then measured if bwrap is here, else skipped with that reason).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spawnkit"))
        .arg("bench")
        .args(args)
        .output()
        .expect("run spawnkit bench")
}

fn tmp(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("spawnkit-bench-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "spawnkit bench failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn ids(rows: &Value) -> Vec<String> {
    rows.as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_string()).collect()
}

const RUST_ROWS: [&str; 8] = [
    "fork_exec",
    "vfork_exec",
    "posix_spawnp",
    "system",
    "popen",
    "spawnkit_clone_vfork",
    "spawnkit_posix_spawn",
    "spawnkit_fork_exec",
];

#[test]
fn every_method_every_row_in_the_json_file() {
    let dir = tmp("all");
    let json = dir.join("bench.json");
    let out = bench(&[
        "all",
        "--runs",
        "4",
        "--totals",
        "6,12",
        "--iterations",
        "2",
        "--async-total",
        "8",
        "--no-python",
        "--no-install",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    let v = read_json(&json);

    // Server and async: run by `all` too (checked in detail below).
    assert_eq!(ids(&v["server"]["latency"]["rows"]), SERVER_LAT_ROWS);
    assert_eq!(ids(&v["async"]["rows"]), ASYNC_ROWS);
    // Mp: run by `all` too, every row skipped with --no-python, the ratio keys there.
    assert_eq!(ids(&v["mp"]["rows"]), MP_ROWS);
    for row in v["mp"]["rows"].as_array().unwrap() {
        assert_eq!(row["skipped"], "--no-python", "{row}");
    }
    for key in MP_RATIOS {
        assert!(v["ratios"][key]["0"].is_null() && v["ratios"][key]["1GiB-touched"].is_null());
    }

    // Fence: every row, measured or skipped (checked in detail below).
    assert_eq!(ids(&v["fence"]["rows"]), FENCE_ROWS);

    // Worker: run by `all` too; the farm rows skipped with --no-python, the fence rows (no
    // farm needed) measured or skipped with a reason.
    assert_eq!(ids(&v["worker"]["rows"]), WORKER_FARM_ROWS);
    for row in v["worker"]["rows"].as_array().unwrap() {
        assert_eq!(row["skipped"], "--no-python", "{row}");
    }
    check_worker_fence(&v, 4);

    // Latency: every row, every parent size, positive minimum <= median.
    let lat = &v["latency"]["rows"];
    let mut want: Vec<String> = RUST_ROWS.iter().map(|s| s.to_string()).collect();
    want.extend(["py_subprocess".to_string(), "py_spawnkit_subprocess".to_string()]);
    assert_eq!(ids(lat), want);
    for row in lat.as_array().unwrap() {
        if row["kind"] == "python" {
            assert_eq!(row["skipped"], "--no-python", "{row}");
            continue;
        }
        assert!(row["skipped"].is_null(), "{row}");
        for size in ["0", "1GiB", "1GiB-touched"] {
            let s = &row["sizes"][size];
            let (min, median) = (s["min_us"].as_f64().unwrap(), s["median_us"].as_f64().unwrap());
            assert!(min > 0.0 && min <= median, "{} at {size}: {s}", row["id"]);
            assert!(s["runs"].as_u64().unwrap() >= 1);
        }
    }

    // Throughput: the rows that can keep several children alive, one point per total.
    let tp = &v["throughput"]["rows"];
    let concurrent: Vec<String> = RUST_ROWS
        .iter()
        .filter(|r| !["system", "popen"].contains(r))
        .map(|s| s.to_string())
        .collect();
    assert_eq!(ids(tp), concurrent);
    for row in tp.as_array().unwrap() {
        let totals: Vec<u64> = row["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["total"].as_u64().unwrap())
            .collect();
        assert_eq!(totals, [6, 12], "{row}");
        for p in row["points"].as_array().unwrap() {
            assert!(p["mean_per_s"].as_f64().unwrap() > 0.0, "{p}");
            assert!(p["stddev_per_s"].as_f64().unwrap() >= 0.0, "{p}");
        }
    }

    // CPU: every row; popen only captured; everything relative to vfork+exec.
    let cpu = &v["cpu"]["rows"];
    assert_eq!(ids(cpu), RUST_ROWS);
    for row in cpu.as_array().unwrap() {
        for mode in ["plain", "captured"] {
            let cell = &row[mode];
            if row["id"] == "popen" && mode == "plain" {
                assert!(cell.is_null());
                continue;
            }
            assert!(cell["total_us"].as_f64().unwrap() > 0.0, "{row}");
            assert!(cell["slower_than_vfork_pct"].as_f64().is_some(), "{row}");
        }
    }

    // The ratios: every key, both parent sizes; positive where both rows ran.
    let ratios = &v["ratios"];
    for key in ["spawnkit/vfork", "spawnkit/posix_spawn", "spawnkit.subprocess/subprocess"] {
        for size in ["0", "1GiB-touched"] {
            let r = &ratios[key][size];
            if key.starts_with("spawnkit.subprocess") {
                assert!(r.is_null(), "{key} {size}: the Python rows were skipped: {r}");
            } else {
                assert!(r.as_f64().unwrap() > 0.0, "{key} {size}: {r}");
            }
        }
    }
    assert_eq!(v["machine"]["cores"].as_u64().unwrap() as usize, cores());

    // The table ends with the three ratio lines.
    let last: Vec<&str> = stdout.lines().rev().take(3).collect();
    assert!(last[2].trim_start().starts_with("spawnkit/vfork"), "{stdout}");
    assert!(last[1].trim_start().starts_with("spawnkit/posix_spawn"), "{stdout}");
    assert!(last[0].trim_start().starts_with("spawnkit.subprocess/subprocess"), "{stdout}");
    for name in ["fork+exec", "vfork+exec", "glibc posix_spawnp", "system()", "popen()"] {
        assert!(stdout.contains(name), "{name} missing from the table:\n{stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[test]
fn plots_are_png_and_svg() {
    let dir = tmp("plot");
    let out = bench(&[
        "all",
        "--runs",
        "3",
        "--sizes",
        "0,1GiB",
        "--totals",
        "4,8",
        "--iterations",
        "2",
        "--async-total",
        "8",
        "--no-python",
        "--no-install",
        "--plot",
        dir.to_str().unwrap(),
    ]);
    ok(&out);
    for chart in ["latency", "throughput", "cpu", "fence"] {
        let png = std::fs::read(dir.join(format!("{chart}.png"))).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{chart}.png is not a PNG");
        assert!(png.len() > 10_000, "{chart}.png is suspiciously small: {} bytes", png.len());
        let svg = std::fs::read_to_string(dir.join(format!("{chart}.svg"))).unwrap();
        assert!(svg.contains("<svg") && svg.contains("<text"), "{chart}.svg has no text");
    }
    let svg = std::fs::read_to_string(dir.join("latency.svg")).unwrap();
    assert!(svg.contains("vfork+exec") && svg.contains("spawnkit clone-vfork"), "row names");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Python rows run in a Python process started by the bench; without the spawnkit
/// package the spawnkit.subprocess row is skipped with a reason, never silently dropped.
#[test]
fn python_rows_measured_or_skipped_with_a_reason() {
    let Ok(py) = Command::new("python3").arg("-c").arg("import sys").status() else {
        eprintln!("no python3 here: nothing to check");
        return;
    };
    assert!(py.success());
    let dir = tmp("python");
    let json = dir.join("bench.json");
    let out = bench(&[
        "latency",
        "--runs",
        "3",
        "--sizes",
        "0",
        "--rows",
        "vfork_exec,spawnkit_clone_vfork",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    let v = read_json(&json);
    let rows = v["latency"]["rows"].as_array().unwrap();
    let cpython = rows.iter().find(|r| r["id"] == "py_subprocess").unwrap();
    assert!(cpython["sizes"]["0"]["min_us"].as_f64().unwrap() > 0.0, "{cpython}");
    let sk = rows.iter().find(|r| r["id"] == "py_spawnkit_subprocess").unwrap();
    match sk["skipped"].as_str() {
        Some(why) => {
            assert!(why.contains("not installed"), "{why}");
            assert!(stdout.contains("spawnkit.subprocess.Popen skipped"), "{stdout}");
            assert!(v["ratios"]["spawnkit.subprocess/subprocess"]["0"].is_null());
        }
        None => {
            assert!(sk["sizes"]["0"]["min_us"].as_f64().unwrap() > 0.0, "{sk}");
            assert!(v["ratios"]["spawnkit.subprocess/subprocess"]["0"].as_f64().unwrap() > 0.0);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

const FENCE_ROWS: [&str; 5] =
    ["spawnkit_plain", "vfork_exec_plain", "spawnkit_fence", "shell_unshare_mount_ip", "bwrap"];

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// The fence method: every row is measured or skipped with a reason (never estimated), fence
/// costs are taken against the row's own launcher without a fence, the chart is written, and
/// the summary line precedes nothing but the other methods' lines.
#[test]
fn fence_rows_measured_or_skipped_with_a_reason() {
    let dir = tmp("fence");
    let json = dir.join("bench.json");
    let out = bench(&[
        "fence",
        "--runs",
        "3",
        "--no-install",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        dir.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    let v = read_json(&json);
    let f = &v["fence"];
    assert_eq!(f["unit"], "µs");
    assert_eq!(f["runs"], 3);
    assert_eq!(ids(&f["rows"]), FENCE_ROWS);
    let rows = f["rows"].as_array().unwrap();
    let by_id = |id: &str| rows.iter().find(|r| r["id"] == id).unwrap();
    for row in rows {
        let id = row["id"].as_str().unwrap();
        assert!(row["command"].as_str().is_some_and(|c| !c.is_empty()), "{row}");
        if let Some(why) = row["skipped"].as_str() {
            assert!(!why.is_empty(), "{id}: an empty reason");
            assert!(row["min_us"].is_null() && row["fence_cost_min_us"].is_null(), "{row}");
            assert!(stdout.contains(&format!("skipped: {}", &why[..why.len().min(40)])), "{why}");
            continue;
        }
        let (min, median) = (row["min_us"].as_f64().unwrap(), row["median_us"].as_f64().unwrap());
        assert!(min > 0.0 && min <= median, "{row}");
        assert_eq!(row["runs"], 3, "{row}");
        match row["base"].as_str() {
            None => assert!(row["fence_cost_min_us"].is_null(), "{row}"),
            Some(base) => {
                let b = by_id(base);
                assert!(b["base"].is_null(), "{id}: its base {base} has a base itself");
                let cost = row["fence_cost_min_us"].as_f64().unwrap();
                assert!((cost - (min - b["min_us"].as_f64().unwrap())).abs() < 1e-6, "{row}");
                let cost = row["fence_cost_median_us"].as_f64().unwrap();
                assert!((cost - (median - b["median_us"].as_f64().unwrap())).abs() < 1e-6);
            }
        }
    }
    assert!(rows.iter().all(|r| r["previous"].is_null()), "no steps without --steps");
    // The bases are plain spawns: they always run. The fenced rows name their base.
    for id in ["spawnkit_plain", "vfork_exec_plain"] {
        assert!(by_id(id)["skipped"].is_null(), "{}", by_id(id));
    }
    assert_eq!(by_id("spawnkit_fence")["base"], "spawnkit_plain");
    assert_eq!(by_id("shell_unshare_mount_ip")["base"], "vfork_exec_plain");
    assert_eq!(by_id("bwrap")["base"], "vfork_exec_plain");
    if !on_path("bwrap") {
        assert!(by_id("bwrap")["skipped"].as_str().unwrap().contains("--no-install"));
    }
    if by_id("spawnkit_fence")["skipped"].is_null() {
        assert!(stdout.contains("fence cost (minimum, µs): spawnkit "), "{stdout}");
    }
    // Only this method ran.
    assert!(v["latency"]["rows"].as_array().unwrap().is_empty());
    assert!(v["cpu"]["rows"].as_array().unwrap().is_empty());
    let png = std::fs::read(dir.join("fence.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "fence.png is not a PNG");
    let svg = std::fs::read_to_string(dir.join("fence.svg")).unwrap();
    assert!(svg.contains("spawnkit clone-vfork, no fence"), "the chart names the rows");
    if by_id("spawnkit_fence")["skipped"].is_null() {
        assert!(svg.contains("spawnkit, fence in one spawn"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--steps`: each fence built one piece at a time; every step names the one it adds to, and
/// what it adds is the difference of the two rows.
#[test]
fn fence_steps_add_up() {
    let dir = tmp("fence-steps");
    let json = dir.join("bench.json");
    let out = bench(&[
        "fence",
        "--steps",
        "--runs",
        "2",
        "--no-install",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    assert!(stdout.contains("== Fence, step by step"), "{stdout}");
    let v = read_json(&json);
    assert_eq!(v["fence"]["steps"], true);
    let rows = v["fence"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 13);
    for id in FENCE_ROWS {
        assert!(rows.iter().any(|r| r["id"] == id), "{id} missing");
    }
    let by_id = |id: &str| rows.iter().find(|r| r["id"] == id).unwrap();
    // Each chain starts at its launcher without a fence and ends at the method's row.
    for (end, start) in [
        ("spawnkit_fence", "spawnkit_plain"),
        ("shell_unshare_mount_ip", "vfork_exec_plain"),
        ("bwrap", "vfork_exec_plain"),
    ] {
        let mut id = end.to_string();
        let mut hops = 0;
        while let Some(prev) = by_id(&id)["previous"].as_str() {
            let (row, p) = (by_id(&id), by_id(prev));
            if let (Some(a), Some(b)) = (row["min_us"].as_f64(), p["min_us"].as_f64()) {
                assert!((row["added_min_us"].as_f64().unwrap() - (a - b)).abs() < 1e-6, "{row}");
            } else {
                assert!(row["added_min_us"].is_null(), "{row}");
            }
            id = prev.to_string();
            hops += 1;
        }
        assert_eq!(id, start, "{end}'s steps");
        assert!(hops >= 3, "{end}: {hops} steps");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A chain whose tools are missing is skipped with the tool's name, and the bwrap row says it
/// was not installed; the rest still runs. (PATH holds only sh, unshare and mount here.)
#[test]
fn fence_rows_without_their_tools_are_skipped_by_name() {
    let dir = tmp("fence-path");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["sh", "unshare", "mount"] {
        let Some(found) = std::env::var_os("PATH")
            .and_then(|p| std::env::split_paths(&p).map(|d| d.join(tool)).find(|p| p.is_file()))
        else {
            eprintln!("no {tool} here: nothing to check");
            return;
        };
        std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
    }
    let json = dir.join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_spawnkit"))
        .args(["bench", "fence", "--runs", "2", "--no-install", "--json"])
        .arg(&json)
        .env("PATH", &bin)
        .output()
        .expect("run spawnkit bench");
    let stdout = ok(&out);
    let v = read_json(&json);
    let rows = v["fence"]["rows"].as_array().unwrap();
    let skipped = |id: &str| {
        rows.iter().find(|r| r["id"] == id).unwrap()["skipped"].as_str().map(String::from)
    };
    assert_eq!(skipped("shell_unshare_mount_ip").as_deref(), Some("ip not found in PATH"));
    assert_eq!(skipped("bwrap").as_deref(), Some("bwrap not found in PATH (--no-install)"));
    assert_eq!(skipped("spawnkit_plain"), None);
    assert_eq!(skipped("vfork_exec_plain"), None);
    assert!(
        stdout.contains("note: fence: bubblewrap (bwrap) skipped: bwrap not found"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under `cargo run` the bench drops the directories cargo put in LD_LIBRARY_PATH (they slow
/// down the dynamically linked programs some rows start), keeps the others, and says so.
#[test]
fn cargos_library_path_is_dropped_and_the_rest_kept() {
    let exe = Path::new(env!("CARGO_BIN_EXE_spawnkit"));
    let target = exe.parent().unwrap().parent().unwrap();
    let lib = format!("{}:/opt/not-cargos/lib", target.join("release/deps").display());
    let args = ["bench", "latency", "--sizes", "0", "--rows", "vfork_exec", "--runs", "1"];
    let run = |cargo: bool| {
        let mut cmd = Command::new(exe);
        cmd.args(args).arg("--no-python").env("LD_LIBRARY_PATH", &lib);
        if cargo {
            cmd.env("CARGO", "cargo");
        } else {
            cmd.env_remove("CARGO");
        }
        ok(&cmd.output().expect("run spawnkit bench"))
    };
    let stdout = run(true);
    assert!(
        stdout.contains("note: LD_LIBRARY_PATH: dropped 1 of its 2 entries, cargo's"),
        "{stdout}"
    );
    assert!(!run(false).contains("LD_LIBRARY_PATH"), "not run by cargo: left alone");
}

#[test]
fn bad_options_are_usage_errors() {
    for args in [&["--runs", "0"][..], &["--sizes", "2GiB"], &["--rows", "nope"], &["nope"]] {
        let out = bench(args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}: no message");
    }
}

/// `bench ps`: every row, in order, each measured (and listing at least the herd before it was
/// timed) or skipped with its reason; the ratios and the chart are there.
#[test]
fn ps_rows_measured_or_skipped_with_a_reason() {
    let dir = tmp("ps");
    let json = dir.join("bench.json");
    let plots = dir.join("plots");
    let herd = 40;
    let out = bench(&[
        "ps",
        "--procs",
        &herd.to_string(),
        "--no-python",
        "--no-install",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        plots.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    assert!(stdout.contains("5. Process table and memory: 40 sleeping processes"), "{stdout}");
    let v = read_json(&json);
    let ps = &v["ps"];
    assert_eq!(ps["herd"], herd);
    let rows = &ps["rows"];
    assert_eq!(
        ids(rows),
        [
            "ps_spawnkit_bpf",
            "ps_spawnkit_procfs",
            "ps_procps",
            "py_psutil",
            "py_spawnkit_ps",
            "mem_spawnkit_all",
            "mem_spawnkit_shared",
            "mem_smem",
        ]
    );
    let by_id = |id: &str| rows.as_array().unwrap().iter().find(|r| r["id"] == id).unwrap();
    let measured = |id: &str| {
        let r = by_id(id);
        assert!(r["skipped"].is_null(), "{r}");
        let (min, median) = (r["min_ms"].as_f64().unwrap(), r["median_ms"].as_f64().unwrap());
        assert!(min > 0.0 && min <= median, "{r}");
        if id != "mem_spawnkit_shared" {
            assert!(r["listed"].as_u64().unwrap() >= herd, "{r}");
        }
    };
    measured("ps_spawnkit_procfs");
    measured("mem_spawnkit_all");
    measured("mem_spawnkit_shared");
    // BPF must run where the test command says it can (it installs clang, runs as root);
    // elsewhere it may be skipped, but only with the reason.
    let require_bpf = std::env::var_os("SPAWNKIT_REQUIRE_BPF").is_some_and(|v| v == "1");
    match by_id("ps_spawnkit_bpf")["skipped"].as_str() {
        Some(why) if !require_bpf => assert!(why.contains("BPF") || why.contains("bpf"), "{why}"),
        _ => measured("ps_spawnkit_bpf"),
    }
    if on_path("ps") {
        measured("ps_procps");
    }
    if on_path("smem") {
        measured("mem_smem");
    } else {
        assert!(by_id("mem_smem")["skipped"].as_str().unwrap().contains("--no-install"));
    }
    for id in ["py_psutil", "py_spawnkit_ps"] {
        assert_eq!(by_id(id)["skipped"], "--no-python");
    }
    let ratios = &ps["ratios"];
    assert!(ratios["ps_spawnkit_procfs/ps_procps"]["target"].as_f64().is_some(), "{ratios}");
    // The shared-memory fixture: one region holding what the exited children wrote, mapped
    // by the fixture alone (reading its size needs root: map_files).
    let shm = &ps["shm_fixture"];
    assert_eq!(shm["regions"], 1, "{shm}");
    assert_eq!(shm["only_mapper"], true, "{shm}");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(shm["resident_bytes"], 100 << 20, "{shm}");
    }
    assert!(
        stdout.contains("shared regions ÷ Shmem growth (fixture)")
            || !shm["difference_pct"].is_f64()
    );
    for f in ["ps.png", "ps.svg"] {
        assert!(plots.join(f).metadata().unwrap().len() > 1000, "{f}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

const SERVER_ROWS: [&str; 3] = ["vfork_exec", "spawnkit_local", "spawnkit_server"];
/// The latency rows: the server rows and the design floor (bench/floor_server.c).
const SERVER_LAT_ROWS: [&str; 4] =
    ["vfork_exec", "spawnkit_local", "spawnkit_server", "floor_pooled_server"];
const SERVER_RATIOS: [&str; 5] = [
    "server/vfork",
    "server_caller_cpu/vfork_cpu",
    "server_throughput_1thread/vfork_throughput",
    "py_server/py_local",
    "py_server_cpu/py_local_cpu",
];
const ASYNC_ROWS: [&str; 10] = [
    "tokio_process",
    "spawnkit_tokio",
    "spawnkit_tokio_start",
    "spawnkit_tokio_server",
    "floor_vfork",
    "floor_engine",
    "asyncio",
    "asyncio_pidfd",
    "asyncio_spawnkit",
    "asyncio_spawnkit_server",
];

/// `spawnkit bench server` (a smoke run: a few spawns per row): every Rust row measured at
/// both parent sizes, every ratio key there at "0" and "1GiB-touched"; the Python rows measured
/// where the project's venv has the package, their ratios null otherwise.
#[test]
fn server_method_rows_and_ratios() {
    let dir = tmp("server");
    let json = dir.join("bench.json");
    let out =
        bench(&["server", "--runs", "6", "--iterations", "1", "--json", json.to_str().unwrap()]);
    let stdout = ok(&out);
    let v = read_json(&json);
    let sv = &v["server"];
    let lat = sv["latency"]["rows"].as_array().unwrap();
    let rust: Vec<&Value> = lat.iter().filter(|r| r["kind"] != "python").collect();
    let ids: Vec<&str> = rust.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, SERVER_LAT_ROWS);
    for section in ["caller_cpu", "throughput"] {
        let rows = &sv[section]["rows"];
        for id in SERVER_ROWS {
            let row = rows.as_array().unwrap().iter().find(|r| r["id"] == id).unwrap();
            for size in ["0", "1GiB-touched"] {
                assert!(row["sizes"][size].as_f64().unwrap() > 0.0, "{section} {row}");
            }
        }
    }
    for row in rust {
        for size in ["0", "1GiB-touched"] {
            let s = &row["sizes"][size];
            let (min, median) = (s["min_us"].as_f64().unwrap(), s["median_us"].as_f64().unwrap());
            assert!(min > 0.0 && min <= median, "{} at {size}: {s}", row["id"]);
        }
    }
    let py_measured = lat.iter().any(|r| r["id"] == "py_server" && r["skipped"].is_null());
    for key in SERVER_RATIOS {
        for size in ["0", "1GiB-touched"] {
            let r = &v["ratios"][key][size];
            if key.starts_with("py_") && !py_measured {
                assert!(r.is_null(), "{key} {size}: {r}");
            } else {
                assert!(r.as_f64().unwrap() > 0.0, "{key} {size}: {r}\n{stdout}");
            }
        }
    }
    // The floor under the Python CPU ratio: the local Popen's CPU without its spawn call
    // (a row of its own, measured in the same blocks) plus a round trip, over the whole:
    // the ratio is that sum of the rows beside it. (Its value is left free: a smoke run of
    // six on a loaded machine can put the call's CPU above the whole's.)
    let floor = "floor: (py_local_cpu - its spawn call + socket round trip cpu)/py_local_cpu";
    if py_measured {
        let cpu_rows = sv["caller_cpu"]["rows"].as_array().unwrap();
        let cpu = |id: &str, size: &str| {
            let row = cpu_rows.iter().find(|r| r["id"] == id).expect(id);
            let c = row["sizes"][size].as_f64().unwrap();
            assert!(c > 0.0, "{row}");
            c
        };
        for size in ["0", "1GiB-touched"] {
            let (all, call) = (cpu("py_local", size), cpu("py_spawn_call", size));
            let rt = sv["floor_socket_round_trip"]["sizes"][size]["caller_cpu_us"].as_f64();
            let rt = rt.unwrap();
            assert!(rt > 0.0, "{}", sv["floor_socket_round_trip"]);
            let f = v["other_ratios"][floor][size].as_f64().unwrap();
            let want = (all - call + rt) / all;
            assert!((f - want).abs() <= 1e-9 * want.abs().max(1.0), "{floor} at {size}: {f}");
        }
    }
    // The caller's CPU ratio is the status requests' row (spawn + wait through the API
    // made for it) over vfork+exec's; the same through Child handles is beside it.
    let cpu_rows = sv["caller_cpu"]["rows"].as_array().unwrap();
    let cpu = |id: &str, size: &str| {
        let row = cpu_rows.iter().find(|r| r["id"] == id).expect(id);
        row["sizes"][size].as_f64().unwrap()
    };
    for size in ["0", "1GiB-touched"] {
        for (key, num, ratios) in [
            ("server_caller_cpu/vfork_cpu", "spawnkit_server_status", "ratios"),
            ("server_caller_cpu_children/vfork_cpu", "spawnkit_server", "other_ratios"),
        ] {
            let want = cpu(num, size) / cpu("vfork_exec", size);
            let got = v[ratios][key][size].as_f64().unwrap();
            assert!(cpu(num, size) > 0.0 && (got - want).abs() <= 1e-9, "{key} at {size}: {got}");
        }
    }
    // server/vfork in its two factors, each the ratio of the latency rows' minimums.
    let lat_min = |id: &str, size: &str| {
        let row = lat.iter().find(|r| r["id"] == id).expect(id);
        row["sizes"][size]["min_us"].as_f64().unwrap()
    };
    for size in ["0", "1GiB-touched"] {
        for (key, num, den) in [
            ("latency: server/local", "spawnkit_server", "spawnkit_local"),
            ("latency: local/vfork", "spawnkit_local", "vfork_exec"),
        ] {
            let want = lat_min(num, size) / lat_min(den, size);
            let got = v["other_ratios"][key][size].as_f64().unwrap();
            assert!((got - want).abs() <= 1e-9 * want, "{key} at {size}: {got}, rows: {want}");
        }
        let product = ["latency: server/local", "latency: local/vfork"]
            .iter()
            .map(|k| v["other_ratios"][*k][size].as_f64().unwrap())
            .product::<f64>();
        let whole = v["ratios"]["server/vfork"][size].as_f64().unwrap();
        assert!((product - whole).abs() <= 1e-9 * whole, "{product} against {whole}");
        // The design floor: its row over vfork+exec's, alone and plus the environment copy
        // timed alone (floor_env_copy).
        let floor = lat_min("floor_pooled_server", size) / lat_min("vfork_exec", size);
        let got = v["other_ratios"]["floor: minimal pooled server/vfork"][size].as_f64().unwrap();
        assert!((got - floor).abs() <= 1e-9 * floor, "pooled floor at {size}: {got}, {floor}");
        let env = sv["floor_env_copy"]["sizes"][size]["min_us"].as_f64().unwrap();
        assert!(env > 0.0, "{}", sv["floor_env_copy"]);
        let want = (lat_min("floor_pooled_server", size) + env) / lat_min("vfork_exec", size);
        let key = "floor: (minimal pooled server + Rust's environment copy)/vfork";
        let got = v["other_ratios"][key][size].as_f64().unwrap();
        assert!((got - want).abs() <= 1e-9 * want, "{key} at {size}: {got}, {want}");
        // The design floor's throughput (16 in flight, as the server's) over vfork+exec's.
        let tp_rows = sv["throughput"]["rows"].as_array().unwrap();
        let tp = |id: &str| {
            let row = tp_rows.iter().find(|r| r["id"] == id).expect(id);
            row["sizes"][size].as_f64().unwrap()
        };
        for (key, id) in [
            // Spawn + wait through status requests (the main ratio), and through Children.
            ("server_throughput_children/vfork_throughput", "spawnkit_server"),
            ("floor: minimal pooled server throughput/vfork_throughput", "floor_pooled_server"),
            // And the machine's ceiling: two vfork+exec loops at once, no messaging.
            ("ceiling: two vfork loops throughput/vfork_throughput", "ceiling_two_vfork_loops"),
        ] {
            let want = tp(id) / tp("vfork_exec");
            let got = v["other_ratios"][key][size].as_f64().unwrap();
            assert!(want > 0.0 && (got - want).abs() <= 1e-9 * want, "{key} at {size}: {got}");
        }
        let want = tp("spawnkit_server_status") / tp("vfork_exec");
        let key = "server_throughput_1thread/vfork_throughput";
        let got = v["ratios"][key][size].as_f64().unwrap();
        assert!(want > 0.0 && (got - want).abs() <= 1e-9 * want, "{key} at {size}: {got}");
    }
    assert!(stdout.contains("ceiling: two vfork+exec loops at once"), "{stdout}");
    assert!(stdout.contains("spawnkit server, status requests, 16 in flight"), "{stdout}");
    assert!(stdout.contains("floor: minimal pooled C server, 16 in flight"), "{stdout}");
    assert!(stdout.contains("floor: minimal pooled server in C"), "{stdout}");
    assert!(stdout.contains("spawnkit private server, status, 16 per message"), "{stdout}");
    assert!(stdout.contains("spawnkit private server"), "{stdout}");
    // The round trip held to one CPU and to two, where the machine has two: measured at
    // both sizes, its ratios in other_ratios.
    if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
        let pinned = &sv["floor_socket_round_trip_pinned"];
        for size in ["0", "1GiB-touched"] {
            for which in ["same_cpu", "across_cpus"] {
                let r = &pinned["sizes"][size][which];
                assert_eq!(r["runs"].as_u64(), Some(6), "{pinned}");
                assert!(r["min_us"].as_f64().unwrap() > 0.0, "{pinned}");
                assert!(r["caller_cpu_us"].as_f64().unwrap() >= 0.0, "{pinned}");
            }
            for key in [
                "floor: (cross-CPU round trip + vfork)/vfork",
                "floor: cross-CPU round trip cpu/vfork_cpu",
            ] {
                assert!(v["other_ratios"][key][size].as_f64().unwrap() > 0.0, "{key}");
            }
            // The batch floor reads exit statuses from pidfds: Linux 6.15+ only.
            if spawnkit::serve::kernel_has_pidfd_exit_info() {
                let batch = sv["floor_batch_kernel"]["sizes"][size].as_f64().unwrap();
                assert!(batch > 0.0, "{}", sv["floor_batch_kernel"]);
                let key = "floor: 16 per message, the kernel's part cpu/vfork_cpu";
                assert!(v["other_ratios"][key][size].as_f64().unwrap() > 0.0, "{key}");
            }
        }
        let cpus = pinned["cpus"].as_array().unwrap();
        assert_ne!(cpus[0], cpus[1], "{pinned}");
    }
    // A connection's cost: connect(2) alone and with the authentication, each measured as
    // often as a latency row, the caller's and the server thread's CPU beside them, and the
    // authentication held against its target.
    let conn = &sv["connection"];
    for row in ["connect", "auth"] {
        let r = &conn[row];
        assert_eq!(r["runs"].as_u64(), Some(6), "{conn}");
        let (min, median) = (r["min_us"].as_f64().unwrap(), r["median_us"].as_f64().unwrap());
        assert!(min > 0.0 && min <= median, "{row}: {r}");
        assert!(r["caller_cpu_us"].as_f64().unwrap() >= 0.0, "{row}: {r}");
        assert!(r["server_cpu_us"].as_f64().unwrap() > 0.0, "{row}: {r}");
    }
    assert_eq!(conn["auth_target_us"].as_f64(), Some(200.0), "{conn}");
    assert_eq!(
        conn["auth_within_target"].as_bool(),
        Some(conn["auth"]["median_us"].as_f64().unwrap() <= 200.0),
        "{conn}"
    );
    assert!(stdout.contains("authentication per connection"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `spawnkit bench async` (a smoke run: 16 processes per row): the tokio rows measured with
/// both programs (through a private server too), the floor rows with no loop (no stall, no
/// thread count: null), the ratios there.
#[test]
fn async_method_rows_and_ratios() {
    let dir = tmp("async");
    let json = dir.join("bench.json");
    let out = bench(&[
        "async",
        "--async-total",
        "16",
        "--iterations",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    let v = read_json(&json);
    let rows = v["async"]["rows"].as_array().unwrap();
    assert_eq!(ids(&v["async"]["rows"]), ASYNC_ROWS);
    for row in rows {
        if row["kind"] == "asyncio" && !row["skipped"].is_null() {
            continue; // no Python here, or no package: said in the notes
        }
        for prog in ["tiny", "bin_true"] {
            let c = &row[prog];
            assert!(c["per_s"].as_f64().unwrap() > 0.0, "{row}");
            if row["kind"] == "floor" {
                assert!(c["longest_stall_ms"].is_null() && c["threads_created"].is_null());
                continue;
            }
            assert!(c["longest_stall_ms"].as_f64().unwrap() >= 0.0, "{row}");
            assert!(c["threads_created"].as_i64().is_some(), "{row}");
        }
    }
    assert!(v["ratios"]["async_spawnkit/tokio"].as_f64().unwrap() > 0.0, "{stdout}");
    assert!(v["ratios"].get("asyncio_spawnkit/asyncio").is_some(), "{stdout}");
    assert!(stdout.contains("spawnkit tokio face, server"), "{stdout}");
    let other = &v["other_ratios"];
    assert!(other["async_spawnkit_server/tokio"].as_f64().unwrap() > 0.0, "{v}");
    for key in ["async_floor_vfork/tokio", "async_floor_engine/tokio"] {
        assert!(other[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
    assert!(stdout.contains("floor: engine spawn + pidfd epoll"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

const MP_ROWS: [&str; 4] = ["fork", "forkserver", "spawn", "spawnkit"];
const MP_RATIOS: [&str; 2] = ["mp_spawnkit/mp_fork", "mp_spawnkit/mp_forkserver"];

/// `spawnkit bench mp` (a smoke run: totals 4 and 8, one iteration): every start method a row,
/// measured at both parent sizes for each total with a first Pool.map time, or skipped with a
/// reason (no Python here; the spawnkit row without the package); the ratio keys there at "0"
/// and "1GiB-touched", numbers when the spawnkit row was measured, null otherwise.
#[test]
fn mp_method_rows_and_ratios() {
    let dir = tmp("mp");
    let json = dir.join("bench.json");
    let out =
        bench(&["mp", "--totals", "4,8", "--iterations", "1", "--json", json.to_str().unwrap()]);
    let stdout = ok(&out);
    let v = read_json(&json);
    let mp = &v["mp"];
    assert_eq!(ids(&mp["rows"]), MP_ROWS);
    assert_eq!(mp["ratio_total"], 8, "{mp}");
    let mut measured = Vec::new();
    for row in mp["rows"].as_array().unwrap() {
        if let Some(why) = row["skipped"].as_str() {
            assert!(!why.is_empty(), "{row}");
            assert!(stdout.contains(&format!("mp: {} skipped", row["id"].as_str().unwrap())));
            continue;
        }
        measured.push(row["id"].as_str().unwrap().to_string());
        for size in ["0", "1GiB-touched"] {
            let points = row["per_s"][size].as_array().unwrap();
            let totals: Vec<u64> = points.iter().map(|p| p["total"].as_u64().unwrap()).collect();
            assert_eq!(totals, [4, 8], "{row}");
            for p in points {
                assert!(p["mean"].as_f64().unwrap() > 0.0, "{row}");
                assert!(p["sd"].as_f64().unwrap() >= 0.0, "{row}");
            }
            assert!(row["first_map_s"][size].as_f64().unwrap() > 0.0, "{row}");
        }
    }
    if !measured.is_empty() {
        // Python ran: the three CPython start methods are always there.
        assert!(measured.len() >= 3, "{measured:?}");
        assert!(stdout.contains("== Multiprocessing start methods"), "{stdout}");
    }
    let spawnkit_measured = measured.iter().any(|m| m == "spawnkit");
    for key in MP_RATIOS {
        for size in ["0", "1GiB-touched"] {
            let r = &v["ratios"][key][size];
            if spawnkit_measured {
                assert!(r.as_f64().unwrap() > 0.0, "{key} {size}: {r}\n{stdout}");
            } else {
                assert!(r.is_null(), "{key} {size}: {r}");
            }
        }
    }
    assert!(stdout.contains("multiprocessing ratios"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

const WORKER_FARM_ROWS: [&str; 7] = [
    "fenced_true",
    "fenced_10_files",
    "unfenced_true",
    "unfenced_10_files",
    "fenced_true_one_at_a_time",
    "split_cas_fenced_true",
    "split_cas_fenced_true_one_at_a_time",
];
const WORKER_FENCE_ROWS: [&str; 3] = ["spawnkit_no_fence", "spawnkit_worker_fence", "bwrap"];

/// The worker method's fence rows: measured (min ≤ median ≤ p90, the price = the row minus the
/// unfenced one) or skipped with a reason; the ratio keys there, a number when both ran.
fn check_worker_fence(v: &Value, runs: u64) {
    let f = &v["worker"]["fence"];
    assert_eq!(ids(&f["rows"]), WORKER_FENCE_ROWS);
    let rows = f["rows"].as_array().unwrap();
    let base = &rows[0];
    assert!(base["skipped"].is_null(), "a plain spawn always runs: {base}");
    let mut measured = 0;
    for row in rows {
        assert!(row["command"].as_str().is_some_and(|c| !c.is_empty()), "{row}");
        if let Some(why) = row["skipped"].as_str() {
            assert!(!why.is_empty(), "{row}");
            assert!(row["median_us"].is_null(), "{row}");
            continue;
        }
        let [min, median, p90] =
            ["min_us", "median_us", "p90_us"].map(|k| row[k].as_f64().unwrap());
        assert!(min > 0.0 && min <= median && median <= p90, "{row}");
        assert_eq!(row["runs"], runs, "{row}");
        if row["id"] != "spawnkit_no_fence" {
            measured += 1;
            let price = row["price_median_us"].as_f64().unwrap();
            assert!((price - (median - base["median_us"].as_f64().unwrap())).abs() < 1e-6);
        }
    }
    let ratio = &v["ratios"]["worker_fence/bwrap"];
    if measured == 2 {
        assert!(ratio.as_f64().is_some(), "{ratio}");
        assert!(v["other_ratios"]["worker_fenced_launch/bwrap_launch"].as_f64().unwrap() > 0.0);
    } else {
        assert!(ratio.is_null(), "{ratio}");
    }
}

/// `spawnkit bench worker` (a smoke run: 4 actions per farm row, 10 spawns per fence row): the
/// BuildGrid farm with two workers, fence on and off, every row measured (actions/s, the
/// worker's own time median ≤ p90, one own time per action); skipped, loudly, only where
/// BuildGrid or PostgreSQL cannot be installed (it installs them as tests/test_worker.py does).
#[test]
fn worker_method_rows_and_ratios() {
    let dir = tmp("worker");
    let json = dir.join("bench.json");
    let out =
        bench(&["worker", "--actions", "4", "--runs", "10", "--json", json.to_str().unwrap()]);
    let stdout = ok(&out);
    let v = read_json(&json);
    let w = &v["worker"];
    assert_eq!(w["actions"], 4, "{w}");
    assert_eq!(v["config"]["worker_actions"], 4);
    assert_eq!(ids(&w["rows"]), WORKER_FARM_ROWS);
    let mut farm_ran = false;
    for row in w["rows"].as_array().unwrap() {
        if let Some(why) = row["skipped"].as_str() {
            // Only a farm that cannot be had may skip (or a Python without the venv module).
            assert!(why.starts_with("BuildGrid/PostgreSQL unavailable:"), "{row}\n{stdout}");
            eprintln!(
                "\n{0}\nSKIPPING the farm rows of `spawnkit bench worker`: {why}\n{0}",
                "!".repeat(20)
            );
            continue;
        }
        let aps = row["actions_per_s"].as_f64().unwrap();
        let (p50, p90) =
            (row["own_ms_median"].as_f64().unwrap(), row["own_ms_p90"].as_f64().unwrap());
        assert!(aps > 0.0 && p50 > 0.0 && p50 <= p90, "{row}");
        // Attempts that failed (BuildGrid runs INTERNAL and UNAVAILABLE ones again) are
        // counted apart, so a retried action still has one own time.
        assert_eq!(row["own_us"]["count"], 4, "one own time per action: {row}");
        assert!(row["failed_attempts"].as_u64().is_some(), "{row}");
        assert!(row["worker_log"].is_array(), "{row}");
        assert!(row["phases_ms"]["execution"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["worker_cpu_ms_per_action"].as_f64().unwrap() >= 0.0, "{row}");
        // The own time without the waits on BuildGrid: at most the own time (the waits lie
        // inside it), and the floor that the action's server round trips put under it.
        let excl = row["own_excl_server_ms_median"].as_f64().unwrap();
        assert!(excl >= 0.0 && excl <= p90, "{row}");
        let wait = row["server_wait_ms_median"].as_f64().unwrap();
        assert!(wait > 0.0 && wait <= p90, "{row}");
        assert!(row["cas_calls_median"].as_f64().unwrap() >= 1.0, "{row}");
        // Its parts outside the action's task: lease received -> task running, result whole
        // -> report sent.
        for k in ["start_ms_median", "handoff_ms_median"] {
            let x = row[k].as_f64().unwrap();
            assert!(x >= 0.0 && x <= p90, "{k}: {row}");
        }
        assert!(row["floor_ms"].as_f64().unwrap() > 0.0, "{row}");
        let id = row["id"].as_str().unwrap();
        assert_eq!(row["split_cas"], id.starts_with("split_cas_"), "{row}");
        // The CAS probe beside a row with actions in flight: at least its first read.
        if id.ends_with("_one_at_a_time") {
            assert_eq!(row["cas_probe_calls"], 0, "{row}");
        } else {
            assert!(row["cas_probe_calls"].as_u64().unwrap() >= 1, "{row}");
            assert!(row["cas_probe_ms_median"].as_f64().unwrap() > 0.0, "{row}");
        }
        farm_ran = true;
    }
    if farm_ran {
        let f = &w["floor"];
        assert_eq!(f["calls"], 4, "{f}");
        for k in ["get_capabilities", "find_missing_blobs_empty", "batch_read_blobs_1"] {
            assert!(f["rtt_ms_median"][k].as_f64().unwrap() > 0.0, "{f}");
        }
        assert!(f["rtt_ms"].as_f64().unwrap() > 0.0, "{f}");
        let f = &w["split_cas_floor"];
        assert_eq!(f["calls"], 4, "{f}");
        assert!(f["rtt_ms"].as_f64().unwrap() > 0.0, "{f}");
        assert!(stdout.contains("   floor: one trivial round trip to this BuildGrid"), "{stdout}");
        assert!(stdout.contains("   floor: one trivial round trip to the CAS apart"), "{stdout}");
        assert!(stdout.contains("  excluding its waits on BuildGrid: "), "{stdout}");
    }
    check_worker_fence(&v, 10);
    assert!(stdout.contains("== Remote-execution worker"), "{stdout}");
    assert!(stdout.contains("worker's own time per fenced action, median:"), "{stdout}");
    assert!(stdout.contains("worker_fence/bwrap (the fence's price, median)"), "{stdout}");
    // Only this method ran.
    assert!(v["latency"]["rows"].as_array().unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--no-python --no-install`: the farm rows skipped with that reason; the fence rows (no farm
/// needed) still measured, bwrap's if it is here.
#[test]
fn worker_method_without_python_measures_the_fence() {
    let dir = tmp("worker-nopy");
    let json = dir.join("bench.json");
    let out = bench(&[
        "worker",
        "--runs",
        "6",
        "--no-python",
        "--no-install",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    let v = read_json(&json);
    assert_eq!(ids(&v["worker"]["rows"]), WORKER_FARM_ROWS);
    for row in v["worker"]["rows"].as_array().unwrap() {
        assert_eq!(row["skipped"], "--no-python", "{row}");
    }
    assert!(stdout.contains("worker: farm rows fenced_true, "), "{stdout}");
    check_worker_fence(&v, 6);
    if !on_path("bwrap") {
        let bw = &v["worker"]["fence"]["rows"][2];
        assert!(bw["skipped"].as_str().unwrap().contains("--no-install"), "{bw}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
