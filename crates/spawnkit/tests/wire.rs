//! The wire form of a `Command` (docs/wire.md): every option round-trips, fds travel by
//! index, hostile bytes are errors (never panics, never absurd allocations), and a decoded
//! command spawns a child that sees what the original asked for.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

mod common;

use proptest::prelude::*;
use spawnkit::{
    Command, ErrorKind, IdMap, Lock, Namespaces, PathSearch, Resource, SigSet, Signal, Stdio,
    Strategy as Spawn, TmpOptions, UserMap,
};

// ---- a counting allocator: the largest single allocation made by this thread while armed.

struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to `System` unchanged; the bookkeeping only touches
// const-initialized thread-locals of `Copy` types, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on as it is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: the caller's contract for `realloc` is passed on as it is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn note(size: usize) {
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Decode `bytes` with `fds`, returning whether it decoded and the largest allocation.
fn decode_counted(bytes: &[u8], fds: Vec<OwnedFd>) -> (bool, usize) {
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let ok = Command::from_wire(bytes, fds).is_ok();
    ARMED.with(|a| a.set(false));
    (ok, LARGEST.with(Cell::get))
}

// ---- helpers

/// Fd numbers appear in plan text: every test of this file that opens fds holds this.
fn fd_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn pipe_fd() -> OwnedFd {
    let (r, _w) = common::pipe();
    OwnedFd::from(r)
}

fn ino(fd: RawFd) -> u64 {
    std::fs::metadata(format!("/proc/self/fd/{fd}")).expect("stat fd").ino()
}

/// Fds the receiver would get for `raw` (each a new fd for the same open file, as
/// SCM_RIGHTS gives), from the pool of copies.
fn received(raw: &[RawFd], pool: &[(RawFd, OwnedFd)]) -> Vec<OwnedFd> {
    raw.iter()
        .map(|&r| {
            let (_, owner) = pool.iter().find(|(n, _)| *n == r).expect("fd in the pool");
            owner.try_clone().expect("dup")
        })
        .collect()
}

fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spawnkit-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

// ---- strategies: every option of a Command

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..10)
}

fn os() -> impl Strategy<Value = OsString> {
    bytes().prop_map(OsString::from_vec)
}

fn path() -> impl Strategy<Value = PathBuf> {
    os().prop_map(PathBuf::from)
}

/// Bytes a plan accepts (no NUL), still not UTF-8 at times; `min` of them at least.
fn os_ok(min: usize) -> impl Strategy<Value = OsString> {
    prop::collection::vec(1u8..=255, min..10).prop_map(OsString::from_vec)
}

/// An environment variable name a plan accepts.
fn env_name() -> BoxedStrategy<OsString> {
    prop::collection::vec(
        prop::sample::select((1u8..=255).filter(|&b| b != b'=').collect::<Vec<u8>>()),
        1..8,
    )
    .prop_map(OsString::from_vec)
    .boxed()
}

fn signal() -> impl Strategy<Value = Signal> {
    (1i32..=64).prop_map(|n| Signal::new(n).expect("1..=64"))
}

fn resource() -> impl Strategy<Value = Resource> {
    prop::sample::select(Resource::ALL.to_vec())
}

fn namespaces() -> impl Strategy<Value = Namespaces> {
    prop::collection::vec(
        prop::sample::select(vec![
            Namespaces::USER,
            Namespaces::MOUNT,
            Namespaces::NET,
            Namespaces::PID,
            Namespaces::UTS,
            Namespaces::IPC,
            Namespaces::CGROUP,
        ]),
        0..4,
    )
    .prop_map(|v| v.into_iter().fold(Namespaces::empty(), Namespaces::union))
}

fn id_map() -> impl Strategy<Value = IdMap> {
    (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(inside, outside, count)| IdMap {
        inside,
        outside,
        count,
    })
}

fn user_map() -> impl Strategy<Value = UserMap> {
    prop_oneof![
        Just(UserMap::Root),
        Just(UserMap::Current),
        (prop::collection::vec(id_map(), 0..3), prop::collection::vec(id_map(), 0..3))
            .prop_map(|(uid, gid)| UserMap::Custom { uid, gid }),
    ]
}

fn tmp_options() -> impl Strategy<Value = TmpOptions> {
    any::<(bool, bool, bool)>().prop_map(|(nosuid, nodev, noexec)| TmpOptions {
        nosuid,
        nodev,
        noexec,
    })
}

fn timeout() -> impl Strategy<Value = Option<Duration>> {
    prop::option::of((any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)))
}

/// Where a standard stream goes; the fd-bearing ones get a pipe of their own.
#[derive(Debug, Clone, Copy)]
enum StdioSpec {
    Unset,
    Inherit,
    Null,
    Pipe,
    Stdout,
    Closed,
    File,
    Owned,
    Fd,
}

