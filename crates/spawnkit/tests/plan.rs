//! Plans are data: what a Command compiles to, checked without spawning.

mod common;

use std::ffi::OsString;

use spawnkit::{Command, FdRef, Resource, SigSet, Signal, Step, Strategy, DEFAULT_PATH};

fn steps(cmd: &Command) -> Vec<Step> {
    cmd.plan().unwrap().steps().to_vec()
}

fn close_ranges(steps: &[Step]) -> Vec<(u32, u32)> {
    steps
        .iter()
        .filter_map(|s| match s {
            Step::CloseRange { first, last } => Some((*first, *last)),
            _ => None,
        })
        .collect()
}

const SIGPIPE_XFSZ: u64 = (1 << (libc::SIGPIPE - 1)) | (1 << (libc::SIGXFSZ - 1));

#[test]
fn a_plain_command_resets_pipe_and_xfsz_and_closes_from_3() {
    let cmd = Command::new("true");
    assert_eq!(
        steps(&cmd),
        [Step::SignalDefault { set: SIGPIPE_XFSZ }, Step::CloseRange { first: 3, last: u32::MAX }]
    );
    let plan = cmd.plan().unwrap();
    assert_eq!(plan.strategy(), Strategy::CloneVfork);
    assert_eq!(plan.signal_mask(), 0);
    assert_eq!(plan.argv(), [OsString::from("true")]);
}

#[test]
fn restore_signals_off_and_close_other_fds_off_leave_no_steps() {
    let mut cmd = Command::new("true");
    cmd.restore_signals(false).close_other_fds(false);
    assert_eq!(steps(&cmd), []);
    cmd.signal_default(Signal::USR2).signal_default(Signal::HUP);
    let want = (1u64 << (libc::SIGUSR2 - 1)) | (1u64 << (libc::SIGHUP - 1));
    assert_eq!(steps(&cmd), [Step::SignalDefault { set: want }]);
}

#[test]
fn signal_mask_is_carried() {
    let mut cmd = Command::new("true");
    let set: SigSet = [Signal::TERM, Signal::INT].into_iter().collect();
    cmd.signal_mask(set);
    assert_eq!(cmd.plan().unwrap().signal_mask(), (1 << 14) | (1 << 1));
    assert!(set.contains(Signal::TERM) && !set.contains(Signal::HUP));
    assert_eq!(SigSet::from_bits(set.bits()), set);
}

#[test]
fn a_signal_mask_cannot_hold_kill_or_stop() {
    // The kernel silently leaves them out of any mask: asking is an error in every face.
    let stop: Signal = "STOP".parse().unwrap();
    for sig in [Signal::KILL, stop] {
        assert!(!sig.can_be_blocked());
        let e = SigSet::empty().with(Signal::INT).try_with(sig).unwrap_err();
        assert_eq!(e.kind(), spawnkit::ErrorKind::InvalidInput);
        assert_eq!(e.to_string(), format!("sigprocmask: {sig} cannot be blocked"));
    }
    let set = SigSet::empty().try_with(Signal::INT).unwrap().try_with(Signal::new(64).unwrap());
    assert_eq!(set.unwrap().bits(), (1 << 1) | (1 << 63));
}

#[test]
fn a_signed_limit_is_unlimited_at_minus_one_and_refused_below() {
    use spawnkit::RLIM_INFINITY;
    let r = Resource::Nofile;
    assert_eq!(r.limit_from_signed(0).unwrap(), 0);
    assert_eq!(r.limit_from_signed(64).unwrap(), 64);
    // -1 is (rlim_t)-1, RLIM_INFINITY, as C and Python's resource module write it.
    assert_eq!(r.limit_from_signed(-1).unwrap(), RLIM_INFINITY);
    // No limit is larger than no limit.
    assert_eq!(r.limit_from_signed(u64::MAX as i128).unwrap(), RLIM_INFINITY);
    assert_eq!(r.limit_from_signed(1 << 70).unwrap(), RLIM_INFINITY);
    for bad in [-2, -(1 << 63), i128::MIN] {
        let e = r.limit_from_signed(bad).unwrap_err();
        assert_eq!(e.kind(), spawnkit::ErrorKind::InvalidInput);
        assert_eq!(
            e.to_string(),
            format!("setrlimit NOFILE: {bad} is not a limit (0 or more, or -1 for unlimited)")
        );
    }
}

