//! Standard streams and fd maps, checked against /proc/self/fd inside the child.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};

use common::{
    dup_at_least, fd_is_open, fd_target, is_cloexec, open_inheritable, pipe, probe_cmd,
    probe_state, run_state, FdInfo, State, TempDir,
};
use spawnkit::{Command, ErrorKind, Stdio, Strategy};

/// A temp file with known contents, its path as the child's /proc shows it.
fn named_file(dir: &TempDir, name: &str) -> (File, String) {
    let path = dir.file(name, name.as_bytes(), 0o644);
    (File::open(&path).unwrap(), path.to_string_lossy().into_owned())
}

fn fd(st: &State, n: i32) -> FdInfo {
    st.fd(n).unwrap_or_else(|| panic!("fd {n} is not open in the child: {}", st.get("fds")))
}

/// What fds 0, 1, 2 of a child with inherited stdio point to, read by a shell through
/// /proc/$$/fd and written to a pipe mapped as fd 3 (its stdout is the thing inspected).
/// Each readlink runs in a command substitution so the shell's own fds stay untouched.
const SHOW_STDIO: &str = "a=$(readlink /proc/$$/fd/0); b=$(readlink /proc/$$/fd/1); \
     c=$(readlink /proc/$$/fd/2); printf '%s\\n' \"$a\" \"$b\" \"$c\" >&3";

fn inherited_targets(s: Strategy, configure: impl FnOnce(&mut Command)) -> Vec<String> {
    shell_report(SHOW_STDIO, s, configure).lines().map(str::to_string).collect()
}

/// What `script`, run by `sh -c` with `configure`d options and strategy `s`, writes to the
/// pipe mapped as its fd 3 (it must exit 0).
fn shell_report(script: &str, s: Strategy, configure: impl FnOnce(&mut Command)) -> String {
    let (mut r, w) = pipe();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]).fd(3, w.as_raw_fd()).strategy(s);
    configure(&mut cmd);
    let status = cmd.status().unwrap();
    assert!(status.success(), "{s}: {status}");
    drop(cmd);
    drop(w);
    let mut out = String::new();
    r.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn inherit_gives_the_parents_fds() {
    for n in 0..3 {
        assert!(fd_is_open(n), "the test process has no fd {n}");
    }
    let parent: Vec<String> = (0..3).map(fd_target).collect();
    for s in Strategy::ALL {
        assert_eq!(inherited_targets(s, |_| {}), parent, "{s}");
        let explicit = inherited_targets(s, |c| {
            c.stdin(Stdio::Inherit).stdout(Stdio::inherit()).stderr(Stdio::Inherit);
        });
        assert_eq!(explicit, parent, "{s}");
    }
}

#[test]
fn stderr_to_inherited_stdout() {
    let out_target = fd_target(1);
    for s in Strategy::ALL {
        let t = inherited_targets(s, |c| {
            c.stderr(Stdio::Stdout);
        });
        assert_eq!(t[2], out_target, "{s}");
        assert_eq!(t[1], out_target, "{s}");
    }
}

#[test]
fn null_is_dev_null() {
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.stdin(Stdio::null()).stderr(Stdio::Null);
        });
        assert_eq!(fd(&st, 0), FdInfo { fd: 0, target: "/dev/null".into(), cloexec: false });
        assert_eq!(fd(&st, 2), FdInfo { fd: 2, target: "/dev/null".into(), cloexec: false });
        assert!(fd(&st, 1).target.starts_with("pipe:["), "{s}: {:?}", fd(&st, 1));
        assert_eq!(st.fd_numbers(), [0, 1, 2], "{s}");
    }
}