fn stdio_spec(with_fds: bool) -> BoxedStrategy<StdioSpec> {
    use StdioSpec::*;
    let plain = vec![Unset, Inherit, Null, Pipe, Stdout, Closed];
    let mut all = plain.clone();
    all.extend([File, Owned, Fd]);
    prop::sample::select(if with_fds { all } else { plain }).boxed()
}

/// Everything but the fds, applied to a command (split in groups: proptest tuples stop at 12).
#[derive(Debug, Clone)]
struct Spec {
    program: OsString,
    args: Vec<OsString>,
    arg0: Option<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    env_clear: bool,
    base_env: Option<Vec<(OsString, OsString)>>,
    cwd: Option<PathBuf>,
    stdio: [StdioSpec; 3],
    /// (child fd, which of three source pipes).
    maps: Vec<(RawFd, usize)>,
    close_other_fds: bool,
    sigmask: u64,
    restore_signals: bool,
    sig_default: Vec<Signal>,
    setsid: bool,
    pgid: Option<i32>,
    rlimits: Vec<(Resource, u64, u64)>,
    nice: Option<i32>,
    cpus: Option<Vec<usize>>,
    uid: Option<u32>,
    gid: Option<u32>,
    groups: Option<Vec<u32>>,
    umask: Option<u32>,
    pdeathsig: Option<Signal>,
    no_new_privs: bool,
    strategy: Spawn,
    kill_on_drop: bool,
    path_search: PathSearch,
    unshare: Namespaces,
    user_map: Option<UserMap>,
    private_tmp: Option<(Option<PathBuf>, TmpOptions)>,
    ro_binds: Vec<(PathBuf, PathBuf)>,
    private_net: bool,
    hostname: Option<OsString>,
    chroot: Option<PathBuf>,
    lock: Option<(Vec<u8>, bool, Option<Duration>)>,
    cgroup: Option<PathBuf>,
    keep_caps: bool,
}

/// Any command (`valid` false), or one whose plan builds often (`valid`: values a plan
/// accepts, so that the plan-text property compares whole plans, not only early errors).
fn spec(with_fds: bool, valid: bool) -> impl Strategy<Value = Spec> {
    let any_os = |min: usize| if valid { os_ok(min).boxed() } else { os().boxed() };
    let any_path = move || any_os(0).prop_map(PathBuf::from).boxed();
    let name = if valid { env_name() } else { os().boxed() };
    let stdio = |stream: usize| -> BoxedStrategy<StdioSpec> {
        use StdioSpec::*;
        if !valid {
            return stdio_spec(with_fds);
        }
        let mut ok = vec![Unset, Inherit, Null, Pipe, Closed];
        if stream == 2 {
            ok.push(Stdout);
        }
        if with_fds {
            ok.extend([File, Owned, Fd]);
        }
        prop::sample::select(ok).boxed()
    };
    let exec = (
        any_os(1),
        prop::collection::vec(any_os(0), 0..4),
        prop::option::of(any_os(0)),
        prop::collection::vec((name.clone(), prop::option::of(any_os(0))), 0..4),
        any::<bool>(),
        prop::option::of(prop::collection::vec((name, any_os(0)), 0..3)),
        prop::option::of(any_path()),
        [stdio(0), stdio(1), stdio(2)],
        if with_fds {
            prop::collection::vec((0i32..40, 0usize..3), 0..4).boxed()
        } else {
            Just(Vec::new()).boxed()
        },
        any::<bool>(),
    );
    let process = (
        any::<u64>(),
        any::<bool>(),
        prop::collection::vec(signal(), 0..3),
        any::<bool>(),
        prop::option::of(if valid { (0i32..100).boxed() } else { any::<i32>().boxed() }),
        prop::collection::vec((resource(), any::<u64>(), any::<u64>()), 0..3),
        prop::option::of(any::<i32>()),
        prop::option::of(if valid {
            prop::collection::vec(0usize..64, 1..4).boxed()
        } else {
            prop::collection::vec(0usize..9000, 0..4).boxed()
        }),
        prop::option::of(any::<u32>()),
        prop::option::of(any::<u32>()),
        prop::option::of(prop::collection::vec(any::<u32>(), 0..4)),
        prop::option::of(if valid { (0u32..=0o777).boxed() } else { any::<u32>().boxed() }),
    );
    let strategies =
        if valid { vec![Spawn::CloneVfork, Spawn::ForkExec] } else { Spawn::ALL.to_vec() };
    let rest = (
        prop::option::of(signal()),
        any::<bool>(),
        prop::sample::select(strategies),
        any::<bool>(),
        prop::sample::select(vec![PathSearch::Execvp, PathSearch::TryAll]),
    );
    let existing = || prop::sample::select(vec![PathBuf::from("/usr"), PathBuf::from("/etc")]);
    let isolation = (
        if valid {
            namespaces()
                .prop_map(|n| Namespaces::from_bits(n.bits() & !Namespaces::PID.bits()))
                .boxed()
        } else {
            namespaces().boxed()
        },
        prop::option::of(if valid {
            prop_oneof![
                Just(UserMap::Root),
                Just(UserMap::Current),
                (prop::collection::vec(id_map(), 1..3), prop::collection::vec(id_map(), 1..3))
                    .prop_map(|(uid, gid)| UserMap::Custom { uid, gid }),
            ]
            .boxed()
        } else {
            user_map().boxed()
        }),
        prop::option::of((
            prop::option::of(if valid { existing().boxed() } else { path().boxed() }),
            tmp_options(),
        )),
        if valid {
            prop::collection::vec((existing(), existing()), 0..3).boxed()
        } else {
            prop::collection::vec((path(), path()), 0..3).boxed()
        },
        any::<bool>(),
        prop::option::of(if valid {
            prop::collection::vec(1u8..=255, 1..=64).prop_map(OsString::from_vec).boxed()
        } else {
            os().boxed()
        }),
        prop::option::of(any_path()),
        prop::option::of((bytes(), any::<bool>(), timeout())),
        if valid { Just(None).boxed() } else { prop::option::weighted(0.2, path()).boxed() },
        any::<bool>(),
    );
    (exec, process, rest, isolation).prop_map(
        |(
            (program, args, arg0, env, env_clear, base_env, cwd, stdio, maps, close_other_fds),
            (
                sigmask,
                restore_signals,
                sig_default,
                setsid,
                pgid,
                rlimits,
                nice,
                cpus,
                uid,
                gid,
                groups,
                umask,
            ),
            (pdeathsig, no_new_privs, strategy, kill_on_drop, path_search),
            (
                unshare,
                user_map,
                private_tmp,
                ro_binds,
                private_net,
                hostname,
                chroot,
                lock,
                cgroup,
                keep_caps,
            ),
        )| Spec {
            program,
            args,
            arg0,
            env,
            env_clear,
            base_env,
            cwd,
            stdio,
            maps,
            close_other_fds,
            sigmask,
            restore_signals,
            sig_default,
            setsid,
            pgid,
            rlimits,
            nice,
            cpus,
            uid,
            gid,
            groups,
            umask,
            pdeathsig,
            no_new_privs,
            strategy,
            kill_on_drop,
            path_search,
            unshare,
            user_map,
            private_tmp,
            ro_binds,
            private_net,
            hostname,
            chroot,
            lock,
            cgroup,
            keep_caps,
        },
    )
}

