// scratch (not committed): per-thread CPU of the private server per spawn, 16 in flight.
use spawnkit::{Client, Command, PrivateServer, Stdio};
use std::collections::VecDeque;
fn tasks(pid: u32) -> Vec<(String, f64)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default().trim().to_string();
        let ns: f64 = std::fs::read_to_string(p.join("schedstat"))
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or("0")
            .parse()
            .unwrap_or(0.0);
        v.push((format!("{}:{}", comm, e.file_name().to_string_lossy()), ns / 1e3));
    }
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}
fn me() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse::<f64>()
        .unwrap()
        / 1e3
}
fn stat() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap();
    let l: Vec<u64> =
        s.lines().next().unwrap().split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
    (l.iter().take(8).sum(), l[3])
}
fn run(client: &mut Client, cmd: &Command, n: usize) {
    let mut running = VecDeque::new();
    let (mut sent, mut done) = (0, 0);
    while done < n {
        while sent < n && client.in_flight() + running.len() < 16 {
            client.submit(cmd).unwrap();
            sent += 1;
        }
        if client.in_flight() > 0 {
            running.push_back(client.receive().unwrap().1.unwrap());
        }
        if running.len() >= 8 || sent == n {
            if let Some(mut c) = running.pop_front() {
                c.wait().unwrap();
                done += 1;
            }
        }
    }
}
fn run_status(client: &mut Client, cmd: &Command, n: usize, batch: usize) {
    let (mut sent, mut done) = (0, 0);
    while done < n {
        let room = (16 - (sent - done)).min(n - sent);
        if room >= batch || (room > 0 && sent + room == n) {
            if batch == 1 {
                client.submit_status_many([cmd]).unwrap();
                sent += 1;
                continue;
            }
            client.submit_status_many(std::iter::repeat_n(cmd, room)).unwrap();
            sent += room;
        }
        let (_, r) = client.receive_status().unwrap();
        assert!(r.unwrap().success());
        done += 1;
    }
}
fn main() {
    let prog = std::env::args().nth(1).unwrap();
    let n: usize = std::env::args().nth(2).unwrap().parse().unwrap();
    let mut server = PrivateServer::start().unwrap();
    let pid = server.pid();
    let mut cmd = Command::new(&prog);
    cmd.stdout(Stdio::Null);
    run(server.client(), &cmd, 500);
    for _ in 0..3 {
        let (a, b, c0, st0) = (tasks(pid), me(), std::time::Instant::now(), stat());
        match std::env::var("MODE").ok().as_deref() {
            Some(b) => run_status(server.client(), &cmd, n, b.parse().unwrap()),
            None => run(server.client(), &cmd, n),
        }
        let (a2, b2, el, st1) = (tasks(pid), me(), c0.elapsed().as_secs_f64(), stat());
        let tot = (st1.0 - st0.0) as f64;
        let idle = (st1.1 - st0.1) as f64;
        print!(
            "{:.0}/s busy/spawn {:.0} idle {:.0}% caller {:.1}",
            n as f64 / el,
            (tot - idle) * 1e4 / n as f64,
            idle * 100.0 / tot,
            (b2 - b) / n as f64
        );
        for (x, y) in a.iter().zip(a2.iter()) {
            if x.0 == y.0 {
                print!(" {} {:.1}", x.0, (y.1 - x.1) / n as f64);
            }
        }
        println!();
    }
}
