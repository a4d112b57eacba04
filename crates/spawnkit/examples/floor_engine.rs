//! The engine floor row of `spawnkit bench async`, alone, for a profiler: N children (the
//! program in argv[1], stdin and stdout /dev/null), at most 64 running, each pidfd in one
//! epoll, reaped by `try_wait` when readable. `floor_engine PROG [N] [ROUNDS]`; prints
//! processes per second per round, and the spawning thread's CPU time per spawn (user +
//! system: the engine's own cost, without the children's exec, which runs in the child).
use spawnkit::{Child, Command, Stdio};
use std::os::fd::AsRawFd;
use std::time::Instant;

const LIMIT: usize = 64;

fn main() {
    let mut args = std::env::args().skip(1);
    let prog = args.next().expect("usage: floor_engine PROG [N] [ROUNDS]");
    let total: usize = args.next().map_or(1000, |s| s.parse().expect("N"));
    let rounds: usize = args.next().map_or(5, |s| s.parse().expect("ROUNDS"));
    let mut cmd = Command::new(&prog);
    cmd.stdin(Stdio::Null).stdout(Stdio::Null);
    // SAFETY: epoll_create1 takes an integer.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0);
    for _ in 0..rounds {
        let cpu0 = thread_cpu_us();
        let mut slots: Vec<Option<Child>> = (0..LIMIT).map(|_| None).collect();
        let mut free: Vec<usize> = (0..LIMIT).rev().collect();
        let (mut started, t) = (0, Instant::now());
        while started < total || free.len() < LIMIT {
            if started < total && !free.is_empty() {
                let child = cmd.spawn().expect("spawn");
                let i = free.pop().unwrap();
                let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: i as u64 };
                // SAFETY: a live pidfd and event.
                let r = unsafe {
                    libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, child.pidfd().as_raw_fd(), &mut ev)
                };
                assert_eq!(r, 0);
                slots[i] = Some(child);
                started += 1;
                continue;
            }
            let mut evs = [libc::epoll_event { events: 0, u64: 0 }; LIMIT];
            // SAFETY: writes at most LIMIT events into `evs`.
            let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), LIMIT as i32, -1) };
            for ev in evs.iter().take(n.max(0) as usize) {
                let i = ev.u64 as usize;
                let Some(child) = slots[i].as_mut() else { continue };
                if let Some(st) = child.try_wait().expect("try_wait") {
                    assert!(st.success(), "{prog}: {st}");
                    slots[i] = None;
                    free.push(i);
                }
            }
        }
        let wall = t.elapsed().as_secs_f64();
        let cpu = (thread_cpu_us() - cpu0) / total as f64;
        println!("{:.0}/s, this thread's CPU {cpu:.1} us per spawn", total as f64 / wall);
    }
}

/// User + system CPU time of this thread, in microseconds.
fn thread_cpu_us() -> f64 {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into `ru`.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(ru.ru_utime) + us(ru.ru_stime)
}