#[test]
fn pipes_are_the_childs_stdio() {
    for s in Strategy::ALL {
        let mut child = probe_cmd(s, ["state"])
            .stdin(Stdio::Pipe)
            .stdout(Stdio::piped())
            .stderr(Stdio::Pipe)
            .spawn()
            .unwrap();
        let ends: Vec<String> = [&child.stdin, &child.stdout, &child.stderr]
            .iter()
            .map(|f| fd_target(f.as_ref().expect("a pipe end").as_raw_fd()))
            .collect();
        let out = child.communicate(None, None).unwrap();
        assert!(out.status.success(), "{s}");
        let st = State::parse(&String::from_utf8(out.stdout).unwrap());
        for n in 0..3 {
            let f = fd(&st, n);
            assert_eq!(f.target, ends[n as usize], "{s}: fd {n}");
            assert!(f.target.starts_with("pipe:["), "{s}: {f:?}");
            assert!(!f.cloexec, "{s}: {f:?}");
        }
        assert_eq!(out.stderr, b"", "{s}");
    }
}

#[test]
fn pipe_data_flows_through_cat() {
    for s in Strategy::ALL {
        let mut child =
            probe_cmd(s, ["cat"]).stdin(Stdio::Pipe).stdout(Stdio::Pipe).spawn().unwrap();
        let out = child.communicate(Some(b"hello through a pipe"), None).unwrap();
        assert_eq!(out.stdout, b"hello through a pipe", "{s}");
        assert!(out.status.success(), "{s}");
    }
}

#[test]
fn stdout_to_a_file() {
    let dir = TempDir::new("stdout-file");
    for s in Strategy::ALL {
        let path = dir.join(&format!("out-{s}"));
        let f = File::create(&path).unwrap();
        let status = probe_cmd(s, ["state"]).stdout(Stdio::File(f)).status().unwrap();
        assert!(status.success(), "{s}");
        let st = State::parse(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(fd(&st, 1).target, path.to_str().unwrap(), "{s}");
        assert!(!fd(&st, 1).cloexec, "{s}");
    }
}

#[test]
fn stdin_from_a_file_and_from_owned() {
    let dir = TempDir::new("stdin-file");
    let path = dir.file("input", b"0123456789", 0o644);
    for s in Strategy::ALL {
        let out = probe_cmd(s, ["stdin-len"])
            .stdin(Stdio::from(File::open(&path).unwrap()))
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"10\n", "{s}");
        let owned: OwnedFd = File::open(&path).unwrap().into();
        let out = probe_cmd(s, ["cat"]).stdin(owned).output().unwrap();
        assert_eq!(out.stdout, b"0123456789", "{s}");
    }
}

