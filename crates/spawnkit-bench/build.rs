//! Builds what `spawnkit bench` needs from the repository's bench/ folder:
//! - `tinychild`: the tiny static child of the latency method (no libc, three raw system
//!   calls), compiled with the C compiler the `cc` crate picks for the target and embedded in
//!   the binary (`include_bytes!` from OUT_DIR);
//! - `herd`: bench/herd.c, N sleeping processes for `spawnkit bench ps`, built the same way;
//! - `baselines.c`: fork+exec, vfork+exec, posix_spawnp, system(), popen(), and
//!   `floor_server.c`, the design floor under the spawn server's latency, as a static library
//!   linked into the binary.
//!
//! Nothing is downloaded: gcc (or whatever `CC` names) builds both.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let bench = manifest.join("../../bench");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let tiny_src = bench.join("tinychild.c");
    let herd_src = bench.join("herd.c");
    let baselines = bench.join("baselines.c");
    let floor_server = bench.join("floor_server.c");
    println!("cargo:rerun-if-changed={}", tiny_src.display());
    println!("cargo:rerun-if-changed={}", herd_src.display());
    println!("cargo:rerun-if-changed={}", baselines.display());
    println!("cargo:rerun-if-changed={}", floor_server.display());

    cc::Build::new()
        .file(&baselines)
        .file(&floor_server)
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .compile("spawnkit_bench_baselines");

    let compiler = cc::Build::new().get_compiler();
    for (name, src) in [("tinychild", &tiny_src), ("herd", &herd_src)] {
        let bin = out.join(name);
        let status = Command::new(compiler.path())
            .args([
                "-static",
                "-nostdlib",
                "-nostartfiles",
                "-O2",
                "-fno-stack-protector",
                "-fno-asynchronous-unwind-tables",
                "-fno-pie",
                "-no-pie",
                "-Wl,--build-id=none",
                "-s",
                "-o",
            ])
            .arg(&bin)
            .arg(src)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", compiler.path().display()));
        assert!(status.success(), "building {} failed: {status}", src.display());
    }
}
