//! `spawnkit-probe`: a test helper that reports its own process state as seen from inside.
//!
//! `spawnkit-probe [state]` prints `key=value` lines: pid, ppid, pgid, sid, cwd, umask,
//! sigblk/sigign/sigcgt (hex, from /proc/self/status), fds (open fds with their targets and
//! close-on-exec flags), limit.NAME=soft:hard, nice, affinity, uid/gid/groups, nnp,
//! pdeathsig, argv, env. Other modes: `exit N`, `kill SIG` (kill itself), `sleep SECS`,
//! `cat` (stdin to stdout), `spew N` (N bytes to stdout and N to stderr), `stdin-len`
//! (count stdin bytes), `fds` (only the fd list), `loopback` (a TCP round trip over
//! 127.0.0.1), `netdevs` (the network interfaces it sees), `ns` (namespace ids, pid,
//! hostname, uid/gid maps, setgroups, cgroup), `tree DEPTH WIDTH [COMM]` (a known process
//! tree, see tree.rs), `shm-fixture [TOTAL A B [PARENT]]` (a known shared anonymous region
//! whose writers have exited, see shm.rs).

#![deny(unsafe_code)]

use std::io::{Read, Write};

mod shm;
#[allow(unsafe_code)]
mod sys;
mod tree;

fn status_field(status: &str, key: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
        .unwrap_or_default()
}

fn fds() -> Vec<(i32, String, bool)> {
    // Read the directory into a list first: its own fd shows up while it is open.
    let entries: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for fd in entries {
        let Ok(target) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else { continue };
        let flags = sys::fcntl_getfd(fd);
        if flags < 0 {
            continue;
        }
        out.push((fd, target.to_string_lossy().into_owned(), flags & libc::FD_CLOEXEC != 0));
    }
    out.sort();
    out
}

fn state() {
    let mut o = String::new();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let (pid, ppid, pgid, sid, nice) =
        (sys::getpid(), sys::getppid(), sys::getpgid(), sys::getsid(), sys::getpriority());
    o += &format!("pid={pid}\nppid={ppid}\npgid={pgid}\nsid={sid}\nnice={nice}\n");
    let cwd = std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_default();
    o += &format!("cwd={cwd}\n");
    for (key, field) in [
        ("umask", "Umask:"),
        ("sigblk", "SigBlk:"),
        ("sigign", "SigIgn:"),
        ("sigcgt", "SigCgt:"),
        ("uid", "Uid:"),
        ("gid", "Gid:"),
        ("groups", "Groups:"),
        ("nnp", "NoNewPrivs:"),
        ("cpus_allowed", "Cpus_allowed_list:"),
    ] {
        o += &format!("{key}={}\n", status_field(&status, field));
    }
    let list: Vec<String> = fds()
        .into_iter()
        .map(|(fd, target, cloexec)| {
            format!("{fd}:{target}{}", if cloexec { ":cloexec" } else { "" })
        })
        .collect();
    o += &format!("fds={}\n", list.join(" "));
    for (name, res) in [
        ("CPU", libc::RLIMIT_CPU),
        ("FSIZE", libc::RLIMIT_FSIZE),
        ("DATA", libc::RLIMIT_DATA),
        ("STACK", libc::RLIMIT_STACK),
        ("CORE", libc::RLIMIT_CORE),
        ("NPROC", libc::RLIMIT_NPROC),
        ("NOFILE", libc::RLIMIT_NOFILE),
        ("MEMLOCK", libc::RLIMIT_MEMLOCK),
        ("AS", libc::RLIMIT_AS),
        ("MSGQUEUE", libc::RLIMIT_MSGQUEUE),
        ("NICE", libc::RLIMIT_NICE),
    ] {
        let (cur, max) = sys::getrlimit(res);
        let show =
            |v: u64| if v == libc::RLIM_INFINITY { "unlimited".to_string() } else { v.to_string() };
        o += &format!("limit.{name}={}:{}\n", show(cur), show(max));
    }
    let sig = sys::get_pdeathsig();
    o += &format!("pdeathsig={sig}\n");
    let args: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    o += &format!("argv={}\n", args.join("\u{1f}"));
    for (k, v) in std::env::vars_os() {
        o += &format!("env.{}={}\n", k.to_string_lossy(), v.to_string_lossy());
    }
    print!("{o}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("state");
    let num = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok()).unwrap_or(0);
    match mode {
        "state" => state(),
        "tree" => tree::main(&args[2..]),
        "shm-fixture" => shm::main(&args[2..]),
        "fds" => {
            let list: Vec<String> = fds().into_iter().map(|(fd, _, _)| fd.to_string()).collect();
            println!("{}", list.join(" "));
        }
        "exit" => std::process::exit(num(2) as i32),
        "kill" => {
            sys::kill(sys::getpid(), num(2) as i32);
            std::thread::sleep(std::time::Duration::from_secs(5));
        }
        "sleep" => {
            let secs: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1.0);
            std::thread::sleep(std::time::Duration::from_secs_f64(secs));
        }
        "cat" => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).ok();
            std::io::stdout().write_all(&buf).ok();
        }
        "stdin-len" => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).ok();
            println!("{}", buf.len());
        }
        "spew" => {
            let n = num(2) as usize;
            let block = vec![b'o'; 65536];
            let eblock = vec![b'e'; 65536];
            let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
            let mut left = n;
            while left > 0 {
                let k = left.min(65536);
                out.write_all(&block[..k]).ok();
                err.write_all(&eblock[..k]).ok();
                left -= k;
            }
        }
        "loopback" => {
            // A TCP round trip over 127.0.0.1: works only where loopback is up.
            let result = (|| -> std::io::Result<()> {
                let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
                let mut client = std::net::TcpStream::connect(listener.local_addr()?)?;
                let (mut server, _) = listener.accept()?;
                client.write_all(b"ping")?;
                let mut buf = [0u8; 4];
                server.read_exact(&mut buf)?;
                if &buf != b"ping" {
                    return Err(std::io::Error::other("garbled"));
                }
                Ok(())
            })();
            match result {
                Ok(()) => println!("loopback=ok"),
                Err(e) => println!("loopback=error {e}"),
            }
        }
        "netdevs" => {
            // The interfaces of this process's network namespace.
            let text = std::fs::read_to_string("/proc/self/net/dev").unwrap_or_default();
            let mut names: Vec<&str> =
                text.lines().skip(2).filter_map(|l| l.split(':').next()).map(str::trim).collect();
            names.sort_unstable();
            println!("{}", names.join(" "));
        }
        "ns" => {
            // The namespace identities of this process.
            for ns in ["cgroup", "ipc", "mnt", "net", "pid", "user", "uts"] {
                let link = std::fs::read_link(format!("/proc/self/ns/{ns}"))
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                println!("ns.{ns}={link}");
            }
            println!("pid={}", sys::getpid());
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            println!("hostname={}", host.trim());
            for f in ["uid_map", "gid_map", "setgroups", "cgroup"] {
                let v = std::fs::read_to_string(format!("/proc/self/{f}")).unwrap_or_default();
                let v: Vec<String> =
                    v.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
                println!("{f}={}", v.join(";"));
            }
        }
        other => {
            eprintln!("spawnkit-probe: unknown mode {other:?}");
            std::process::exit(2);
        }
    }
}
