//! Signal state of the child: mask, ignored and handled signals.
//!
//! This binary changes process-wide signal dispositions, so it holds exactly one test
//! function (libtest runs the tests of one binary as threads of one process). The mask is
//! changed only in the test's own thread, which is the one that spawns.

mod common;

use std::collections::BTreeMap;

use common::{probe_state, sigbit, status_hex, status_via_cat, GLIBC_INTERNAL_SIGNALS};
use spawnkit::{SigSet, Signal, Strategy};

extern "C" fn on_signal(_: libc::c_int) {}

fn set_handler(sig: i32, handler: libc::sighandler_t) {
    // SAFETY: installs a plain handler (or SIG_IGN) for a catchable signal; `sa` is zeroed
    // then filled with an empty mask.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(sig, &sa, std::ptr::null_mut()), 0, "sigaction {sig}");
    }
}

fn block_in_this_thread(sig: i32) {
    // SAFETY: pthread_sigmask on this thread with a set built by sigemptyset/sigaddset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        assert_eq!(libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()), 0);
    }
}

fn own_status() -> BTreeMap<String, String> {
    // The calling thread's view (SigBlk is per thread).
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.to_string(), v.trim().to_string())))
        .collect()
}

/// The SigIgn a child should show when the parent ignores `bits` (after the resets asked
/// for). glibc's posix_spawn would leave its internal signals 32 and 33 ignored in the child;
/// spawnkit's posix-spawn strategy puts them in the SETSIGDEF set, so they are at SIG_DFL.
/// The other strategies pass every ignored signal on unchanged, 32 included: this very test
/// process may have it ignored because cargo started it with (Rust std's) posix_spawn.
fn expected_ign(s: Strategy, bits: u64) -> u64 {
    if s == Strategy::PosixSpawn {
        bits & !GLIBC_INTERNAL_SIGNALS
    } else {
        bits
    }
}

#[test]
fn signal_state_of_the_child() {
    let (usr1, usr2, pipe, xfsz, term, hup) =
        (libc::SIGUSR1, libc::SIGUSR2, libc::SIGPIPE, libc::SIGXFSZ, libc::SIGTERM, libc::SIGHUP);
    // The parent: SIGUSR1 handled and blocked in this thread, SIGHUP handled, SIGPIPE,
    // SIGXFSZ and SIGUSR2 ignored.
    set_handler(usr1, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t);
    set_handler(hup, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t);
    set_handler(pipe, libc::SIG_IGN);
    set_handler(xfsz, libc::SIG_IGN);
    set_handler(usr2, libc::SIG_IGN);
    block_in_this_thread(usr1);
    let me = own_status();
    assert_eq!(status_hex(&me, "SigBlk") & sigbit(usr1), sigbit(usr1), "setup: mask");
    let want_cgt = sigbit(usr1) | sigbit(hup);
    assert_eq!(status_hex(&me, "SigCgt") & want_cgt, want_cgt, "setup: handlers");
    let want_ign = sigbit(pipe) | sigbit(xfsz) | sigbit(usr2);
    let parent_ign = status_hex(&me, "SigIgn");
    assert_eq!(parent_ign & want_ign, want_ign, "setup: ignored");
    // What the parent ignores besides the signals this test set up (inherited by it).
    let other_ign = parent_ign & !want_ign;

    for s in Strategy::ALL {
        // Defaults: empty mask; SIGPIPE and SIGXFSZ back to default; other ignored signals
        // stay ignored; handlers reset (a C program that installs none shows SigCgt 0).
        let st = status_via_cat(s, |_| {});
        assert_eq!(status_hex(&st, "SigBlk"), 0, "{s}: mask");
        let ign = status_hex(&st, "SigIgn");
        assert_eq!(ign & want_ign, sigbit(usr2), "{s}: SigIgn {ign:x}");
        assert_eq!(ign, expected_ign(s, other_ign | sigbit(usr2)), "{s}: SigIgn {ign:x}");
        assert_eq!(status_hex(&st, "SigCgt"), 0, "{s}: SigCgt");

        // The same through the probe (its Rust runtime handles SIGSEGV/SIGBUS and ignores
        // SIGPIPE itself, so only the bits the test controls are compared).
        let st = probe_state(s, |_| {});
        assert_eq!(st.hex("sigblk"), 0, "{s}: probe mask");
        assert_eq!(st.hex("sigcgt") & want_cgt, 0, "{s}: probe SigCgt {:x}", st.hex("sigcgt"));
        assert_eq!(st.hex("sigign") & sigbit(usr2), sigbit(usr2), "{s}: probe SigIgn");

        // restore_signals(false): SIGPIPE and SIGXFSZ stay ignored.
        let st = status_via_cat(s, |c| {
            c.restore_signals(false);
        });
        assert_eq!(
            status_hex(&st, "SigIgn"),
            expected_ign(s, other_ign | sigbit(pipe) | sigbit(xfsz) | sigbit(usr2)),
            "{s}: restore_signals(false)"
        );

        // signal_default(USR2) resets it; the defaults still apply.
        let st = status_via_cat(s, |c| {
            c.signal_default(Signal::USR2);
        });
        assert_eq!(
            status_hex(&st, "SigIgn"),
            expected_ign(s, other_ign),
            "{s}: signal_default(USR2)"
        );

        // signal_default(USR2) with restore_signals(false): only USR2 reset.
        let st = status_via_cat(s, |c| {
            c.restore_signals(false).signal_default(Signal::USR2);
        });
        assert_eq!(
            status_hex(&st, "SigIgn"),
            expected_ign(s, other_ign | sigbit(pipe) | sigbit(xfsz)),
            "{s}: restore_signals(false) + signal_default(USR2)"
        );

        // signal_mask: exactly the requested set, whatever this thread blocks.
        let st = probe_state(s, |c| {
            c.signal_mask(SigSet::empty().with(Signal::TERM));
        });
        assert_eq!(st.hex("sigblk"), sigbit(term), "{s}: signal_mask(TERM)");
        let st = status_via_cat(s, |c| {
            c.signal_mask(
                [Signal::TERM, Signal::USR2, Signal::new(40).unwrap()].into_iter().collect(),
            );
        });
        assert_eq!(
            status_hex(&st, "SigBlk"),
            sigbit(term) | sigbit(usr2) | sigbit(40),
            "{s}: signal_mask(TERM, USR2, 40)"
        );
    }

    // The spawns did not change the parent thread's state.
    let after = own_status();
    assert_eq!(after["SigBlk"], me["SigBlk"], "parent mask changed");
    assert_eq!(after["SigIgn"], me["SigIgn"], "parent ignored set changed");
    assert_eq!(after["SigCgt"], me["SigCgt"], "parent handlers changed");
}
