//! Parsers for the /proc text the process table reads: `/proc/PID/stat`, the two lines of
//! `/proc/PID/status` it needs (`Tgid:`, `Uid:`), `btime` in `/proc/stat`, and the `hidepid`
//! option of a procfs mount in `/proc/PID/mountinfo`.
//!
//! Pure functions on bytes, no I/O. Text they do not understand gives `None`; no input makes
//! them panic (property-tested below on odd `comm` values and on arbitrary bytes).

use super::process::{Comm, State};

/// The fields of `/proc/PID/stat` the table keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stat {
    /// Field 1: the pid (the tid when the file was `/proc/TID/stat` of a thread).
    pub pid: i32,
    /// Field 2: `comm`, truncated to [`Comm::MAX`] bytes (the kernel shows up to 63 bytes
    /// for kernel threads such as workqueue workers).
    pub comm: Comm,
    /// Field 3.
    pub state: State,
    /// Field 4.
    pub ppid: i32,
    /// Field 20.
    pub threads: u32,
    /// Field 22, clock ticks after boot.
    pub start_ticks: u64,
    /// Field 24, resident pages.
    pub rss_pages: u64,
}

/// Parse one `/proc/PID/stat` line.
///
/// The kernel writes it in `fs/proc/array.c` (`do_task_stat`) as `PID (COMM) S PPID ...`,
/// fields separated by one space, ending in a newline. COMM may contain any byte but NUL,
/// spaces, parentheses and newlines included, so it is taken from the first `(` to the
/// *last* `)`: nothing after it can contain a `)`. Fields after 24 are not needed and not
/// checked (older kernels print fewer).
pub(crate) fn stat(text: &[u8]) -> Option<Stat> {
    let open = text.iter().position(|&b| b == b'(')?;
    let close = text.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let pid = dec_i32(text[..open].strip_suffix(b" ")?)?;
    let comm = Comm::new(&text[open + 1..close]);
    // After the comm: " S PPID PGRP ...": field N (1-based, as proc(5) counts) is token
    // N - 3 of what follows.
    let mut tokens =
        text[close + 1..].split(|&b| b == b' ' || b == b'\n').filter(|t| !t.is_empty());
    let state = match tokens.next()? {
        [c] => State::from_letter(*c),
        _ => return None,
    };
    let ppid = dec_i32(tokens.next()?)?;
    // Fields 5..=19 (pgrp .. nice): skip 15, checking that they are there.
    let threads = u32::try_from(dec_i64(tokens.nth(15)?)?).ok()?;
    let start_ticks = dec_u64(tokens.nth(1)?)?;
    let rss_pages = dec_u64(tokens.nth(1)?)?;
    Some(Stat { pid, comm, state, ppid, threads, start_ticks, rss_pages })
}

/// The value of the `/proc/PID/status` line that starts with `key` (`b"Uid:"`), without
/// the key and the surrounding whitespace. The `Name:` line escapes newlines in the comm
/// (`\n` as backslash-n), so a key is only ever found at the start of a real line.
pub(crate) fn status_value<'a>(text: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let mut rest = text;
    loop {
        if let Some(value) = rest.strip_prefix(key) {
            let end = value.iter().position(|&b| b == b'\n').unwrap_or(value.len());
            return Some(value[..end].trim_ascii());
        }
        let nl = rest.iter().position(|&b| b == b'\n')?;
        rest = &rest[nl + 1..];
    }
}

/// The effective uid from `/proc/PID/status` (`Uid:` lists real, effective, saved, fs; procps
/// `uid`/`euid` show the effective one).
pub(crate) fn status_euid(text: &[u8]) -> Option<u32> {
    let line = status_value(text, b"Uid:")?;
    let effective = line.split(|b| b.is_ascii_whitespace()).filter(|t| !t.is_empty()).nth(1)?;
    u32::try_from(dec_u64(effective)?).ok()
}

/// The thread-group id from `/proc/PID/status` (`Tgid:`): equal to the pid for a process,
/// different when the pid named a thread.
pub(crate) fn status_tgid(text: &[u8]) -> Option<i32> {
    dec_i32(status_value(text, b"Tgid:")?)
}

