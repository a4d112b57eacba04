//! Builds the BPF task iterator (bpf/task_iter.bpf.c) into OUT_DIR/task_iter.bpf.o with clang,
//! for src/task_iter.rs to embed.
//!
//! clang: `$CLANG` when set (and only that), else the first of `clang`, `clang-21` ...
//! `clang-14` on PATH that runs. Without a working clang the build still succeeds: it warns,
//! sets `cfg(spawnkit_no_bpf)` and passes the reason in `SPAWNKIT_NO_BPF_REASON`, and
//! `spawnkit ps` then reads /proc. scripts/test installs clang first, so the test suite always
//! has the program.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = "bpf/task_iter.bpf.c";
const HEADERS: &[&str] = &["bpf/kernel.h"];
const OBJECT: &str = "task_iter.bpf.o";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(spawnkit_no_bpf)");
    println!("cargo::rerun-if-env-changed=CLANG");
    println!("cargo::rerun-if-changed={SOURCE}");
    for h in HEADERS {
        println!("cargo::rerun-if-changed={h}");
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join(OBJECT);
    let dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    if let Err(why) = build(&dir, &out) {
        let why = why.replace(['\n', '\r'], " ");
        println!(
            "cargo::warning=no BPF program in this build ({why}): `spawnkit ps` will read /proc"
        );
        println!("cargo::rustc-cfg=spawnkit_no_bpf");
        println!("cargo::rustc-env=SPAWNKIT_NO_BPF_REASON={why}");
        // Build again once a clang appears: installing one changes a directory on PATH.
        println!("cargo::rerun-if-env-changed=PATH");
        if env::var_os("CLANG").is_none() {
            for dir in env::split_paths(&env::var_os("PATH").unwrap_or_default()) {
                if dir.is_absolute() && dir.is_dir() {
                    println!("cargo::rerun-if-changed={}", dir.display());
                }
            }
        }
    }
}

/// Compile SOURCE (under the package directory `dir`) into `out`, or say why not.
fn build(dir: &Path, out: &Path) -> Result<(), String> {
    let clang = find_clang()?;
    let target = match env::var("CARGO_CFG_TARGET_ENDIAN").as_deref() {
        Ok("big") => "bpfeb",
        _ => "bpfel",
    };
    let source = dir.join(SOURCE);
    let include = source.parent().unwrap_or(dir);
    let result = Command::new(&clang)
        .args(["-target", target, "-O2", "-g", "-Wall", "-c"])
        .arg(&source)
        .arg("-o")
        .arg(out)
        .arg("-I")
        .arg(include)
        .output()
        .map_err(|e| format!("running {clang}: {e}"))?;
    if !result.status.success() {
        let err = String::from_utf8_lossy(&result.stderr);
        let first = err.lines().find(|l| l.contains("error")).unwrap_or("no message");
        return Err(format!("{clang} failed to compile {SOURCE}: {first}"));
    }
    Ok(())
}

/// The clang to use: `$CLANG`, else the first candidate on PATH that answers `--version`.
fn find_clang() -> Result<String, String> {
    if let Some(c) = env::var_os("CLANG").filter(|c| !c.is_empty()) {
        let c = c.to_string_lossy().into_owned();
        return if runs(&c) { Ok(c) } else { Err(format!("CLANG={c} does not run")) };
    }
    let mut candidates = vec!["clang".to_string()];
    candidates.extend((14..=21).rev().map(|v| format!("clang-{v}")));
    candidates
        .into_iter()
        .find(|c| runs(c))
        .ok_or_else(|| "clang was not found at build time (set CLANG or install clang)".to_string())
}

fn runs(clang: &str) -> bool {
    Command::new(clang).arg("--version").output().is_ok_and(|o| o.status.success())
}