/// The command `spec` describes, through the public builder; fd-bearing options use fds
/// from `pool` (three map sources first, then one per stdio stream that needs one).
/// `pool` holds, for each fd number the command refers to, an fd of this test for the
/// same pipe (the number itself for maps and `Stdio::Fd`).
fn build(spec: &Spec, pool: &mut Vec<(RawFd, OwnedFd)>) -> Command {
    let mut c = Command::new(&spec.program);
    c.args(&spec.args);
    if let Some(a) = &spec.arg0 {
        c.arg0(a);
    }
    if let Some(base) = &spec.base_env {
        c.base_env(base.iter().map(|(k, v)| (k, v)));
    }
    for (k, v) in &spec.env {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    if spec.env_clear {
        c.env_clear();
    }
    if let Some(d) = &spec.cwd {
        c.current_dir(d);
    }
    if !spec.maps.is_empty() {
        let sources: Vec<RawFd> = (0..3)
            .map(|_| {
                let fd = pipe_fd();
                let raw = fd.as_raw_fd();
                pool.push((raw, fd));
                raw
            })
            .collect();
        for &(child, which) in &spec.maps {
            c.fd(child, sources[which]);
        }
    }
    for (i, s) in spec.stdio.iter().enumerate() {
        let stdio = match s {
            StdioSpec::Unset => continue,
            StdioSpec::Inherit => Stdio::Inherit,
            StdioSpec::Null => Stdio::Null,
            StdioSpec::Pipe => Stdio::Pipe,
            StdioSpec::Stdout => Stdio::Stdout,
            StdioSpec::Closed => Stdio::Closed,
            StdioSpec::File | StdioSpec::Owned => {
                // The command owns this one; the pool keeps a copy to "send".
                let fd = pipe_fd();
                pool.push((fd.as_raw_fd(), fd.try_clone().expect("dup")));
                if matches!(s, StdioSpec::File) {
                    Stdio::File(File::from(fd))
                } else {
                    Stdio::Owned(fd)
                }
            }
            StdioSpec::Fd => {
                let fd = pipe_fd();
                let raw = fd.as_raw_fd();
                pool.push((raw, fd));
                Stdio::Fd(raw)
            }
        };
        match i {
            0 => c.stdin(stdio),
            1 => c.stdout(stdio),
            _ => c.stderr(stdio),
        };
    }
    c.close_other_fds(spec.close_other_fds)
        .signal_mask(SigSet::from_bits(spec.sigmask))
        .restore_signals(spec.restore_signals)
        .setsid(spec.setsid);
    for &s in &spec.sig_default {
        c.signal_default(s);
    }
    if let Some(p) = spec.pgid {
        c.process_group(p);
    }
    for &(r, soft, hard) in &spec.rlimits {
        c.rlimit(r, soft, hard);
    }
    if let Some(n) = spec.nice {
        c.nice(n);
    }
    if let Some(cpus) = &spec.cpus {
        c.cpu_affinity(cpus.iter().copied());
    }
    if let Some(u) = spec.uid {
        c.uid(u);
    }
    if let Some(g) = spec.gid {
        c.gid(g);
    }
    if let Some(g) = &spec.groups {
        c.groups(g.iter().copied());
    }
    if let Some(m) = spec.umask {
        c.umask(m);
    }
    if let Some(s) = spec.pdeathsig {
        c.parent_death_signal(s);
    }
    c.no_new_privs(spec.no_new_privs)
        .strategy(spec.strategy)
        .kill_on_drop(spec.kill_on_drop)
        .path_search(spec.path_search)
        .unshare(spec.unshare);
    if let Some(m) = &spec.user_map {
        c.user_map(m.clone());
    }
    if let Some((dir, options)) = &spec.private_tmp {
        c.private_tmp(dir.clone(), *options);
    }
    for (s, d) in &spec.ro_binds {
        c.ro_bind(s, d);
    }
    c.private_network(spec.private_net);
    if let Some(h) = &spec.hostname {
        c.hostname(h);
    }
    if let Some(d) = &spec.chroot {
        c.chroot(d);
    }
    if let Some((name, shared, timeout)) = &spec.lock {
        // Under a scratch directory, one name without '/': planning creates the file.
        let name: Vec<u8> = name.iter().copied().filter(|&b| b != b'/').collect();
        let path = scratch_dir().join(OsString::from_vec(name));
        c.lock(Lock { path, shared: *shared, timeout: *timeout });
    }
    if let Some(cg) = &spec.cgroup {
        c.cgroup(PathBuf::from("/sys/fs/cgroup/spawnkit-wire-test-none").join(cg));
    }
    c.keep_capabilities(spec.keep_caps);
    c
}

/// What a plan says, or why there is none.
fn plan_text(c: &Command) -> String {
    match c.plan() {
        Ok(p) => p.to_string(),
        Err(e) => format!("error: {e} ({:?})", e.kind()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every option, fds included: decoding then encoding again gives the same bytes (so no
    /// field is lost or changed: the bytes hold every one), and the same number of fds, each
    /// the same open file as the original's at that index.
    #[test]
    fn every_option_round_trips(spec in spec(true, false)) {
        let _guard = fd_lock();
        let mut pool = Vec::new();
        let original = build(&spec, &mut pool);
        let (bytes, fds) = original.to_wire().expect("encode");
        prop_assert_eq!(&bytes[..2], &Command::WIRE_VERSION.to_le_bytes()[..]);
        let inodes: Vec<u64> = fds.iter().map(|&fd| ino(fd)).collect();
        let passed = received(&fds, &pool);
        let decoded = Command::from_wire(&bytes, passed).expect("decode");
        let (again, fds_again) = decoded.to_wire().expect("encode again");
        prop_assert_eq!(&again, &bytes);
        prop_assert_eq!(fds_again.len(), fds.len());
        let inodes_again: Vec<u64> = fds_again.iter().map(|&fd| ino(fd)).collect();
        prop_assert_eq!(inodes_again, inodes);
        prop_assert_eq!(decoded.get_program(), original.get_program());
        prop_assert_eq!(decoded.get_args(), original.get_args());
        prop_assert_eq!(decoded.get_strategy(), original.get_strategy());
    }

    /// Every option but passed fds: the decoded command's plan (its steps, argv, envp
    /// candidates, clone flags, lock...) reads exactly as the original's, or fails the same.
    #[test]
    fn decoded_plan_reads_the_same(spec in prop_oneof![spec(false, true), spec(false, false)]) {
        let _guard = fd_lock();
        let mut pool = Vec::new();
        let original = build(&spec, &mut pool);
        let (bytes, fds) = original.to_wire().expect("encode");
        prop_assert!(fds.is_empty());
        let decoded = Command::from_wire(&bytes, Vec::new()).expect("decode");
        let (mut want, mut got) = (plan_text(&original), plan_text(&decoded));
        if got != want {
            // Plans show the fd numbers they open (/dev/null, the lock): a test thread that
            // holds no fd lock (proptest reading its regressions file as another property
            // starts) can shift one of them between the two plans. A real difference stays.
            (want, got) = (plan_text(&original), plan_text(&decoded));
        }
        if std::env::var_os("WIRE_DEBUG").is_some() {
            eprintln!("PLAN {}", want.lines().next().unwrap_or(""));
        }
        prop_assert_eq!(got, want);
    }
}

/// A valid encoding of a busy command, for the hostile-bytes properties.
fn sample_encoding() -> Vec<u8> {
    let mut c = Command::new("prog\u{ff}");
    c.args(["a", "b"])
        .env("K", "V")
        .env_remove("GONE")
        .current_dir("/tmp")
        .rlimit(Resource::Nofile, 64, 64)
        .signal_default(Signal::USR1)
        .unshare(Namespaces::USER.union(Namespaces::MOUNT))
        .user_map(UserMap::Custom {
            uid: vec![IdMap { inside: 0, outside: 1000, count: 1 }],
            gid: vec![],
        })
        .private_tmp(None, TmpOptions::default())
        .hostname("h")
        .lock(Lock { path: "/l".into(), shared: true, timeout: Some(Duration::from_millis(5)) })
        .stdout(Stdio::Pipe);
    c.to_wire().expect("encode").0
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    /// Arbitrary bytes (mostly behind a valid version, so they reach the decoder proper) are
    /// Ok or Err, never a panic, and never an allocation beyond what their size pays for.
    #[test]
    fn arbitrary_bytes_never_panic(
        versioned in any::<bool>(),
        body in prop::collection::vec(any::<u8>(), 0..300),
        nfds in 0usize..3,
    ) {
        let mut bytes = if versioned { Command::WIRE_VERSION.to_le_bytes().to_vec() } else { vec![] };
        bytes.extend(body);
        let _guard = fd_lock();
        let fds: Vec<OwnedFd> = (0..nfds).map(|_| pipe_fd()).collect();
        let (_, largest) = decode_counted(&bytes, fds);
        prop_assert!(largest <= 4096 + 64 * bytes.len(), "{} bytes allocated {largest}", bytes.len());
    }

    /// Truncations and bit flips of a valid encoding: Ok or Err, never a panic.
    #[test]
    fn damaged_encodings_never_panic(cut in any::<prop::sample::Index>(), flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..4)) {
        let mut bytes = sample_encoding();
        for (at, bit) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= 1 << bit;
        }
        let truncated = &bytes[..cut.index(bytes.len() + 1)];
        let (_, largest) = decode_counted(truncated, Vec::new());
        prop_assert!(largest <= 4096 + 64 * bytes.len());
        let (_, largest) = decode_counted(&bytes, Vec::new());
        prop_assert!(largest <= 4096 + 64 * bytes.len());
    }
}

#[test]
fn a_huge_length_prefix_is_an_error_not_an_allocation() {
    let mut bytes = Command::WIRE_VERSION.to_le_bytes().to_vec();
    // The program's length: 2^60 as a varint, then a few bytes.
    let mut n: u64 = 1 << 60;
    while n >= 0x80 {
        bytes.push((n as u8) | 0x80);
        n >>= 7;
    }
    bytes.push(n as u8);
    bytes.extend_from_slice(b"abc");
    let e = Command::from_wire(&bytes, Vec::new()).expect_err("2^60 bytes are not there");
    assert_eq!((e.kind(), e.step()), (ErrorKind::InvalidInput, "decode"));
    let (ok, largest) = decode_counted(&bytes, Vec::new());
    assert!(!ok);
    assert!(largest < 4096, "allocated {largest}");
    // The same for a list: an argument count of 2^60.
    let mut bytes = sample_encoding();
    bytes.truncate(2 + 1 + 6); // the version, the length of "prog\u{ff}" and its 6 bytes
    bytes.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10]);
    let (ok, largest) = decode_counted(&bytes, Vec::new());
    assert!(!ok);
    assert!(largest < 4096, "allocated {largest}");
}

