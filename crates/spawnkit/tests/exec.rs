//! What the child runs and where: program, arguments, argv[0], environment, PATH search,
//! working directory. Every test runs under every strategy.

mod common;

use std::collections::BTreeMap;

use common::{probe, probe_cmd, probe_state, run_state, State, TempDir};
use spawnkit::{Command, ErrorKind, Strategy};

#[test]
fn program_and_args_reach_argv() {
    for s in Strategy::ALL {
        let st = run_state(&mut probe_cmd(s, ["state", "a b", "", "ü-é", "--x=1"]));
        let p = probe().to_string_lossy().into_owned();
        assert_eq!(st.argv(), [p.as_str(), "state", "a b", "", "ü-é", "--x=1"], "{s}");
    }
}

#[test]
fn arg0_replaces_argv0_only() {
    for s in Strategy::ALL {
        let st = run_state(probe_cmd(s, ["state", "x"]).arg0("custom-name"));
        assert_eq!(st.argv(), ["custom-name", "state", "x"], "{s}");
    }
}

#[test]
fn the_child_is_the_probe_with_its_own_pid() {
    for s in Strategy::ALL {
        let mut child = probe_cmd(s, ["state"]).stdout(spawnkit::Stdio::Pipe).spawn().unwrap();
        let pid = child.id();
        let out = child.communicate(None, None).unwrap();
        let st = State::parse(&String::from_utf8(out.stdout).unwrap());
        assert_eq!(st.int("pid"), i64::from(pid), "{s}");
        assert_eq!(st.int("ppid"), i64::from(std::process::id()), "{s}");
        assert!(out.status.success(), "{s}");
    }
}

fn parent_env() -> BTreeMap<String, String> {
    std::env::vars_os()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
        .collect()
}

#[test]
fn env_is_inherited_by_default() {
    let parent = parent_env();
    assert!(parent.contains_key("PATH"), "the test process has no PATH");
    for s in Strategy::ALL {
        let st = probe_state(s, |_| {});
        assert_eq!(st.env, parent, "{s}");
    }
}

#[test]
fn env_clear_leaves_only_what_is_set() {
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.env_clear().env("SPAWNKIT_A", "1").env("B", "x=y");
        });
        let want: BTreeMap<String, String> =
            [("SPAWNKIT_A", "1"), ("B", "x=y")].map(|(k, v)| (k.into(), v.into())).into();
        assert_eq!(st.env, want, "{s}");
        // As documented (unlike std's env_clear), variables set before env_clear stay.
        let st = probe_state(s, |c| {
            c.env("BEFORE_CLEAR", "kept").env_remove("HOME").env_clear().env("SPAWNKIT_A", "1");
        });
        let want: BTreeMap<String, String> = [("SPAWNKIT_A", "1"), ("BEFORE_CLEAR", "kept")]
            .map(|(k, v)| (k.into(), v.into()))
            .into();
        assert_eq!(st.env, want, "{s}");
    }
}

#[test]
fn env_set_overrides_and_adds() {
    let mut want = parent_env();
    want.insert("SPAWNKIT_NEW".into(), "new value".into());
    want.insert("HOME".into(), "/overridden".into());
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.env("SPAWNKIT_NEW", "new value").env("HOME", "/overridden");
        });
        assert_eq!(st.env, want, "{s}");
    }
}

#[test]
fn env_remove_drops_one_variable() {
    let mut want = parent_env();
    assert!(want.remove("HOME").is_some(), "the test process has no HOME");
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.env_remove("HOME").env_remove("SPAWNKIT_NEVER_SET");
        });
        assert_eq!(st.env, want, "{s}");
        // A later env() wins over an earlier env_remove() of the same name.
        let st = probe_state(s, |c| {
            c.env_remove("HOME").env("HOME", "/back");
        });
        assert_eq!(st.env.get("HOME").map(String::as_str), Some("/back"), "{s}");
    }
}