#[test]
fn stdio_from_a_raw_fd() {
    let dir = TempDir::new("stdio-fd");
    for s in Strategy::ALL {
        let path = dir.join(&format!("raw-{s}"));
        let f = File::create(&path).unwrap();
        let status = probe_cmd(s, ["state"]).stdout(Stdio::Fd(f.as_raw_fd())).status().unwrap();
        assert!(status.success(), "{s}");
        // Borrowed: still open in the parent.
        assert!(fd_is_open(f.as_raw_fd()), "{s}");
        let st = State::parse(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(fd(&st, 1).target, path.to_str().unwrap(), "{s}");
    }
}

#[test]
fn stderr_to_stdout_pipe_is_2_to_1() {
    for s in Strategy::ALL {
        let mut child = probe_cmd(s, ["spew", "100000"])
            .stdout(Stdio::Pipe)
            .stderr(Stdio::Stdout)
            .spawn()
            .unwrap();
        assert!(child.stderr.is_none(), "{s}");
        let out = child.communicate(None, None).unwrap();
        assert_eq!(out.stdout.len(), 200_000, "{s}");
        assert_eq!(out.stdout.iter().filter(|&&b| b == b'o').count(), 100_000, "{s}");
        assert_eq!(out.stdout.iter().filter(|&&b| b == b'e').count(), 100_000, "{s}");
        assert_eq!(out.stderr, b"", "{s}");
    }
}

#[test]
fn stderr_to_stdout_file() {
    let dir = TempDir::new("both-file");
    for s in Strategy::ALL {
        let path = dir.join(&format!("both-{s}"));
        let status = probe_cmd(s, ["state"])
            .stdout(File::create(&path).unwrap())
            .stderr(Stdio::Stdout)
            .status()
            .unwrap();
        assert!(status.success(), "{s}");
        let st = State::parse(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(fd(&st, 1).target, path.to_str().unwrap(), "{s}");
        assert_eq!(fd(&st, 2).target, path.to_str().unwrap(), "{s}");
    }
}

#[test]
fn stderr_to_stdout_follows_where_fd_1_really_goes() {
    let dir = TempDir::new("2to1-map");
    for s in Strategy::ALL {
        // stdout is /dev/null by Stdio, but an fd map puts a file on 1: 2>&1 goes there too.
        let path = dir.join(&format!("mapped-{s}"));
        let f = File::create(&path).unwrap();
        let status = probe_cmd(s, ["state"])
            .stdout(Stdio::Null)
            .stderr(Stdio::Stdout)
            .fd(1, f.as_raw_fd())
            .status()
            .unwrap();
        assert!(status.success(), "{s}");
        let st = State::parse(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(fd(&st, 1).target, path.to_str().unwrap(), "{s}");
        assert_eq!(fd(&st, 2).target, path.to_str().unwrap(), "{s}");
        // stdout to /dev/null: stderr too.
        let (mut r, w) = pipe();
        let status = Command::new("sh")
            .args(["-c", "readlink /proc/$$/fd/2 >&3"])
            .stdout(Stdio::Null)
            .stderr(Stdio::Stdout)
            .fd(3, w.as_raw_fd())
            .strategy(s)
            .status()
            .unwrap();
        assert!(status.success(), "{s}");
        drop(w);
        let mut out = String::new();
        r.read_to_string(&mut out).unwrap();
        assert_eq!(out, "/dev/null\n", "{s}");
    }
}

/// Which of fds 0, 1, 2 and 4 a child finds open (`open`/`closed`), told by a shell's built-in
/// test on /proc/$$/fd (no fork, no pipe that could take a closed number) on a pipe mapped as
/// fd 3.
fn open_or_closed(s: Strategy, configure: impl FnOnce(&mut Command)) -> String {
    let script = "r=''; for n in 0 1 2 4; do if [ -e /proc/$$/fd/$n ]; then r=\"$r open\"; \
                  else r=\"$r closed\"; fi; done; echo $r >&3";
    shell_report(script, s, configure).trim_end().to_string()
}

#[test]
fn closed_is_closed_in_the_child() {
    for n in 0..3 {
        assert!(fd_is_open(n), "the test process has no fd {n}");
    }
    for s in Strategy::ALL {
        assert_eq!(open_or_closed(s, |_| {}), "open open open closed", "{s}");
        let t = open_or_closed(s, |c| {
            c.stdout(Stdio::Closed);
        });
        assert_eq!(t, "open closed open closed", "{s}");
        let t = open_or_closed(s, |c| {
            c.stdin(Stdio::closed()).stderr(Stdio::Closed);
        });
        assert_eq!(t, "closed open closed closed", "{s}");
        // 2>&1 of a closed stdout: nothing.
        let t = open_or_closed(s, |c| {
            c.stdout(Stdio::Closed).stderr(Stdio::Stdout);
        });
        assert_eq!(t, "open closed closed closed", "{s}");
        // A map onto the number wins, as over any stream; one from the parent's fd 1 reads
        // the parent's, not the child's closed one.
        let t = open_or_closed(s, |c| {
            c.stdin(Stdio::Closed).fd(0, 1).stdout(Stdio::Closed).fd(4, 1);
        });
        assert_eq!(t, "open closed open open", "{s}");
    }
    // A program writing to it fails (EBADF), as under `>&-`.
    for s in Strategy::ALL {
        let mut echo = Command::new("/bin/echo");
        echo.arg("hi").stdout(Stdio::Closed).stderr(Stdio::Null).strategy(s);
        let status = echo.status().unwrap();
        assert_eq!(status.code(), Some(1), "{s}");
    }
}

#[test]
fn stdout_marker_is_only_for_stderr() {
    for s in Strategy::ALL {
        let err = probe_cmd(s, ["exit", "0"]).stdin(Stdio::Stdout).spawn().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{s}: {err}");
        assert_eq!(err.step(), "dup2", "{s}");
    }
}

#[test]
fn map_a_parent_fd_to_child_fd_5() {
    let dir = TempDir::new("map5");
    let (a, a_path) = named_file(&dir, "a");
    assert_eq!(is_cloexec(a.as_raw_fd()), Some(true));
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.fd(5, a.as_raw_fd());
        });
        assert_eq!(fd(&st, 5), FdInfo { fd: 5, target: a_path.clone(), cloexec: false }, "{s}");
        assert_eq!(st.fd_numbers(), [0, 1, 2, 5], "{s}");
    }
}