/// The boot time (Unix seconds) from `/proc/stat`'s `btime` line.
pub(crate) fn btime(text: &[u8]) -> Option<u64> {
    dec_u64(status_value(text, b"btime ")?)
}

/// The options of a procfs mount that decide which processes it shows a reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcMount<'a> {
    /// The value of `hidepid=` (`noaccess`, `invisible`, `ptraceable`; `1`, `2`, `4` before
    /// Linux 5.8), `None` when it hides no process (no option, or `off`).
    pub hidepid: Option<&'a [u8]>,
    /// `gid=`: members of this group see every process despite `hidepid` (noaccess and
    /// invisible only); 0 (root's group) when not given.
    pub gid: u32,
}

/// What `/proc/PID/mountinfo` says about the mount of device `major:minor`, when it is a
/// procfs; `None` when no procfs mount has that device.
///
/// A line reads `36 25 0:22 / /proc rw,nosuid shared:12 - proc proc rw,hidepid=invisible`:
/// the device is field 3, and after the `-` come the file system type, the source and the
/// superblock's options, which every mount of that superblock shares (the kernel prints
/// `hidepid=` only when it is not `off`, and `gid=` only when it is not 0).
pub(crate) fn proc_mount(text: &[u8], major: u32, minor: u32) -> Option<ProcMount<'_>> {
    let dev = format!("{major}:{minor}");
    for line in text.split(|&b| b == b'\n') {
        let mut fields = line.split(|&b| b == b' ');
        if fields.nth(2) != Some(dev.as_bytes()) {
            continue;
        }
        let mut after = fields.skip_while(|f| *f != b"-").skip(1);
        if after.next() != Some(b"proc") {
            continue;
        }
        let Some(options) = after.nth(1) else { continue };
        let mut mount = ProcMount { hidepid: None, gid: 0 };
        for option in options.split(|&b| b == b',') {
            if let Some(v) = option.strip_prefix(b"hidepid=") {
                mount.hidepid = Some(v).filter(|v| !matches!(*v, b"off" | b"0"));
            } else if let Some(v) = option.strip_prefix(b"gid=") {
                mount.gid = u32::try_from(dec_u64(v)?).ok()?;
            }
        }
        return Some(mount);
    }
    None
}

/// Whether the reader whose `/proc/PID/status` is `text` is a member of group `gid`, as the
/// kernel's `in_group_p` decides: its filesystem gid (the fourth of `Gid:`) or one of its
/// supplementary `Groups:`. `None` when the lines do not parse.
pub(crate) fn status_in_group(text: &[u8], gid: u32) -> Option<bool> {
    fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
        line.split(|b| b.is_ascii_whitespace()).filter(|t| !t.is_empty())
    }
    let fsgid = dec_u64(words(status_value(text, b"Gid:")?).nth(3)?)?;
    if fsgid == u64::from(gid) {
        return Some(true);
    }
    let groups: Option<Vec<u64>> = words(status_value(text, b"Groups:")?).map(dec_u64).collect();
    Some(groups?.contains(&u64::from(gid)))
}