#[test]
fn versions_and_trailing_bytes() {
    let bytes = sample_encoding();
    assert!(Command::from_wire(&bytes, Vec::new()).is_ok());
    for short in [&[][..], &[1][..]] {
        let e = Command::from_wire(short, Vec::new()).expect_err("too short");
        assert_eq!(e.to_string(), "decode: too short for the format version");
    }
    for other in [1u16, 3] {
        let mut v = bytes.clone();
        v[..2].copy_from_slice(&other.to_le_bytes());
        let e = Command::from_wire(&v, Vec::new()).expect_err("another version");
        // Unsupported, not InvalidInput: a peer of another version, not damaged bytes.
        assert_eq!((e.kind(), e.step()), (ErrorKind::Unsupported, "decode"));
        assert_eq!(
            e.to_string(),
            format!("decode version {other}: unknown wire format version (this build reads 2)")
        );
    }
    let mut trailing = bytes.clone();
    trailing.push(0);
    let e = Command::from_wire(&trailing, Vec::new()).expect_err("trailing");
    assert_eq!(e.to_string(), "decode: 1 trailing bytes");
    let e = Command::from_wire(&bytes[..bytes.len() - 1], Vec::new()).expect_err("cut");
    assert!(e.to_string().starts_with("decode: malformed command"), "{e}");
}