#[test]
fn later_map_for_the_same_child_fd_wins() {
    let dir = TempDir::new("mapwins");
    let (a, _) = named_file(&dir, "a");
    let (b, b_path) = named_file(&dir, "b");
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.fd(7, a.as_raw_fd()).fd(7, b.as_raw_fd());
        });
        assert_eq!(fd(&st, 7).target, b_path, "{s}");
    }
}

#[test]
fn map_onto_stdout_overrides_stdio() {
    let dir = TempDir::new("map1");
    for s in Strategy::ALL {
        let path = dir.join(&format!("out-{s}"));
        let f = File::create(&path).unwrap();
        let status =
            probe_cmd(s, ["state"]).stdout(Stdio::Null).fd(1, f.as_raw_fd()).status().unwrap();
        assert!(status.success(), "{s}");
        let st = State::parse(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(fd(&st, 1).target, path.to_str().unwrap(), "{s}");
    }
}

/// Two parent fds numbered `min` or above, on distinct files.
fn two_high_fds(dir: &TempDir, min: i32) -> (OwnedFd, String, OwnedFd, String) {
    let (a, a_path) = named_file(dir, "a");
    let (b, b_path) = named_file(dir, "b");
    let x = dup_at_least(&a, min);
    let y = dup_at_least(&b, min);
    (x, a_path, y, b_path)
}

#[test]
fn swap_two_fds() {
    let dir = TempDir::new("swap");
    let (x, a_path, y, b_path) = two_high_fds(&dir, 300);
    let (xn, yn) = (x.as_raw_fd(), y.as_raw_fd());
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.fd(xn, yn).fd(yn, xn);
        });
        assert_eq!(fd(&st, xn), FdInfo { fd: xn, target: b_path.clone(), cloexec: false }, "{s}");
        assert_eq!(fd(&st, yn), FdInfo { fd: yn, target: a_path.clone(), cloexec: false }, "{s}");
        assert_eq!(st.fd_numbers(), [0, 1, 2, xn, yn], "{s}");
    }
}

#[test]
fn swap_the_lowest_free_fds() {
    // fd(3, 4).fd(4, 3) in practice: the two lowest free numbers (3 and 4 when nothing else
    // of this process holds them), each on its own file.
    let dir = TempDir::new("swaplow");
    let (a, a_path) = named_file(&dir, "a");
    let (b, b_path) = named_file(&dir, "b");
    let (xn, yn) = (a.as_raw_fd(), b.as_raw_fd());
    eprintln!("swapping fds {xn} and {yn}");
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.fd(xn, yn).fd(yn, xn);
        });
        assert_eq!(fd(&st, xn).target, b_path, "{s}");
        assert_eq!(fd(&st, yn).target, a_path, "{s}");
        // Listed in ascending order; another test thread's fds can make `b` the lower one.
        assert_eq!(st.fd_numbers(), [0, 1, 2, xn.min(yn), xn.max(yn)], "{s}");
    }
}

#[test]
fn cycle_of_three_fds() {
    let dir = TempDir::new("cycle");
    let (a, a_path) = named_file(&dir, "a");
    let (b, b_path) = named_file(&dir, "b");
    let (c, c_path) = named_file(&dir, "c");
    let (x, y, z) = (dup_at_least(&a, 320), dup_at_least(&b, 320), dup_at_least(&c, 320));
    let (xn, yn, zn) = (x.as_raw_fd(), y.as_raw_fd(), z.as_raw_fd());
    for s in Strategy::ALL {
        // child x <- parent y (b), child y <- parent z (c), child z <- parent x (a).
        let st = probe_state(s, |cmd| {
            cmd.fd(xn, yn).fd(yn, zn).fd(zn, xn);
        });
        assert_eq!(fd(&st, xn).target, b_path, "{s}");
        assert_eq!(fd(&st, yn).target, c_path, "{s}");
        assert_eq!(fd(&st, zn).target, a_path, "{s}");
        assert_eq!(st.fd_numbers(), [0, 1, 2, xn, yn, zn], "{s}");
    }
}

