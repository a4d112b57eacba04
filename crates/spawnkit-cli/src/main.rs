//! `spawnkit`: launch Linux processes fast and safely, from the command line.
//!
//! Each subcommand lives in a module of its own that exposes an `Args` type (clap) and a
//! `main(&Args) -> i32` returning the exit code; this file only dispatches.

use clap::{Parser, Subcommand};

mod bench;
mod closed;
mod mem;
mod out;
mod ps;
mod run;
mod serve;
mod worker;

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
  spawnkit serve &  then  spawnkit run --via SOCKET -- make   (spawn through a server)
  spawnkit worker --remote http://bgd:50051 --instance main --work-dir /var/lib/sk

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
    /// Run a spawn server in the foreground: other processes (`spawnkit run --via`, the
    /// Rust and Python clients) start programs through it, authenticated by a key file.
    Serve(serve::ServeArgs),
    /// A remote-execution worker for a build farm: a Remote Workers API bot (BuildGrid) that
    /// takes leases, runs each REAPI action fenced with spawnkit, and reports its results.
    Worker(Box<worker::WorkerArgs>),
}

/// Print what clap stopped with; the exit code. --help and --version print to stdout and
/// succeed (a closed pipe too: the reader had what it wanted, as for `ps | head`); a stdout
/// that cannot be written otherwise (/dev/full, or closed from the start: `>&-`) is a failure
/// of spawnkit's own, 125. Everything
/// else is a usage error on stderr, with env(1)'s exit code. clap's own `exit()` would panic
/// on a stream it cannot write.
fn clap_exit(e: &clap::Error) -> i32 {
    if e.use_stderr() {
        let _ = e.print();
        return USAGE_ERROR;
    }
    let written = out::stdout_open()
        .and_then(|()| e.print())
        .and_then(|()| std::io::Write::flush(&mut std::io::stdout()));
    match written.map_err(out::Failure::from) {
        Ok(()) | Err(out::Failure::Pipe) => 0,
        Err(out::Failure::Msg(m)) => {
            out::note!("spawnkit: {m}");
            USAGE_ERROR
        }
    }
}

fn main() {
    if closed::at_start(1) {
        out::stdout_closed_at_start();
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => std::process::exit(clap_exit(&e)),
    };
    let code = match &cli.command {
        Cmd::Run(args) => run::main(args),
        Cmd::Bench(args) => bench::main(args),
        Cmd::Ps(args) => ps::main(args),
        Cmd::Mem(args) => mem::main(args),
        Cmd::Serve(args) => serve::main(args),
        Cmd::Worker(args) => worker::main(args),
    };
    std::process::exit(code);
}