#[test]
fn path_search_uses_the_childs_path() {
    let dir = TempDir::new("path");
    dir.probe_link("spawnkit-only-here");
    for s in Strategy::ALL {
        let st = run_state(
            Command::new("spawnkit-only-here").arg("state").env("PATH", dir.path()).strategy(s),
        );
        assert_eq!(st.argv()[0], "spawnkit-only-here", "{s}");
        assert_eq!(st.env["PATH"], dir.path().to_string_lossy(), "{s}");
        // The parent's PATH does not have it: without the child's PATH it is not found.
        let err = Command::new("spawnkit-only-here").strategy(s).spawn().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{s}: {err}");
    }
}

#[test]
fn path_search_with_cleared_env_and_path_set() {
    let dir = TempDir::new("path-clear");
    dir.probe_link("spawnkit-cleared");
    for s in Strategy::ALL {
        let st = run_state(
            Command::new("spawnkit-cleared")
                .arg("state")
                .env_clear()
                .env("PATH", format!("/nonexistent-spawnkit:{}", dir.path().display()))
                .strategy(s),
        );
        assert_eq!(st.env.keys().collect::<Vec<_>>(), ["PATH"], "{s}");
    }
}

#[test]
fn empty_path_entry_means_the_childs_cwd() {
    let dir = TempDir::new("emptyentry");
    dir.probe_link("spawnkit-in-cwd");
    for path in ["/nonexistent-spawnkit:", ":/nonexistent-spawnkit", "/nonexistent-spawnkit::/x"] {
        for s in Strategy::ALL {
            let st = run_state(
                Command::new("spawnkit-in-cwd")
                    .arg("state")
                    .env("PATH", path)
                    .current_dir(dir.path())
                    .strategy(s),
            );
            assert_eq!(st.get("cwd"), dir.path().to_str().unwrap(), "{s} PATH={path}");
            assert_eq!(st.argv()[0], "spawnkit-in-cwd", "{s} PATH={path}");
        }
    }
}

#[test]
fn non_executable_in_path_then_nothing_is_eacces() {
    let early = TempDir::new("eacces-early");
    let late = TempDir::new("eacces-late");
    early.file("spawnkit-noexec", b"#!/bin/sh\necho should not run\n", 0o644);
    let path = format!("{}:{}", early.path().display(), late.path().display());
    for s in Strategy::ALL {
        let err =
            Command::new("spawnkit-noexec").env("PATH", &path).strategy(s).spawn().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{s}: {err}");
        assert_eq!(err.kind(), ErrorKind::Os, "{s}: {err}");
        assert_eq!(err.exit_code(), 126, "{s}: {err}");
        if s != Strategy::PosixSpawn {
            let cand = early.join("spawnkit-noexec");
            assert_eq!(
                err.to_string(),
                format!("execve \"{}\": Permission denied (os error 13)", cand.display()),
                "{s}"
            );
            assert!(err.is_in_child(), "{s}");
        }
    }
}

#[test]
fn non_executable_early_executable_later_runs_the_later_one() {
    let early = TempDir::new("skip-early");
    let late = TempDir::new("skip-late");
    early.file("spawnkit-twice", b"#!/bin/sh\necho wrong one\n", 0o644);
    late.probe_link("spawnkit-twice");
    let path = format!("{}:{}", early.path().display(), late.path().display());
    for s in Strategy::ALL {
        let st =
            run_state(Command::new("spawnkit-twice").arg("state").env("PATH", &path).strategy(s));
        assert_eq!(st.argv(), ["spawnkit-twice", "state"], "{s}");
    }
}

#[test]
fn a_directory_in_the_way_is_skipped() {
    // execve on a directory gives EACCES; a later real program still runs.
    let early = TempDir::new("dir-early");
    let late = TempDir::new("dir-late");
    std::fs::create_dir(early.join("spawnkit-dirprog")).unwrap();
    late.probe_link("spawnkit-dirprog");
    let path = format!("{}:{}", early.path().display(), late.path().display());
    for s in Strategy::ALL {
        let st =
            run_state(Command::new("spawnkit-dirprog").arg("state").env("PATH", &path).strategy(s));
        assert_eq!(st.argv()[0], "spawnkit-dirprog", "{s}");
    }
}

#[test]
fn current_dir_is_the_childs_real_cwd() {
    let dir = TempDir::new("cwd");
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.current_dir(dir.path());
        });
        assert_eq!(st.get("cwd"), dir.path().to_str().unwrap(), "{s}");
        let st = probe_state(s, |c| {
            c.current_dir("/");
        });
        assert_eq!(st.get("cwd"), "/", "{s}");
    }
}