#[test]
fn keep_fd_on_a_cloexec_fd_keeps_it_without_cloexec() {
    let dir = TempDir::new("keep");
    let (a, a_path) = named_file(&dir, "a");
    let n = a.as_raw_fd();
    assert_eq!(is_cloexec(n), Some(true));
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.keep_fd(n);
        });
        assert_eq!(fd(&st, n), FdInfo { fd: n, target: a_path.clone(), cloexec: false }, "{s}");
        assert_eq!(st.fd_numbers(), [0, 1, 2, n], "{s}");
        // The parent's flag is untouched.
        assert_eq!(is_cloexec(n), Some(true), "{s}");
        let st = probe_state(s, |c| {
            c.fd(n, n);
        });
        assert!(!fd(&st, n).cloexec, "{s}");
    }
}

#[test]
fn other_fds_are_closed_by_default() {
    let dir = TempDir::new("closeothers");
    let (a, a_path) = named_file(&dir, "a");
    let leak1 = open_inheritable(&dir.join("a"));
    let leak2 = dup_at_least(&leak1, 700);
    common::set_cloexec(leak2.as_raw_fd(), false);
    assert_eq!(is_cloexec(leak1.as_raw_fd()), Some(false));
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.fd(5, a.as_raw_fd());
        });
        assert_eq!(st.fd_numbers(), [0, 1, 2, 5], "{s}: {}", st.get("fds"));
        assert_eq!(fd(&st, 5).target, a_path, "{s}");
        let st = probe_state(s, |_| {});
        assert_eq!(st.fd_numbers(), [0, 1, 2], "{s}: {}", st.get("fds"));
    }
}

#[test]
fn close_other_fds_false_lets_inheritable_fds_through() {
    let dir = TempDir::new("keepothers");
    let (a, a_path) = named_file(&dir, "a");
    let leak = open_inheritable(&dir.join("a"));
    let n = leak.as_raw_fd();
    let cloexec_fd = a.as_raw_fd();
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.close_other_fds(false);
        });
        assert_eq!(fd(&st, n), FdInfo { fd: n, target: a_path.clone(), cloexec: false }, "{s}");
        assert!(st.fd(cloexec_fd).is_none(), "{s}: close-on-exec fd {cloexec_fd} leaked");
    }
}

#[test]
fn swap_without_closing_other_fds() {
    let dir = TempDir::new("swapnoclose");
    let (x, a_path, y, b_path) = two_high_fds(&dir, 340);
    let (xn, yn) = (x.as_raw_fd(), y.as_raw_fd());
    for s in Strategy::ALL {
        let st = run_state(probe_cmd(s, ["state"]).fd(xn, yn).fd(yn, xn).close_other_fds(false));
        assert_eq!(fd(&st, xn).target, b_path, "{s}");
        assert_eq!(fd(&st, yn).target, a_path, "{s}");
    }
}

/// posix_spawn has no F_DUPFD: the copies made for a swap get fixed numbers, which must not
/// be a parent fd that a later map reads.
#[test]
fn swap_next_to_a_map_whose_source_is_just_above_the_targets() {
    let dir = TempDir::new("clobber");
    let (a, a_path) = named_file(&dir, "a");
    let (b, b_path) = named_file(&dir, "b");
    let (c, c_path) = named_file(&dir, "c");
    let p = dup_at_least(&a, 400);
    let q = dup_at_least(&b, 400);
    let src = dup_at_least(&c, 410);
    let (pn, qn, sn) = (p.as_raw_fd(), q.as_raw_fd(), src.as_raw_fd());
    // The highest target is sn - 1, so the first spare number is sn itself.
    let t = sn - 1;
    assert!(t > qn && t > pn);
    for s in Strategy::ALL {
        let st = probe_state(s, |cmd| {
            cmd.fd(pn, qn).fd(qn, pn).fd(t, sn);
        });
        assert_eq!(fd(&st, pn).target, b_path, "{s}");
        assert_eq!(fd(&st, qn).target, a_path, "{s}");
        assert_eq!(fd(&st, t).target, c_path, "{s}: child fd {t} should be parent fd {sn}");
    }
}

