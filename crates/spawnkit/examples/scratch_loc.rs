use spawnkit::{Command, Stdio};
fn main() {
    let prog = std::env::args().nth(1).unwrap();
    let n: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(20000);
    let clear = std::env::var_os("CLEAR").is_some();
    for _ in 0..n {
        let mut cmd = Command::new(&prog);
        cmd.stdout(Stdio::Null);
        if clear {
            cmd.env_clear();
        }
        let mut c = cmd.spawn().unwrap();
        c.wait().unwrap();
    }
}
