//! The environment read in place while the process has only ever had one thread
//! (`sys/environ.rs`): after each kind of change, a local spawn and a request through a
//! private server hand the child exactly what `std::env::vars_os` shows, never the copy an
//! earlier spawn took; and the copies counted (`spawnkit::env_copies`) show the in-place
//! comparison spared one exactly where nothing changed. A test binary of its own without
//! libtest (`harness = false`): the harness's threads would turn the in-place read off.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStringExt;

use spawnkit::{Command, PrivateServer, Stdio};

/// glibc's `__libc_single_threaded`: nonzero while this process has only ever had one thread.
fn single_threaded() -> bool {
    // SAFETY: dlsym with the default handle and a NUL-terminated name; the symbol, when
    // found, is a live `char`.
    unsafe {
        let p = libc::dlsym(libc::RTLD_DEFAULT, c"__libc_single_threaded".as_ptr());
        !p.is_null() && *(p as *const libc::c_char) != 0
    }
}

/// The environment as std reads it, as execve's block ("NAME=value\0" each).
fn std_view() -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in std::env::vars_os() {
        out.extend(k.into_vec());
        out.push(b'=');
        out.extend(v.into_vec());
        out.push(0);
    }
    out
}

/// A command that prints the environment it was given (its /proc/self/environ).
fn cat_env() -> Command {
    let mut cmd = Command::new("/bin/cat");
    cmd.arg("/proc/self/environ").stdout(Stdio::Pipe);
    cmd
}

/// What a child of `cmd` printed.
fn printed(mut child: spawnkit::Child) -> Vec<u8> {
    let out = child.communicate(None, None).expect("read the child's environment");
    assert!(out.status.success(), "cat ended with {}", out.status);
    out.stdout
}

/// What `cmd`'s child was given, spawned here or through `server`.
fn env_of(cmd: &mut Command, server: Option<&mut PrivateServer>) -> Vec<u8> {
    printed(
        match server {
            None => cmd.spawn(),
            Some(s) => s.client().spawn(cmd),
        }
        .expect("spawn cat"),
    )
}

/// What the child was given, spawned here or through `server`.
fn child_env(server: Option<&mut PrivateServer>) -> Vec<u8> {
    env_of(&mut cat_env(), server)
}

/// The entries only the child got and those only std shows.
fn differences(got: &[u8], want: &[u8]) -> String {
    let entries = |b: &[u8]| -> Vec<OsString> {
        b.split(|&c| c == 0)
            .filter(|e| !e.is_empty())
            .map(|e| OsString::from_vec(e.to_vec()))
            .collect()
    };
    let (got, want) = (entries(got), entries(want));
    let extra: Vec<_> = got.iter().filter(|e| !want.contains(e)).collect();
    let missing: Vec<_> = want.iter().filter(|e| !got.contains(e)).collect();
    format!("the child got {extra:?} that std does not show, and lacks {missing:?} (order may differ too)")
}

fn putenv(entry: &str) {
    // putenv keeps the pointer: leaked on purpose.
    let s = CString::new(entry).unwrap().into_raw();
    // SAFETY: a NUL-terminated string that lives for the rest of the process; one thread.
    assert_eq!(unsafe { libc::putenv(s) }, 0, "putenv {entry}");
}

/// One change to the environment, made before a round of spawns.
type Change = Box<dyn Fn()>;

