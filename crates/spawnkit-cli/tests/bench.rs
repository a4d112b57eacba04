//! `spawnkit bench`, driven through the real binary with tiny sizes: every row and method
//! shows up in the tables and the JSON file, the ratios are there, the charts are written.
//! No timing assertions: these machines are shared and noisy (benchmarks are programs).

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
        "--no-python",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    let v = read_json(&json);

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
        "--no-python",
        "--plot",
        dir.to_str().unwrap(),
    ]);
    ok(&out);
    for chart in ["latency", "throughput", "cpu"] {
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

#[test]
fn bad_options_are_usage_errors() {
    for args in [&["--runs", "0"][..], &["--sizes", "2GiB"], &["--rows", "nope"], &["nope"]] {
        let out = bench(args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}: no message");
    }
}