#[test]
fn kept_fds_split_the_close_ranges() {
    let mut cmd = Command::new("true");
    cmd.fd(5, 5).fd(9, 9);
    let st = steps(&cmd);
    assert_eq!(close_ranges(&st), [(3, 4), (6, 8), (10, u32::MAX)]);
    assert!(st.contains(&Step::ClearCloexec { fd: 5 }));
    assert!(st.contains(&Step::ClearCloexec { fd: 9 }));
    // Adjacent and first-slot fds leave no empty ranges.
    let mut cmd = Command::new("true");
    cmd.keep_fd(3).keep_fd(4).keep_fd(6);
    assert_eq!(close_ranges(&steps(&cmd)), [(5, 5), (7, u32::MAX)]);
    // Maps onto 0..=2 do not split anything.
    let mut cmd = Command::new("true");
    cmd.fd(1, 7);
    assert_eq!(close_ranges(&steps(&cmd)), [(3, u32::MAX)]);
}

#[test]
fn close_ranges_come_after_every_dup() {
    let mut cmd = Command::new("true");
    cmd.fd(5, 20).fd(6, 21);
    let st = steps(&cmd);
    let last_dup = st.iter().rposition(|s| matches!(s, Step::Dup2 { .. })).unwrap();
    let first_close = st.iter().position(|s| matches!(s, Step::CloseRange { .. })).unwrap();
    assert!(last_dup < first_close, "{st:?}");
    assert_eq!(close_ranges(&st), [(3, 4), (7, u32::MAX)]);
}

#[test]
fn a_swap_moves_both_sources_away_first() {
    let mut cmd = Command::new("true");
    cmd.restore_signals(false).fd(3, 4).fd(4, 3);
    let st = steps(&cmd);
    assert_eq!(
        st,
        [
            Step::DupAway { fd: 4, above: 5, slot: 0, target: 3 },
            Step::DupAway { fd: 3, above: 5, slot: 1, target: 4 },
            Step::Dup2 { from: FdRef::Slot { index: 0, fd: 4 }, to: 3 },
            Step::Dup2 { from: FdRef::Slot { index: 1, fd: 3 }, to: 4 },
            Step::CloseRange { first: 5, last: u32::MAX },
        ]
    );
    let text = cmd.plan().unwrap().to_string();
    assert!(text.contains("dup2 fd 4 -> 3 (via a copy >= 5)"), "{text}");
    assert!(text.contains("close_range fds 5.."), "{text}");
}

#[test]
fn a_cycle_of_three_moves_every_source_away() {
    let mut cmd = Command::new("true");
    cmd.restore_signals(false).close_other_fds(false).fd(10, 11).fd(11, 12).fd(12, 10);
    let st = steps(&cmd);
    let away: Vec<_> = st
        .iter()
        .filter_map(|s| match s {
            Step::DupAway { fd, above, .. } => Some((*fd, *above)),
            _ => None,
        })
        .collect();
    assert_eq!(away, [(11, 13), (12, 13), (10, 13)]);
    let dups: Vec<_> = st
        .iter()
        .filter_map(|s| match s {
            Step::Dup2 { from: FdRef::Slot { fd, .. }, to } => Some((*fd, *to)),
            _ => None,
        })
        .collect();
    assert_eq!(dups, [(11, 10), (12, 11), (10, 12)]);
    // Every DupAway comes before the first Dup2.
    let last_away = st.iter().rposition(|s| matches!(s, Step::DupAway { .. })).unwrap();
    let first_dup = st.iter().position(|s| matches!(s, Step::Dup2 { .. })).unwrap();
    assert!(last_away < first_dup);
}

#[test]
fn a_chain_without_a_cycle_needs_no_copy_only_when_sources_are_not_targets() {
    let mut cmd = Command::new("true");
    cmd.restore_signals(false).close_other_fds(false).fd(3, 10).fd(4, 11);
    assert_eq!(
        steps(&cmd),
        [Step::Dup2 { from: FdRef::Fd(10), to: 3 }, Step::Dup2 { from: FdRef::Fd(11), to: 4 },]
    );
}