#[test]
fn keep_a_high_fd() {
    let dir = TempDir::new("highfd");
    let (a, a_path) = named_file(&dir, "a");
    let high = dup_at_least(&a, 1500);
    let n = high.as_raw_fd();
    for s in Strategy::ALL {
        let st = run_state(probe_cmd(s, ["state"]).keep_fd(n));
        assert_eq!(fd(&st, n).target, a_path, "{s}");
        assert_eq!(st.fd_numbers(), [0, 1, 2, n], "{s}");
    }
}

#[test]
fn child_ends_of_pipes_are_closed_in_the_parent() {
    // If the parent kept the child's write end, reading stdout would never see EOF.
    for s in Strategy::ALL {
        let mut child = probe_cmd(s, ["exit", "0"]).stdout(Stdio::Pipe).spawn().unwrap();
        let mut out = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
        assert_eq!(out, b"", "{s}");
        assert!(child.wait().unwrap().success(), "{s}");
    }
}

#[test]
fn stdio_file_is_closed_in_the_parent_after_spawn() {
    for s in Strategy::ALL {
        let (mut r, w) = pipe();
        let mut cmd = probe_cmd(s, ["exit", "0"]);
        cmd.stdout(Stdio::File(w));
        let mut child = cmd.spawn().unwrap();
        assert!(child.wait().unwrap().success(), "{s}");
        // The only write end left would be the parent's copy: EOF means it was closed. A
        // spawn of another test thread may hold a copy for a moment (between its clone and
        // its close_range/exec), so EOF may take a little while, but it must come.
        common::set_nonblocking(&r);
        let mut buf = [0u8; 16];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let n = loop {
            let n = r.read(&mut buf);
            match &n {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if std::time::Instant::now() >= deadline {
                        break n;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                _ => break n,
            }
        };
        assert!(matches!(n, Ok(0)), "{s}: read gave {n:?}; the Command still holds the write end");
        drop(cmd);
    }
}

#[test]
fn writes_reach_the_parent_through_a_mapped_pipe() {
    for s in Strategy::ALL {
        let (mut r, mut w) = pipe();
        let status = Command::new("sh")
            .args(["-c", "echo via-fd-7 >&7"])
            .fd(7, w.as_raw_fd())
            .strategy(s)
            .status()
            .unwrap();
        assert!(status.success(), "{s}");
        w.flush().unwrap();
        drop(w);
        let mut out = String::new();
        r.read_to_string(&mut out).unwrap();
        assert_eq!(out, "via-fd-7\n", "{s}");
    }
}

#[test]
fn a_copied_command_gets_its_own_fds_and_every_option() {
    let dir = TempDir::new("copy");
    let (file, path) = named_file(&dir, "copied");
    let mut original = probe_cmd(Strategy::CloneVfork, [] as [&str; 0]);
    original.stdin(Stdio::File(file)).env("SK_COPY", "yes").current_dir("/").kill_on_drop(true);
    let mut copy = original.try_clone().unwrap();
    // The original hands its file over at its spawn; the copy still has its own duplicate.
    for cmd in [&mut original, &mut copy] {
        let st = run_state(cmd);
        assert_eq!(fd(&st, 0).target, path);
        assert_eq!(st.env.get("SK_COPY").map(String::as_str), Some("yes"));
        assert_eq!(st.get("cwd"), "/");
    }
    let child = copy.try_clone().unwrap().stdout(Stdio::Null).spawn().unwrap();
    assert!(child.kills_on_drop());
    drop(child);
    // A hook is code: it cannot be copied.
    let mut hooked = Command::new("true");
    // SAFETY: the hook does nothing.
    unsafe { hooked.pre_exec(|| Ok(())) };
    assert_eq!(hooked.try_clone().unwrap_err().kind(), ErrorKind::InvalidInput);
}
