use spawnkit::{Command, Stdio};
fn main() {
    let n: usize = std::env::args().nth(1).map(|a| a.parse().unwrap()).unwrap_or(200000);
    let mut cmd = Command::new("tinychild");
    cmd.stdout(Stdio::Fd(1));
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(cmd.plan().unwrap());
    }
    eprintln!("plan: {:.0} ns", t.elapsed().as_nanos() as f64 / n as f64);
    let t = std::time::Instant::now();
    for _ in 0..n {
        let mut c = Command::new("tinychild");
        c.stdout(Stdio::Fd(1));
        std::hint::black_box(c.plan().unwrap());
    }
    eprintln!("new + plan: {:.0} ns", t.elapsed().as_nanos() as f64 / n as f64);
}