/// An unsigned decimal: digits only, at least one, no overflow.
pub(crate) fn dec_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |n, &b| {
        if b.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// A signed decimal: an optional `-`, then digits.
pub(crate) fn dec_i64(s: &[u8]) -> Option<i64> {
    match s.strip_prefix(b"-") {
        Some(digits) => {
            let n = dec_u64(digits)?;
            if n == 1 << 63 {
                Some(i64::MIN)
            } else {
                i64::try_from(n).ok().map(|n| -n)
            }
        }
        None => i64::try_from(dec_u64(s)?).ok(),
    }
}

fn dec_i32(s: &[u8]) -> Option<i32> {
    i32::try_from(dec_i64(s)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every field of a stat line, named as in `do_task_stat`.
    #[derive(Debug, Clone)]
    struct Line {
        pid: i32,
        comm: Vec<u8>,
        state: u8,
        ppid: i32,
        /// Fields 5..=19: pgid, sid, tty_nr, tty_pgrp, flags, min_flt, cmin_flt, maj_flt,
        /// cmaj_flt, utime, stime, cutime, cstime, priority, nice.
        mid: [i64; 15],
        threads: i32,
        start: u64,
        vsize: u64,
        rss: u64,
        /// Fields 25..=52 (rsslim .. exit_code), some of them signed in the kernel.
        tail: Vec<i64>,
    }

    impl Line {
        /// Formatted as the kernel does: `seq_put_decimal_ull/ll` with one space between
        /// fields, `pid (comm) S`, a newline at the end.
        fn render(&self) -> Vec<u8> {
            let mut out = format!("{} (", self.pid).into_bytes();
            out.extend_from_slice(&self.comm);
            out.extend_from_slice(b") ");
            out.push(self.state);
            let mut put = |v: String| {
                out.push(b' ');
                out.extend_from_slice(v.as_bytes());
            };
            put(self.ppid.to_string());
            for v in self.mid {
                put(v.to_string());
            }
            put(self.threads.to_string());
            put("0".into()); // itrealvalue
            put(self.start.to_string());
            put(self.vsize.to_string());
            put(self.rss.to_string());
            for v in &self.tail {
                put(v.to_string());
            }
            out.push(b'\n');
            out
        }

        /// Where field 24 (rss) starts in `render()`.
        fn rss_offset(&self) -> usize {
            let r = self.render();
            let close = r.iter().rposition(|&b| b == b')').unwrap();
            let mut spaces = 0;
            for (i, &b) in r.iter().enumerate().skip(close + 1) {
                if b == b' ' {
                    spaces += 1;
                    // Token k after the comm starts after space k+1 (the first space follows
                    // ')'): rss is token 21.
                    if spaces == 22 {
                        return i + 1;
                    }
                }
            }
            unreachable!()
        }
    }

    /// Comm values the kernel accepts (any byte but NUL, at most 15), biased towards the
    /// ones that break naive parsers.
    fn comm() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(b" ".to_vec()),
            Just(b")".to_vec()),
            Just(b"(".to_vec()),
            Just(b"\n".to_vec()),
            Just(b") (".to_vec()),
            Just(b") S 1 2 ".to_vec()),
            Just(b"0".to_vec()),
            Just(b"42".to_vec()),
            Just(b"\xff\xfe".to_vec()),
            Just("é".as_bytes().to_vec()),
            proptest::collection::vec(1u8..=255, 1..4),
        ];
        prop_oneof![
            proptest::collection::vec(1u8..=255, 0..=15),
            proptest::collection::vec(piece, 0..8).prop_map(|ps| {
                let mut c: Vec<u8> = ps.concat();
                c.truncate(15);
                c
            }),
        ]
    }

    fn line() -> impl Strategy<Value = Line> {
        (
            (1..=i32::MAX, comm(), prop::sample::select(b"RSDTtXZPI".to_vec()), 0..=i32::MAX),
            proptest::array::uniform15(any::<i64>()),
            (0..=i32::MAX, any::<u64>(), any::<u64>(), any::<u64>()),
            proptest::collection::vec(any::<i64>(), 28..=28),
        )
            .prop_map(
                |((pid, comm, state, ppid), mid, (threads, start, vsize, rss), tail)| Line {
                    pid,
                    comm,
                    state,
                    ppid,
                    mid,
                    threads,
                    start,
                    vsize,
                    rss,
                    tail,
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn stat_round_trips(l in line()) {
            let got = stat(&l.render()).expect("a kernel-formatted line parses");
            prop_assert_eq!(got.pid, l.pid);
            prop_assert_eq!(got.comm.as_bytes(), &l.comm[..]);
            prop_assert_eq!(got.state, State::from_letter(l.state));
            prop_assert_eq!(got.ppid, l.ppid);
            prop_assert_eq!(got.threads, l.threads as u32);
            prop_assert_eq!(got.start_ticks, l.start);
            prop_assert_eq!(got.rss_pages, l.rss);
        }

        #[test]
        fn stat_keeps_15_bytes_of_a_long_kernel_name(
            l in line(),
            long in proptest::collection::vec(1u8..=255, 16..=63),
        ) {
            // Kernel threads and workqueue workers show up to 63 bytes in stat.
            let l = Line { comm: long.clone(), ..l };
            let got = stat(&l.render()).expect("a kernel-formatted line parses");
            prop_assert_eq!(got.comm.as_bytes(), &long[..Comm::MAX]);
            prop_assert_eq!((got.ppid, got.rss_pages), (l.ppid, l.rss));
        }

        #[test]
        fn stat_truncated_before_rss_is_none(l in line(), cut in any::<prop::sample::Index>()) {
            let text = l.render();
            let at = cut.index(l.rss_offset());
            prop_assert_eq!(stat(&text[..at]), None);
        }

        #[test]
        fn stat_with_a_bad_number_is_none(l in line(), field in 0usize..22, junk in "[a-z+.]") {
            // Replace token `field` after the comm (state .. rss) with junk or append junk.
            let text = l.render();
            let close = text.iter().rposition(|&b| b == b')').unwrap();
            let mut tokens: Vec<Vec<u8>> =
                text[close + 2..text.len() - 1].split(|&b| b == b' ').map(<[u8]>::to_vec).collect();
            if field == 0 {
                tokens[0] = junk.clone().into_bytes(); // a letter state is fine: make it long
                tokens[0].extend_from_slice(b"xx");
            } else if [1, 17, 19, 21].contains(&field) {
                tokens[field].extend_from_slice(junk.as_bytes());
            } else {
                // A field the parser skips: junk there is not its business.
                return Ok(());
            }
            let mut bad = text[..close + 2].to_vec();
            bad.extend_from_slice(&tokens.join(&b' '));
            bad.push(b'\n');
            prop_assert_eq!(stat(&bad), None);
        }

        #[test]
        fn parsers_never_panic(text in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = proc_mount(&text, 0, 22);
            let _ = status_in_group(&text, 0);
            let _ = stat(&text);
            let _ = status_euid(&text);
            let _ = status_tgid(&text);
            let _ = btime(&text);
        }

        #[test]
        fn parsers_never_panic_on_near_misses(l in line(), edits in proptest::collection::vec(
            (any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
            let mut text = l.render();
            for (at, byte) in edits {
                let i = at.index(text.len());
                text[i] = byte;
            }
            let _ = stat(&text);
        }

        #[test]
        fn status_euid_is_the_second_uid(uids in proptest::array::uniform4(any::<u32>()),
                                         name in comm()) {
            // status escapes the name: a newline shows as backslash-n.
            let name: Vec<u8> =
                name.iter().flat_map(|&b| if b == b'\n' { b"\\n".to_vec() } else { vec![b] })
                    .collect();
            let mut text = b"Name:\t".to_vec();
            text.extend_from_slice(&name);
            text.extend_from_slice(b"\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n");
            text.extend_from_slice(
                format!("Ngid:\t0\nPid:\t4243\nPPid:\t1\nTracerPid:\t0\nUid:\t{}\t{}\t{}\t{}\n",
                        uids[0], uids[1], uids[2], uids[3]).as_bytes());
            text.extend_from_slice(b"Gid:\t0\t0\t0\t0\nFDSize:\t64\n");
            prop_assert_eq!(status_euid(&text), Some(uids[1]));
            prop_assert_eq!(status_tgid(&text), Some(4242));
        }
    }

    #[test]
    fn stat_of_a_real_kernel_line() {
        let text = b"1234 (a b) (c\nd) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                     98765 5000000 321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 \
                     0 0 0 0 0 0 0 0 0 0 0\n";
        let s = stat(text).unwrap();
        assert_eq!(s.pid, 1234);
        assert_eq!(s.comm.as_bytes(), b"a b) (c\nd");
        assert_eq!(s.state, State::Sleeping);
        assert_eq!(s.ppid, 1);
        assert_eq!(s.threads, 1);
        assert_eq!(s.start_ticks, 98765);
        assert_eq!(s.rss_pages, 321);
    }

    #[test]
    fn stat_of_a_kworker_keeps_15_bytes() {
        let text = b"77 (kworker/u8:3-events_unbound) I 2 0 0 0 -1 69238880 0 0 0 0 0 5 0 0 \
                     20 0 1 0 600 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 \
                     17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        let s = stat(text).unwrap();
        assert_eq!(s.comm.as_bytes(), b"kworker/u8:3-ev");
        assert_eq!(s.state, State::Idle);
        assert_eq!((s.ppid, s.rss_pages), (2, 0));
    }

    #[test]
    fn garbage_is_none() {
        for text in [
            &b""[..],
            b"1234",
            b"1234 (x",
            b"1234 x) S 1",
            b") 1234 (",
            b"1234 (x) S",
            b"1234 (x) SS 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21",
            b"abc (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21",
            b"(x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21",
            b"1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 -1 18 19 20 21",
            b"1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 99999999999999999999",
        ] {
            assert_eq!(stat(text), None, "{:?}", String::from_utf8_lossy(text));
        }
        assert_eq!(status_euid(b"Name:\tx\nUid:\t0\n"), None);
        assert_eq!(status_euid(b"Name:\tx\\nUid:\t1\t2\t3\t4\n"), None);
        assert_eq!(status_tgid(b"Tgid:\t-\n"), None);
        assert_eq!(btime(b"cpu 1 2 3\nbtime\n"), None);
    }

    #[test]
    fn btime_of_proc_stat() {
        let text = b"cpu  1 2 3 4\ncpu0 1 2 3 4\nintr 5 6\nctxt 99\nbtime 1763776172\n\
                     processes 4242\n";
        assert_eq!(btime(text), Some(1763776172));
    }

    #[test]
    fn options_of_the_proc_mount() {
        let text = b"22 28 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n\
            25 28 0:22 / /proc rw,nosuid,nodev,noexec shared:12 - proc proc rw\n\
            40 25 0:35 / /proc/sys/fs/binfmt_misc rw shared:13 - autofs systemd-1 rw,fd=30\n\
            310 300 0:52 / /proc rw,nosuid - proc proc rw,hidepid=invisible,gid=4\n\
            311 300 0:53 / /proc rw - proc none rw,hidepid=2\n\
            312 300 0:54 / /proc rw - proc none rw,hidepid=off,subset=pid\n\
            313 300 0:55 / /proc rw - proc none rw,gid=x";
        let mount = |hidepid: Option<&'static [u8]>, gid| Some(ProcMount { hidepid, gid });
        assert_eq!(proc_mount(text, 0, 22), mount(None, 0));
        assert_eq!(proc_mount(text, 0, 52), mount(Some(b"invisible"), 4));
        assert_eq!(proc_mount(text, 0, 53), mount(Some(b"2"), 0));
        assert_eq!(proc_mount(text, 0, 54), mount(None, 0));
        // A bad gid, not a procfs, no such device, no type.
        assert_eq!(proc_mount(text, 0, 55), None);
        assert_eq!(proc_mount(text, 0, 21), None);
        assert_eq!(proc_mount(text, 0, 99), None);
        assert_eq!(proc_mount(b"0:22 - proc", 0, 22), None);
        assert_eq!(proc_mount(b"", 0, 22), None);
    }

    #[test]
    fn group_membership_from_status() {
        let status =
            b"Name:\tx\nUid:\t0\t0\t0\t0\nGid:\t5\t6\t7\t8\nFDSize:\t64\nGroups:\t4 24 27 \n";
        assert_eq!(status_in_group(status, 8), Some(true));
        assert_eq!(status_in_group(status, 24), Some(true));
        assert_eq!(status_in_group(status, 5), Some(false));
        assert_eq!(status_in_group(status, 0), Some(false));
        let no_groups = b"Gid:\t0\t0\t0\t9\nGroups:\t\n";
        assert_eq!(status_in_group(no_groups, 0), Some(false));
        assert_eq!(status_in_group(no_groups, 9), Some(true));
        assert_eq!(status_in_group(b"Gid:\t0\t0\n", 0), None);
    }

    #[test]
    fn decimals() {
        assert_eq!(dec_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(dec_u64(b"18446744073709551616"), None);
        assert_eq!(dec_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(dec_i64(b"-9223372036854775809"), None);
        assert_eq!(dec_i64(b"-"), None);
        assert_eq!(dec_u64(b"+1"), None);
    }
}
