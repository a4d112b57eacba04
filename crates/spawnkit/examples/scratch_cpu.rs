use spawnkit::{Command, PrivateServer, Stdio};
use std::os::fd::AsRawFd;
fn cpu_us() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    s.split_whitespace().next().unwrap().parse::<f64>().unwrap() / 1e3
}
fn main() {
    let mut server = PrivateServer::start().unwrap();
    let null = std::fs::File::open("/dev/null").unwrap();
    let mut cmd = Command::new(std::env::args().nth(1).unwrap_or("/bin/true".into()));
    cmd.stdout(Stdio::Fd(null.as_raw_fd()));
    let client = server.client();
    let blocks = 400;
    let (mut ts, mut tr, mut tw) = (0.0, 0.0, 0.0);
    for _ in 0..blocks {
        let a = cpu_us();
        if std::env::var("MANY").is_ok() {
            client.submit_many(std::iter::repeat_n(&cmd, 16)).unwrap();
        } else {
            for _ in 0..16 {
                client.submit(&cmd).unwrap();
            }
        }
        let b = cpu_us();
        let mut kids = Vec::new();
        for _ in 0..16 {
            kids.push(client.receive().unwrap().1.unwrap());
        }
        let c = cpu_us();
        for mut k in kids {
            k.wait().unwrap();
        }
        let d = cpu_us();
        ts += b - a;
        tr += c - b;
        tw += d - c;
    }
    let n = (blocks * 16) as f64;
    println!(
        "per spawn: submit {:.1} receive {:.1} wait {:.1} total {:.1} us",
        ts / n,
        tr / n,
        tw / n,
        (ts + tr + tw) / n
    );
}
