//! `spawnkit`: launch Linux processes fast and safely, from the command line.
//!
//! Each subcommand lives in a module of its own that exposes an `Args` type (clap) and a
//! `main(&Args) -> i32` returning the exit code; this file only dispatches.

use clap::{Parser, Subcommand};

mod bench;
mod mem;
mod out;
mod ps;
mod run;

/// The exit code of a usage error (bad flag or value), as env(1) and `spawnkit run` use it for
/// any failure of their own.
const USAGE_ERROR: i32 = 125;

const AFTER_HELP: &str = "\
Examples:
  spawnkit run -- ls -l                        (run a program, exit with its status)
  spawnkit run --cwd /tmp --env-clear --env PATH=/usr/bin -- env
  spawnkit run --rlimit nofile=64 --nice 10 --cpus 0-1 -- make -j2
  spawnkit run --dry-run --uid nobody -- id    (print the setup steps, spawn nothing)
  spawnkit bench latency --runs 2000           (spawnkit beside fork, vfork, posix_spawn...)

Run 'spawnkit run --help' for every option of run.";

/// Launch Linux processes fast and safely.
#[derive(Debug, Parser)]
#[command(name = "spawnkit", version, after_help = AFTER_HELP, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a program with the given setup (limits, credentials, fds, signals...), wait for
    /// it, and exit with its status.
    Run(Box<run::RunArgs>),
    /// The field's published spawn benchmarks (latency, throughput, CPU) on this machine,
    /// spawnkit's strategies beside fork, vfork, posix_spawn, system(), popen() and Python;
    /// and the cost of a fence (private /tmp + network + user namespace) beside unshare, bwrap.
    Bench(bench::BenchArgs),
    /// List processes: pid, ppid, comm, state, uid, threads, start time, rss, command line;
    /// from a BPF task iterator (one read for all tasks) or a lean /proc walker.
    Ps(ps::PsArgs),
    /// Memory per process (RSS, PSS, USS, swap, shared memory kept apart) and shared memory
    /// regions (anonymous, SysV, memfd, tmpfs) counted once each, with the processes that
    /// map them.
    Mem(mem::MemArgs),
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and succeed; everything else is a usage
            // error on stderr, with env(1)'s exit code.
            let code = if e.use_stderr() { USAGE_ERROR } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let code = match &cli.command {
        Cmd::Run(args) => run::main(args),
        Cmd::Bench(args) => bench::main(args),
        Cmd::Ps(args) => ps::main(args),
        Cmd::Mem(args) => mem::main(args),
    };
    std::process::exit(code);
}