#[test]
fn default_cwd_is_the_parents() {
    let here = std::env::current_dir().unwrap();
    for s in Strategy::ALL {
        let st = probe_state(s, |_| {});
        assert_eq!(st.get("cwd"), here.to_str().unwrap(), "{s}");
    }
}

#[test]
fn relative_program_path_is_resolved_after_chdir() {
    let dir = TempDir::new("relprog");
    std::fs::create_dir(dir.join("bin")).unwrap();
    let link = dir.join("bin/spawnkit-rel");
    std::os::unix::fs::symlink(probe(), link).unwrap();
    assert!(!std::path::Path::new("bin/spawnkit-rel").exists());
    for prog in ["./bin/spawnkit-rel", "bin/spawnkit-rel"] {
        for s in Strategy::ALL {
            let st = run_state(Command::new(prog).arg("state").current_dir(dir.path()).strategy(s));
            assert_eq!(st.get("cwd"), dir.path().to_str().unwrap(), "{s} {prog}");
            assert_eq!(st.argv()[0], prog, "{s}");
        }
    }
}

#[test]
fn a_script_with_a_shebang_runs() {
    let dir = TempDir::new("script");
    let script = dir.file("spawnkit-script", b"#!/bin/sh\necho \"script $1 $SPAWNKIT_V\"\n", 0o755);
    for s in Strategy::ALL {
        let out = common::output_retrying_etxtbsy(
            Command::new(&script).arg("arg1").env("SPAWNKIT_V", "v1").strategy(s),
        )
        .unwrap();
        assert_eq!(out.stdout, b"script arg1 v1\n", "{s}");
        assert!(out.status.success(), "{s}");
    }
}

#[test]
fn clone3_is_used_on_this_kernel() {
    let st = probe_state(Strategy::CloneVfork, |_| {});
    assert!(st.int("pid") > 0);
    assert!(spawnkit::uses_clone3(), "clone3 was refused on a 5.3+ kernel");
}

#[test]
fn environment_changes_keep_the_order_they_were_made_in() {
    for s in common::FULL {
        let st = common::run_state(
            probe_cmd(s, ["state"])
                .env_clear()
                .env("B", "1")
                .env("A", "2")
                .env("C", "3")
                .env("B", "4"),
        );
        let names: Vec<&str> = st
            .raw
            .lines()
            .filter_map(|l| l.strip_prefix("env."))
            .filter_map(|l| l.split_once('='))
            .map(|(k, _)| k)
            .collect();
        assert_eq!(names, ["B", "A", "C"], "{s}");
        assert_eq!(st.env.get("B").map(String::as_str), Some("4"));
    }
}

#[test]
fn path_search_try_all_goes_past_an_unexecutable_candidate() {
    let first = TempDir::new("tryall1");
    let second = TempDir::new("tryall2");
    // Executable bit, but neither ELF nor #!: execve says ENOEXEC.
    first.file("tool", b"not a program\n", 0o755);
    second.file("tool", b"#!/bin/sh\necho second\n", 0o755);
    let path = format!("{}:{}", first.path().display(), second.path().display());
    for s in common::FULL {
        let err = common::output_retrying_etxtbsy(
            spawnkit::Command::new("tool").env("PATH", &path).strategy(s),
        )
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOEXEC), "{s}: execvp's rules stop there");
        let out = common::output_retrying_etxtbsy(
            spawnkit::Command::new("tool")
                .env("PATH", &path)
                .strategy(s)
                .path_search(spawnkit::PathSearch::TryAll)
                .stdout(spawnkit::Stdio::Pipe),
        )
        .unwrap();
        assert_eq!(out.stdout, b"second\n", "{s}");
        // With nothing runnable, TryAll reports the first error that is not ENOENT.
        let err = common::output_retrying_etxtbsy(
            spawnkit::Command::new("tool")
                .env("PATH", format!("/nope:{}", first.path().display()))
                .strategy(s)
                .path_search(spawnkit::PathSearch::TryAll),
        )
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOEXEC), "{s}");
    }
}
