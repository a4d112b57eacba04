//! The clone3 fallback, for real: `spawnkit run` is started under a seccomp filter that
//! refuses clone3 (ENOSYS as on old kernels, EPERM as in container runtimes whose profiles
//! predate it). The launch must still work, through clone(2), and the child must still get
//! its handlers reset by hand (spawnkit, a Rust program, handles SIGSEGV and SIGBUS).

#![cfg(target_arch = "x86_64")]

use spawnkit::{Command, Stdio};

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const SYS_CLONE3: u32 = 435;

#[repr(C)]
struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;

/// Run `program args` with clone3 refused with `errno` by a seccomp filter installed in a
/// pre_exec hook; returns (exit code, stdout, stderr).
fn run_without_clone3(errno: i32, program: &str, args: &[&str]) -> (i32, String, String) {
    let sf = |code, k, jt, jf| SockFilter { code, jt, jf, k };
    let filter: Vec<SockFilter> = vec![
        sf(LD_W_ABS, 4, 0, 0),
        sf(JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        sf(RET_K, RET_ALLOW, 0, 0),
        sf(LD_W_ABS, 0, 0, 0),
        sf(JEQ_K, SYS_CLONE3, 0, 1),
        sf(RET_K, RET_ERRNO | errno as u32, 0, 0),
        sf(RET_K, RET_ALLOW, 0, 0),
    ];
    let addr = filter.as_ptr() as usize;
    let len = filter.len() as u16;
    let mut cmd = Command::new(program);
    cmd.args(args).stdout(Stdio::Pipe).stderr(Stdio::Pipe);
    // SAFETY: the hook makes two prctl system calls, async-signal-safe; `filter` outlives the
    // spawn (the hook runs in the forked child before `output` returns).
    unsafe {
        cmd.pre_exec(move || {
            let prog = SockFprog { len, filter: addr as *const SockFilter };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, 2, &prog as *const SockFprog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("spawn under seccomp");
    drop(filter);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn field<'a>(status: &'a str, key: &str) -> &'a str {
    status.lines().find_map(|l| l.strip_prefix(key)).map(str::trim).unwrap_or("")
}

fn spawnkit_cat_status(errno: i32) -> (i32, String, String) {
    let spawnkit = env!("CARGO_BIN_EXE_spawnkit");
    run_without_clone3(errno, spawnkit, &["run", "--", "cat", "/proc/self/status"])
}

#[test]
fn the_filter_really_refuses_clone3() {
    // Control: under the same filter a direct clone3 gets the chosen errno, so the tests below
    // prove the fallback. clone3(NULL, 0) is EINVAL without the filter.
    let py = "import ctypes; l = ctypes.CDLL(None, use_errno=True); \
              print(l.syscall(435, None, 0), ctypes.get_errno())";
    for errno in [libc::ENOSYS, libc::EPERM] {
        let (code, out, err) = run_without_clone3(errno, "python3", &["-c", py]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.trim(), format!("-1 {errno}"));
    }
}

#[test]
fn falls_back_to_clone_when_clone3_is_enosys() {
    let (code, out, err) = spawnkit_cat_status(libc::ENOSYS);
    assert_eq!(code, 0, "stderr: {err}");
    assert_eq!(field(&out, "Seccomp:"), "2", "the filter must be inherited: {out}");
    assert_eq!(field(&out, "SigCgt:"), "0000000000000000", "handlers not reset: {out}");
    assert_eq!(field(&out, "SigBlk:"), "0000000000000000");
}

#[test]
fn falls_back_to_clone_when_clone3_is_eperm() {
    let (code, out, err) = spawnkit_cat_status(libc::EPERM);
    assert_eq!(code, 0, "stderr: {err}");
    assert_eq!(field(&out, "SigCgt:"), "0000000000000000", "handlers not reset: {out}");
}