#[test]
fn bad_values_inside_are_errors() {
    // A signal outside 1..=64 and unknown namespace bits never become values.
    let mut c = Command::new("x");
    c.parent_death_signal(Signal::new(64).expect("64"));
    let (bytes, _) = c.to_wire().expect("encode");
    // 64 zigzag-encoded is 128 = [0x80, 0x01]; 65 would be [0x82, 0x01].
    let at = bytes.windows(3).position(|w| w == [1, 0x80, 0x01]).expect("Some(64) in the bytes");
    let mut bad = bytes.clone();
    bad[at + 1] = 0x82;
    let e = Command::from_wire(&bad, Vec::new()).expect_err("signal 65");
    assert!(e.to_string().contains("malformed command"), "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

#[test]
fn fds_travel_by_index_under_the_rules() {
    let _guard = fd_lock();
    let (a, b) = (pipe_fd(), pipe_fd());
    let mut c = Command::new("true");
    c.fd(3, a.as_raw_fd()).fd(4, b.as_raw_fd());
    let (bytes, fds) = c.to_wire().expect("encode");
    assert_eq!(fds, vec![a.as_raw_fd(), b.as_raw_fd()]);
    let two = || vec![a.try_clone().expect("dup"), b.try_clone().expect("dup")];
    assert!(Command::from_wire(&bytes, two()).is_ok());

    let err = |bytes: &[u8], fds: Vec<OwnedFd>| {
        let e = Command::from_wire(bytes, fds).expect_err("refused");
        assert_eq!((e.kind(), e.step()), (ErrorKind::InvalidInput, "decode"));
        e.to_string()
    };
    assert_eq!(err(&bytes, vec![]), "decode fd index 0: out of range (0 fds passed)");
    assert_eq!(
        err(&bytes, vec![a.try_clone().expect("dup")]),
        "decode fd index 1: out of range (1 fds passed)"
    );
    let mut three = two();
    three.push(pipe_fd());
    assert_eq!(err(&bytes, three), "decode fd index 2: passed but not used");

    // The maps on the wire: count 2, (3 zigzag = 6, index 0), (4 zigzag = 8, index 1).
    let at = bytes.windows(5).position(|w| w == [2, 6, 0, 8, 1]).expect("the maps");
    let mut twice = bytes.clone();
    twice[at + 4] = 0;
    assert_eq!(err(&twice, two()), "decode fd index 0: used twice");
    let mut same_child = bytes.clone();
    same_child[at + 3] = 6;
    assert_eq!(err(&same_child, two()), "decode child fd 3: mapped twice");

    // A fd used twice by the sender is listed twice: each index is used once.
    let mut c = Command::new("true");
    c.stdin(Stdio::Fd(a.as_raw_fd())).fd(5, a.as_raw_fd());
    let (bytes, fds) = c.to_wire().expect("encode");
    assert_eq!(fds, vec![a.as_raw_fd(), a.as_raw_fd()]);
    assert!(Command::from_wire(&bytes, two()).is_ok());

    // A negative fd is refused when encoding.
    let mut c = Command::new("true");
    c.stdout(Stdio::Fd(-1));
    let e = c.to_wire().expect_err("negative");
    assert_eq!(e.to_string(), "encode fd -1 -> 1: negative fd");
}

#[test]
fn a_pre_exec_hook_is_refused_by_name() {
    let mut c = Command::new("true");
    // SAFETY: the hook does nothing, and it is never run: the command is only encoded.
    unsafe {
        c.pre_exec(|| Ok(()));
    }
    let e = c.to_wire().expect_err("a hook is code");
    assert_eq!((e.kind(), e.step(), e.subject()), (ErrorKind::Unsupported, "encode", "pre_exec"));
    assert!(e.to_string().contains("pre_exec hook"), "{e}");
}

#[test]
fn a_decoded_command_spawns_with_its_options() {
    let _guard = fd_lock();
    let dir = scratch_dir().join("cwd \u{e9}");
    std::fs::create_dir_all(&dir).expect("cwd");
    let input = dir.join("stdin");
    std::fs::write(&input, b"from stdin by index\n").expect("stdin file");
    let (side_r, mut side_w) = common::pipe();
    side_w.write_all(b"from fd 5 by index\n").expect("write");
    drop(side_w);
    let side_r = OwnedFd::from(side_r);

    let stdin = OwnedFd::from(File::open(&input).expect("open"));
    let mut c = Command::new("sh");
    c.args(["-c", "pwd; printf '%s\\n' \"$WIRE_VAR\"; cat <&5; cat; echo oops >&2"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("WIRE_VAR", OsString::from_vec(b"v\xffw".to_vec()))
        .current_dir(&dir)
        .stdin(File::from(stdin.try_clone().expect("dup")))
        .stdout(Stdio::Pipe)
        .stderr(Stdio::Stdout)
        .fd(5, side_r.as_raw_fd());
    let (bytes, fds) = c.to_wire().expect("encode");
    assert_eq!(fds.len(), 2);
    assert_eq!(fds[1], side_r.as_raw_fd());
    // What the server would receive: new fds for the same files (stdin first, then maps).
    let passed = vec![stdin.try_clone().expect("dup"), side_r.try_clone().expect("dup")];
    drop(c);
    drop(side_r);
    let mut decoded = Command::from_wire(&bytes, passed).expect("decode");
    let out = decoded.output().expect("spawn the decoded command");
    assert!(out.status.success(), "{:?}", out.status);
    let mut want = dir.as_os_str().as_encoded_bytes().to_vec();
    want.extend_from_slice(b"\nv\xffw\nfrom fd 5 by index\nfrom stdin by index\noops\n");
    assert_eq!(String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&want));
    assert_eq!(out.stdout, want);
}

/// Values a client may send that the local builder can reach too: each is an error or works,
/// never a panic (a lock timeout past what an Instant holds, a child fd near i32::MAX), and
/// a decoded environment names each variable once (planning stays linear).
#[test]
fn extreme_values_from_the_wire_are_errors_or_work() {
    let _g = fd_lock();
    let lock = scratch_dir().join("extreme.lock");
    let mut c = Command::new("/bin/true");
    c.lock(spawnkit::Lock { path: lock, shared: false, timeout: Some(Duration::MAX) });
    let (bytes, _) = c.to_wire().expect("encode");
    let mut d = Command::from_wire(&bytes, Vec::new()).expect("decode");
    assert_eq!(d.status().expect("a free lock is taken at once"), spawnkit::ExitStatus::Exited(0));
    for strategy in spawnkit::Strategy::ALL {
        for target in [i32::MAX, (1 << 30) + 1] {
            let mut c = Command::new("/bin/true");
            c.strategy(strategy).fd(target, 1).keep_fd(target - 1);
            let e = c.spawn().expect_err("an fd past any fd table");
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{strategy} {target}: {e}");
            assert!(e.to_string().contains("above 2^30"), "{e}");
        }
        // Keeping an fd under its own number writes nothing there: any number plans, and one
        // that is not open is the child's EBADF, not a panic.
        let mut c = Command::new("/bin/true");
        c.strategy(strategy).keep_fd(i32::MAX);
        let e = c.status().expect_err("fd i32::MAX is not open");
        assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{strategy}: {e}");
    }
    let mut c = Command::new("x");
    c.env("AAAA", "1").env("AAAB", "2");
    let (mut bytes, _) = c.to_wire().expect("encode");
    let at = bytes.windows(4).position(|w| w == b"AAAB").expect("the second name");
    bytes[at + 3] = b'A';
    let e = Command::from_wire(&bytes, Vec::new()).expect_err("a name twice");
    assert_eq!(e.to_string(), "decode: an environment name appears twice in the changes");
}

/// The layout of version 2, byte for byte: a derived type that gains a field or reorders its
/// variants changes these bytes without touching `WIRE_VERSION`. If this fails, the wire
/// form changed: bump `Command::WIRE_VERSION` (and docs/wire.md), then update the bytes.
/// (Version 2 is version 1 with `may_die_before_exec` at the end: the last byte.)
#[test]
fn the_version_2_layout_is_pinned() {
    let mut c = Command::new("prog");
    c.arg0("zero")
        .args(["a", "b"])
        .env("K", "v")
        .env_remove("R")
        .base_env([("B", "1")])
        .current_dir("/w")
        .stdin(spawnkit::Stdio::Null)
        .stdout(spawnkit::Stdio::Pipe)
        .stderr(spawnkit::Stdio::Stdout)
        .close_other_fds(false)
        .signal_mask(spawnkit::SigSet::empty().with(Signal::new(10).expect("USR1")))
        .restore_signals(false)
        .signal_default(Signal::new(2).expect("INT"))
        .setsid(true)
        .process_group(0)
        .rlimit(Resource::Nofile, 64, 128)
        .nice(3)
        .cpu_affinity([0, 1])
        .uid(7)
        .gid(8)
        .groups([9])
        .umask(0o22)
        .parent_death_signal(Signal::new(15).expect("TERM"))
        .no_new_privs(true)
        .strategy(spawnkit::Strategy::ForkExec)
        .kill_on_drop(true)
        .path_search(spawnkit::PathSearch::TryAll)
        .unshare(Namespaces::MOUNT.union(Namespaces::NET))
        .user_map(UserMap::Custom {
            uid: vec![IdMap { inside: 0, outside: 1000, count: 1 }],
            gid: vec![IdMap { inside: 0, outside: 1000, count: 1 }],
        })
        .private_tmp(Some(PathBuf::from("/t")), TmpOptions::default())
        .ro_bind("/s", "/d")
        .private_network(true)
        .hostname("h")
        .chroot("/r")
        .lock(spawnkit::Lock {
            path: PathBuf::from("/l"),
            shared: true,
            timeout: Some(Duration::from_millis(1500)),
        })
        .cgroup("/c")
        .keep_capabilities(true)
        .may_die_before_exec(true);
    let (bytes, fds) = c.to_wire().expect("encode");
    assert!(fds.is_empty());
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, PINNED_V2, "the wire layout changed: bump WIRE_VERSION");
}

const PINNED_V2: &str = "02000470726f67020161016201047a65726f0002014b01017601520001010142013101022f770101010201030000800400020101000107408001010601020001010701080101090112011e01020101808088800401020100e807010100e807010101022f7401010001022f73022f640101016801022f7201022f6c01010180cab5ee0101022f630101";

/// `Stdio::Closed` came after version 1's layout was pinned: it is the last variant of a
/// stream, so every earlier encoding stays as it was, and it travels as itself (no fd).
#[test]
fn closed_streams_travel_as_themselves() {
    let mut c = Command::new("prog");
    c.stdin(Stdio::Closed).stdout(Stdio::Closed).stderr(Stdio::Stdout);
    let (bytes, fds) = c.to_wire().expect("encode");
    assert!(fds.is_empty());
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    // ... cwd None, the streams Some(5) Some(5) Some(3) (Closed, Closed, Stdout), no maps.
    assert!(hex.contains("0001050105010300"), "{hex}");
    let decoded = Command::from_wire(&bytes, Vec::new()).expect("decode");
    assert_eq!(decoded.to_wire().expect("encode again").0, bytes);
    assert_eq!(plan_text(&decoded), plan_text(&c));
    assert!(plan_text(&decoded).contains("close_range fds 0..=0\n"), "{}", plan_text(&c));
}

/// A pipe's write end to pass, and whether its read end sees EOF (every copy of the write
/// end closed) — without blocking.
fn writer_and_eof_probe() -> (OwnedFd, impl Fn() -> bool) {
    let (r, w) = common::pipe();
    let r = OwnedFd::from(r);
    let probe = move || {
        let mut p = libc::pollfd { fd: r.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd on a live local fd, no wait.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & libc::POLLHUP != 0
    };
    (OwnedFd::from(w), probe)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    /// Fd maps and stdio fds whose indices disagree with the fds passed (too few, too many),
    /// child fds at the extremes: decoding is Ok or an error, never a panic, and once the
    /// result is dropped every fd passed is closed (the server relies on it).
    #[test]
    fn passed_fds_are_closed_whatever_the_indices(
        maps in prop::collection::vec((prop_oneof![Just(i32::MIN), Just(-1), 0..8i32, Just((1 << 30) + 1), Just(i32::MAX)], 0usize..3), 0..4),
        stdin_fd in any::<bool>(),
        passed in 0usize..5,
    ) {
        let _guard = fd_lock();
        let pool: Vec<OwnedFd> = (0..3).map(|_| pipe_fd()).collect();
        let mut c = Command::new("/bin/true");
        for (child, which) in &maps {
            c.fd(*child, pool[*which].as_raw_fd());
        }
        if stdin_fd {
            c.stdin(Stdio::Fd(pool[0].as_raw_fd()));
        }
        let Ok((bytes, _)) = c.to_wire() else { return Ok(()) }; // a negative fd: refused at encode
        let mut probes = Vec::new();
        let mut fds = Vec::new();
        for _ in 0..passed {
            let (w, probe) = writer_and_eof_probe();
            fds.push(w);
            probes.push(probe);
        }
        let decoded = Command::from_wire(&bytes, fds);
        if let Ok(cmd) = &decoded {
            let _ = cmd.plan(); // plans, or refuses an extreme child fd: no panic
        }
        drop(decoded);
        for (i, probe) in probes.iter().enumerate() {
            prop_assert!(probe(), "fd {} of {} still open after the decode was dropped", i, passed);
        }
    }
}
