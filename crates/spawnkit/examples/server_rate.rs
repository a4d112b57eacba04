//! Rough numbers for the spawn server beside a local spawn, from one caller thread:
//! `cargo run --release -p spawnkit --example server_rate [ROUNDS [PROGRAM]]` (default 10
//! rounds of 300 spawns per row, `/bin/true`). The rows run round-robin, so a noisy
//! neighbour slows them alike; the median round of each is printed. The benchmark rows
//! proper live in `spawnkit bench`; this is a quick look at the hot path.

use std::collections::VecDeque;
use std::time::Instant;

use spawnkit::{Client, Command, PrivateServer};

/// This thread's CPU time so far (ns on CPU from /proc/thread-self/schedstat), in µs.
fn thread_cpu_us() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    s.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 1e3
}

/// Spawn `n` children, at most `window` unanswered or unwaited, and wait for all of them.
fn through_server(client: &mut Client, cmd: &Command, n: usize, window: usize) {
    let mut running = VecDeque::new();
    let (mut sent, mut done) = (0, 0);
    while done < n {
        while sent < n && client.in_flight() + running.len() < window {
            client.submit(cmd).unwrap();
            sent += 1;
        }
        if client.in_flight() > 0 {
            running.push_back(client.receive().unwrap().1.unwrap());
        }
        if running.len() >= window.div_ceil(2) || sent == n {
            if let Some(mut c) = running.pop_front() {
                c.wait().unwrap();
                done += 1;
            }
        }
    }
}

fn main() -> spawnkit::Result<()> {
    let rounds: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10);
    let program = std::env::args().nth(2).unwrap_or_else(|| "/bin/true".into());
    let n = 300;
    let mut server = PrivateServer::start()?;
    let mut cmd = Command::new(program);
    cmd.env_clear().env("PATH", "/usr/bin:/bin").current_dir("/").stdout(spawnkit::Stdio::Null);
    let names = ["local spawn+wait", "server spawn+wait", "server 16 in flight"];
    // (spawns/s, caller µs/spawn) per round and row.
    let mut results: Vec<Vec<(f64, f64)>> = vec![Vec::new(); names.len()];
    for round in 0..=rounds {
        for (row, out) in results.iter_mut().enumerate() {
            let c0 = thread_cpu_us();
            let t0 = Instant::now();
            match row {
                0 => (0..n).for_each(|_| {
                    cmd.spawn().unwrap().wait().unwrap();
                }),
                1 => (0..n).for_each(|_| {
                    server.client().spawn(&cmd).unwrap().wait().unwrap();
                }),
                _ => through_server(server.client(), &cmd, n, 16),
            }
            let wall = t0.elapsed().as_secs_f64();
            let cpu = thread_cpu_us() - c0;
            if round > 0 {
                out.push((n as f64 / wall, cpu / n as f64)); // round 0 warms up
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let base = median(results[0].iter().map(|r| r.0).collect());
    let base_cpu = median(results[0].iter().map(|r| r.1).collect());
    for (name, r) in names.iter().zip(results) {
        let rate = median(r.iter().map(|x| x.0).collect());
        let cpu = median(r.iter().map(|x| x.1).collect());
        println!(
            "{name:<22} {rate:>8.0} spawns/s ({:>4.2}x local)  caller CPU {cpu:>5.1} us/spawn ({:>4.2}x local)",
            rate / base,
            cpu / base_cpu
        );
    }
    Ok(())
}