fn main() {
    assert!(
        single_threaded(),
        "this test must start with one thread (glibc 2.32+), or it tests nothing new"
    );
    let mut server = PrivateServer::start().expect("private server");
    let name = "SPAWNKIT_ONE_THREAD_TEST";
    // (what is done, whether std then shows another environment)
    let steps: Vec<(&str, bool, Change)> = vec![
        ("unchanged (no copy yet)", true, Box::new(|| {})),
        ("unchanged again", false, Box::new(|| {})),
        ("a new variable", true, Box::new(move || std::env::set_var(name, "one"))),
        ("a value of the same length", true, Box::new(move || std::env::set_var(name, "two"))),
        ("a longer value", true, Box::new(move || std::env::set_var(name, "three!"))),
        ("the same value set again", false, Box::new(move || std::env::set_var(name, "three!"))),
        ("removed", true, Box::new(move || std::env::remove_var(name))),
        ("an entry std skips (no '=')", false, Box::new(|| putenv("SPAWNKIT_NO_EQUALS"))),
        ("an entry whose name starts with '='", true, Box::new(|| putenv("=SPAWNKIT_ODD=1"))),
        ("an empty value", true, Box::new(move || std::env::set_var(name, ""))),
        (
            "everything cleared",
            true,
            Box::new(|| {
                // SAFETY: one thread.
                assert_eq!(unsafe { libc::clearenv() }, 0);
            }),
        ),
        ("one variable after the clear", true, Box::new(move || std::env::set_var(name, "back"))),
        ("unchanged after all that", false, Box::new(|| {})),
    ];
    let mut checked = 0;
    for (what, changed, change) in &steps {
        change();
        let want = std_view();
        let copies = spawnkit::env_copies();
        for via in ["local", "server"] {
            // Twice each: the second is served from what the first left behind.
            for _ in 0..2 {
                let got = child_env(if via == "server" { Some(&mut server) } else { None });
                assert!(got == want, "{what}, {via} spawn: {}", differences(&got, &want));
                checked += 1;
            }
        }
        // A snapshot taken now (as the Python face takes one under the GIL), through the
        // server (a local spawn of it would replace the inheriting spawns' cache): twice.
        for _ in 0..2 {
            let mut now = cat_env();
            now.base_env_now();
            let got = env_of(&mut now, Some(&mut server));
            assert!(got == want, "{what}, base_env_now: {}", differences(&got, &want));
            checked += 1;
        }
        // One copy (the thread's snapshot, which the local spawns, the connection and
        // base_env_now all share), and only after a change.
        let took = spawnkit::env_copies() - copies;
        assert_eq!(took, if *changed { 1 } else { 0 }, "{what}: copies of the environment taken");
        assert!(
            single_threaded(),
            "{what}: the process gained a thread, so nothing more is tested"
        );
    }

    // The other ways in, between inheriting spawns (what they give the child only).
    std::env::set_var(name, "batch");
    let want = std_view();
    let cmds = [cat_env(), cat_env(), cat_env()];
    for child in server.client().spawn_many(&cmds, 2).expect("spawn_many") {
        let got = printed(child.expect("spawn_many's child"));
        assert!(got == want, "a batch through the server: {}", differences(&got, &want));
        checked += 1;
    }
    let mut now = cat_env();
    now.base_env_now();
    let got = env_of(&mut now, None);
    assert!(got == want, "a local spawn of base_env_now: {}", differences(&got, &want));
    checked += 1;
    for via in ["local", "server"] {
        let mut own = cat_env();
        own.base_env([("SPAWNKIT_BASE", "only")]);
        let got = env_of(&mut own, if via == "server" { Some(&mut server) } else { None });
        assert_eq!(got, b"SPAWNKIT_BASE=only\0", "{via}: a base environment");
        let got = child_env(if via == "server" { Some(&mut server) } else { None });
        assert!(got == want, "{via}: inheriting after a base: {}", differences(&got, &want));
        let mut changed = cat_env();
        changed.env("SPAWNKIT_ADDED", "1");
        let got = env_of(&mut changed, if via == "server" { Some(&mut server) } else { None });
        let mut plus = want.clone();
        plus.extend_from_slice(b"SPAWNKIT_ADDED=1\0");
        assert!(got == plus, "{via}: one variable added: {}", differences(&got, &plus));
        checked += 3;
    }
    std::env::set_var(name, "after");
    let want = std_view();
    for via in ["local", "server"] {
        let got = child_env(if via == "server" { Some(&mut server) } else { None });
        assert!(got == want, "{via}: a change after all that: {}", differences(&got, &want));
        checked += 1;
    }

    // A hand-made base whose name holds '=' must never pass for the live environment, even
    // where its strings are the same: with PATH=/spawnkit-nowhere=x in the environment (std:
    // PATH is "/spawnkit-nowhere=x"), a base with the pair ("PATH=/spawnkit-nowhere", "x")
    // gives the child the same string but no PATH to search, so `cat` is found in the
    // default path; an inheriting spawn after it must search the real PATH and not find it.
    putenv("PATH=/spawnkit-nowhere=x");
    let odd: Vec<(OsString, OsString)> = std::env::vars_os()
        .map(|(k, v)| match k.to_str() {
            Some("PATH") => ("PATH=/spawnkit-nowhere".into(), "x".into()),
            _ => (k, v),
        })
        .collect();
    for via in ["local", "server"] {
        let mut on_base = Command::new("cat");
        on_base.arg("/proc/self/environ").stdout(Stdio::Pipe).base_env(odd.clone());
        let got = env_of(&mut on_base, if via == "server" { Some(&mut server) } else { None });
        let want = std_view();
        assert!(got == want, "{via}: the odd base's strings: {}", differences(&got, &want));
        let mut inheriting = Command::new("cat");
        inheriting.arg("/proc/self/environ").stdout(Stdio::Pipe);
        let found = match via {
            "server" => server.client().spawn(&inheriting),
            _ => inheriting.spawn(),
        };
        match found {
            Err(e) => assert!(e.to_string().contains("cat"), "{via}: {e}"),
            Ok(child) => panic!(
                "{via}: an inheriting spawn found cat, so it used the odd base's PATH, not the \
                 environment's: {:?}",
                printed(child).len()
            ),
        }
        checked += 2;
    }
    assert!(single_threaded(), "the process gained a thread");
    println!("env_one_thread: {checked} spawns saw what std shows, with one thread throughout");
}
