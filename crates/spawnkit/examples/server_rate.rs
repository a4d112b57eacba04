//! Rough numbers for the spawn server against a local spawn, from one caller thread:
//! `cargo run --release -p spawnkit --example server_rate [N]`. The benchmark rows proper
//! live in `spawnkit bench`; this is a quick look at the hot path.

use std::time::Instant;

use spawnkit::{Command, PrivateServer};

/// This thread's CPU time so far (ns on CPU from /proc/thread-self/schedstat), in µs.
fn thread_cpu_us() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    s.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 1e3
}

fn row(name: &str, n: usize, f: impl FnOnce()) {
    let c0 = thread_cpu_us();
    let t0 = Instant::now();
    f();
    let wall = t0.elapsed().as_secs_f64();
    let cpu = thread_cpu_us() - c0;
    println!(
        "{name:<28} {:>8.1} spawns/s  {:>7.1} us/spawn wall  {:>6.1} us/spawn caller CPU",
        n as f64 / wall,
        wall * 1e6 / n as f64,
        cpu / n as f64
    );
}

fn main() -> spawnkit::Result<()> {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3000);
    let mut server = PrivateServer::start()?;
    let mut cmd = Command::new("/bin/true");
    cmd.env_clear().env("PATH", "/usr/bin:/bin").current_dir("/");
    // Warm up.
    for _ in 0..200 {
        cmd.spawn()?.wait()?;
        server.client().spawn(&cmd)?.wait()?;
    }
    row("local spawn+wait", n, || {
        for _ in 0..n {
            cmd.spawn().unwrap().wait().unwrap();
        }
    });
    row("server spawn+wait", n, || {
        for _ in 0..n {
            server.client().spawn(&cmd).unwrap().wait().unwrap();
        }
    });
    for window in [4usize, 16] {
        row(&format!("server {window} in flight"), n, || {
            let client = server.client();
            let mut children = std::collections::VecDeque::new();
            let mut submitted = 0;
            let mut done = 0;
            while done < n {
                while submitted < n && client.in_flight() + children.len() < window {
                    client.submit(&cmd).unwrap();
                    submitted += 1;
                }
                if client.in_flight() > 0 {
                    let (_, child) = client.receive().unwrap();
                    children.push_back(child.unwrap());
                }
                if children.len() >= window / 2 || submitted == n {
                    if let Some(mut c) = children.pop_front() {
                        c.wait().unwrap();
                        done += 1;
                    }
                }
            }
        });
    }
    row("server 16 in flight, no wait", n, || {
        let client = server.client();
        let mut submitted = 0;
        let mut done = 0;
        while done < n {
            while submitted < n && client.in_flight() < 16 {
                client.submit(&cmd).unwrap();
                submitted += 1;
            }
            let (_, child) = client.receive().unwrap();
            drop(child.unwrap());
            done += 1;
        }
    });
    Ok(())
}