#[test]
fn steps_come_in_the_documented_order() {
    let mut cmd = Command::new("true");
    cmd.no_new_privs(true)
        .parent_death_signal(Signal::TERM)
        .uid(65534)
        .gid(65534)
        .current_dir("/tmp")
        .cpu_affinity([0])
        .nice(1)
        .rlimit(Resource::Core, 0, 0)
        .umask(0o22)
        .fd(5, 6)
        .process_group(0)
        .setsid(true);
    let names: Vec<&str> = steps(&cmd)
        .iter()
        .map(|s| match s {
            Step::SignalDefault { .. } => "signals",
            Step::Setsid => "setsid",
            Step::Setpgid { .. } => "setpgid",
            Step::Dup2 { .. } => "dup2",
            Step::CloseRange { .. } => "close",
            Step::Umask { .. } => "umask",
            Step::Setrlimit { .. } => "rlimit",
            Step::Nice { .. } => "nice",
            Step::Affinity { .. } => "affinity",
            Step::Chdir { .. } => "chdir",
            Step::Setgroups { .. } => "groups",
            Step::Setgid { .. } => "gid",
            Step::Setuid { .. } => "uid",
            Step::ParentDeathSignal { .. } => "pdeathsig",
            Step::NoNewPrivs => "nnp",
            other => panic!("unexpected step {other:?}"),
        })
        .collect();
    assert_eq!(
        names,
        [
            "signals",
            "setsid",
            "setpgid",
            "dup2",
            "close",
            "close",
            "umask",
            "rlimit",
            "nice",
            "affinity",
            "chdir",
            "groups",
            "gid",
            "uid",
            "pdeathsig",
            "nnp"
        ]
    );
}

#[test]
fn uid_without_groups_drops_them_tolerating_eperm() {
    let mut cmd = Command::new("true");
    cmd.uid(1000);
    let st = steps(&cmd);
    assert!(st.contains(&Step::Setgroups { groups: vec![], ignore_eperm: true }), "{st:?}");
    assert!(st.contains(&Step::Setuid { uid: 1000 }));
    cmd.groups([4, 5]);
    let st = steps(&cmd);
    assert!(st.contains(&Step::Setgroups { groups: vec![4, 5], ignore_eperm: false }), "{st:?}");
}

#[test]
fn affinity_mask_and_list() {
    let mut cmd = Command::new("true");
    cmd.cpu_affinity([65, 1, 1, 0]);
    let st = steps(&cmd);
    assert!(
        st.contains(&Step::Affinity { mask: vec![0b11, 0b10], cpus: vec![0, 1, 65] }),
        "{st:?}"
    );
    let text = cmd.plan().unwrap().to_string();
    assert!(text.contains("sched_setaffinity cpus 0,1,65"), "{text}");
}

#[test]
fn nice_is_computed_from_the_parents_niceness() {
    // SAFETY: getpriority without memory arguments; errno is cleared first.
    let base = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, 0)
    };
    let mut cmd = Command::new("true");
    cmd.nice(3);
    assert!(steps(&cmd).contains(&Step::Nice { value: (base + 3).clamp(-20, 19) }));
    cmd.nice(-100);
    assert!(steps(&cmd).contains(&Step::Nice { value: -20 }));
}

#[test]
fn path_candidates_follow_the_childs_path() {
    let mut cmd = Command::new("prog");
    cmd.env("PATH", "/a:/b/::c");
    let plan = cmd.plan().unwrap();
    let cands: Vec<String> =
        plan.candidates().iter().map(|c| c.to_string_lossy().into_owned()).collect();
    assert_eq!(cands, ["/a/prog", "/b/prog", "prog", "c/prog"]);

    let mut cmd = Command::new("prog");
    cmd.env_clear();
    let cands: Vec<String> =
        cmd.plan().unwrap().candidates().iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let want: Vec<String> = DEFAULT_PATH.split(':').map(|d| format!("{d}/prog")).collect();
    assert_eq!(cands, want);

    // A program with a slash is never searched.
    let mut cmd = Command::new("./dir/prog");
    cmd.env("PATH", "/a:/b");
    assert_eq!(cmd.plan().unwrap().candidates(), [OsString::from("./dir/prog")]);
}

#[test]
fn argv_uses_arg0() {
    let mut cmd = Command::new("/bin/echo");
    cmd.arg0("hello").args(["a", "b"]);
    assert_eq!(cmd.plan().unwrap().argv(), ["hello", "a", "b"].map(OsString::from));
    assert_eq!(cmd.get_program(), "/bin/echo");
    assert_eq!(cmd.get_args(), ["a", "b"].map(OsString::from));
}

#[test]
fn display_lists_every_step() {
    let mut cmd = Command::new("/bin/echo");
    cmd.arg("hi")
        .strategy(Strategy::ForkExec)
        .rlimit(Resource::Nofile, 64, spawnkit::RLIM_INFINITY)
        .current_dir("/tmp")
        .umask(0o27);
    let text = cmd.plan().unwrap().to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "strategy fork-exec",
            "sigaction SIGPIPE,SIGXFSZ SIG_DFL",
            "close_range fds 3..",
            "umask 0027",
            "setrlimit NOFILE 64:unlimited",
            "chdir \"/tmp\"",
            "sigprocmask SETMASK 0x0",
            "execve \"/bin/echo\" argv [\"/bin/echo\", \"hi\"]",
        ]
    );
}

/// `b` as an OsStr.
fn os(b: &[u8]) -> &std::ffi::OsStr {
    std::os::unix::ffi::OsStrExt::from_bytes(b)
}

#[test]
fn display_escapes_what_is_not_printable_utf8() {
    // As ls --quoting-style=c inside quotes and ls -b (escape) for bare paths: the text is
    // exact (every byte can be read back) and unambiguous (a backslash always starts an
    // escape). Printable UTF-8, accents and CJK included, stays as it is.
    let dir = os(b"/tmp/d\xff\\ \"q\"\t\n\x1b\x7f\xc3\xa9\xe6\x97\xa5");
    // A bind source must exist (its mount flags are read when planning).
    let tmp = common::TempDir::new("escape");
    let bind = tmp.path().join(os(b"a b\xff"));
    std::fs::create_dir(&bind).unwrap();
    let shown = format!(r"{}/a\ b\377", tmp.path().display());
    let mut cmd = Command::new(os(b"/bin/tr\xfe"));
    cmd.args([os(b"a\xff"), os(b"b\\c"), os("e\u{301}".as_bytes()), os("\u{202e}x".as_bytes())])
        .current_dir(dir)
        .hostname(os(b"h\xff"))
        .ro_bind(&bind, &bind);
    let text = cmd.plan().unwrap().to_string();
    let lines: Vec<&str> = text.lines().collect();
    let (mount, remount) = (
        format!("mount bind {shown} on {shown}"),
        format!("mount remount,ro on {shown} (recursive)"),
    );
    for line in [
        "chdir \"/tmp/d\\377\\\\ \\\"q\\\"\\t\\n\\033\\177\u{e9}\u{65e5}\"",
        r#"sethostname "h\377""#,
        &mount,
        &remount,
        // A combining accent after its base is shown as is; a bidi override is escaped.
        concat!(
            r#"execve "/bin/tr\376" argv ["/bin/tr\376", "a\377", "b\\c", "#,
            "\"e\u{301}\", ",
            r#""\342\200\256x"]"#
        ),
    ] {
        assert!(lines.contains(&line), "missing {line}\nin:\n{text}");
    }
    // Error messages quote the same way.
    let e = Command::new("true").current_dir(os(b"/nope/\xff")).status().unwrap_err();
    assert_eq!(e.to_string(), r#"chdir "/nope/\377": No such file or directory (os error 2)"#);
    assert_eq!(spawnkit::quoted(os(b"plain")), "\"plain\"");
    assert_eq!(spawnkit::quoted(os(b"\\377")), r#""\\377""#, "a literal backslash is escaped");
    // NUL (only messages refusing one show it) is \0, or \000 before an octal digit.
    assert_eq!(spawnkit::quoted(os(b"a\0b")), r#""a\0b""#);
    assert_eq!(spawnkit::quoted(os(b"a\x001")), r#""a\0001""#);
}

#[test]
fn strategy_is_part_of_the_plan() {
    for s in Strategy::ALL {
        let mut cmd = Command::new("true");
        cmd.strategy(s);
        assert_eq!(cmd.plan().unwrap().strategy(), s);
        assert_eq!(cmd.get_strategy(), s);
        assert_eq!(s.to_string(), s.name());
    }
    assert_eq!(Strategy::default(), Strategy::CloneVfork);
}

#[test]
fn planning_twice_gives_the_same_steps() {
    let mut cmd = Command::new("true");
    cmd.fd(3, 4).fd(4, 3).rlimit(Resource::Core, 0, 0).setsid(true);
    assert_eq!(steps(&cmd), steps(&cmd));
}

#[test]
fn plan_makes_the_pipes_and_dropping_it_closes_them() {
    // As documented: plan() opens the fds the child will get, so the steps show real numbers.
    let mut cmd = Command::new("true");
    cmd.stdout(spawnkit::Stdio::Pipe);
    let plan = cmd.plan().unwrap();
    let src = plan
        .steps()
        .iter()
        .find_map(|s| match s {
            Step::Dup2 { from: FdRef::Fd(fd), to: 1 } => Some(*fd),
            _ => None,
        })
        .expect("a dup2 onto fd 1");
    let link = |fd: i32| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok();
    let pipe = link(src).expect("the pipe end is open while the plan lives");
    assert!(pipe.to_string_lossy().starts_with("pipe:["), "{pipe:?}");
    drop(plan);
    // Closed now (the number may be reused by another test thread, but not for this pipe).
    assert_ne!(link(src), Some(pipe));
}
