//! Process attributes set between clone and execve: session, process group, rlimits, nice,
//! CPU affinity, umask, credentials, parent-death signal, no_new_privs. The posix-spawn
//! strategy must refuse the ones it cannot do, with ErrorKind::Unsupported.

mod common;

use std::time::Duration;

use common::{allowed_cpus, is_root, probe_cmd, probe_state, State, TempDir, FULL};
use spawnkit::{Command, ErrorKind, Resource, Signal, Strategy, RLIM_INFINITY};

#[test]
fn setsid_makes_a_new_session() {
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.setsid(true);
        });
        let pid = st.int("pid");
        assert_eq!(st.int("sid"), pid, "{s}");
        assert_eq!(st.int("pgid"), pid, "{s}");
        // Without it, the child stays in the parent's session and group.
        let st = probe_state(s, |_| {});
        // SAFETY: getsid/getpgid on ourselves.
        let (sid, pgid) = unsafe { (libc::getsid(0), libc::getpgid(0)) };
        assert_eq!(st.int("sid"), i64::from(sid), "{s}");
        assert_eq!(st.int("pgid"), i64::from(pgid), "{s}");
    }
}

#[test]
fn process_group_zero_makes_a_new_group() {
    // SAFETY: getsid on ourselves.
    let sid = unsafe { libc::getsid(0) };
    for s in Strategy::ALL {
        let st = probe_state(s, |c| {
            c.process_group(0);
        });
        assert_eq!(st.int("pgid"), st.int("pid"), "{s}");
        assert_eq!(st.int("sid"), i64::from(sid), "{s}: same session");
    }
}

#[test]
fn process_group_joins_an_existing_group() {
    for s in Strategy::ALL {
        let mut leader =
            probe_cmd(s, ["sleep", "30"]).process_group(0).kill_on_drop(true).spawn().unwrap();
        let pgid = leader.id() as i32;
        let st = probe_state(s, |c| {
            c.process_group(pgid);
        });
        assert_eq!(st.int("pgid"), i64::from(pgid), "{s}");
        assert_ne!(st.int("pid"), i64::from(pgid), "{s}");
        leader.kill().unwrap();
        leader.wait().unwrap();
    }
}

fn show(v: u64) -> String {
    if v == RLIM_INFINITY {
        "unlimited".into()
    } else {
        v.to_string()
    }
}

#[test]
fn rlimits_are_set() {
    let limits = [
        (Resource::Nofile, 64, 128),
        (Resource::Core, 0, 4096),
        (Resource::Cpu, 100, 200),
        (Resource::Fsize, 1 << 30, RLIM_INFINITY),
        (Resource::Stack, 1 << 22, 1 << 24),
        (Resource::As, RLIM_INFINITY, RLIM_INFINITY),
        (Resource::Msgqueue, 4096, 8192),
    ];
    for s in FULL {
        let st = probe_state(s, |c| {
            for (r, soft, hard) in limits {
                c.rlimit(r, soft, hard);
            }
        });
        for (r, soft, hard) in limits {
            assert_eq!(st.limit(r.name()), (show(soft), show(hard)), "{s} {r}");
        }
    }
}

#[test]
fn a_later_rlimit_for_the_same_resource_wins() {
    for s in FULL {
        let st = probe_state(s, |c| {
            c.rlimit(Resource::Nofile, 10, 20).rlimit(Resource::Nofile, 30, 40);
        });
        assert_eq!(st.limit("NOFILE"), ("30".into(), "40".into()), "{s}");
    }
}

#[test]
fn rlimit_nofile_is_enforced_in_the_child() {
    for s in FULL {
        let out = Command::new("sh")
            .args(["-c", "ulimit -n; ulimit -Hn"])
            .rlimit(Resource::Nofile, 32, 48)
            .strategy(s)
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"32\n48\n", "{s}");
    }
}

fn own_nice() -> i32 {
    // SAFETY: getpriority without memory arguments; errno is cleared first to tell -1 apart.
    unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, 0)
    }
}

#[test]
fn nice_adds_an_increment() {
    let base = own_nice();
    for s in FULL {
        let st = probe_state(s, |c| {
            c.nice(5);
        });
        assert_eq!(st.int("nice"), i64::from((base + 5).clamp(-20, 19)), "{s}");
        let st = probe_state(s, |c| {
            c.nice(100);
        });
        assert_eq!(st.int("nice"), 19, "{s}: clamped");
        if is_root() {
            let st = probe_state(s, |c| {
                c.nice(-3);
            });
            assert_eq!(st.int("nice"), i64::from((base - 3).clamp(-20, 19)), "{s}");
        }
    }
}

#[test]
fn cpu_affinity_is_set() {
    let cpus = allowed_cpus();
    let last = *cpus.last().unwrap();
    for s in FULL {
        let st = probe_state(s, |c| {
            c.cpu_affinity([last]);
        });
        assert_eq!(st.get("cpus_allowed"), last.to_string(), "{s}");
        let first = cpus[0];
        let st = probe_state(s, |c| {
            c.cpu_affinity([first]);
        });
        assert_eq!(st.get("cpus_allowed"), first.to_string(), "{s}");
        if cpus.len() >= 2 {
            let st = probe_state(s, |c| {
                c.cpu_affinity([cpus[1], cpus[0], cpus[1]]);
            });
            assert_eq!(common::parse_cpu_list(st.get("cpus_allowed")), [cpus[0], cpus[1]], "{s}");
        }
    }
}

#[test]
fn umask_is_set() {
    for s in FULL {
        for mask in [0o027, 0o077, 0o000, 0o777] {
            let st = probe_state(s, |c| {
                c.umask(mask);
            });
            assert_eq!(st.get("umask"), format!("{mask:04o}"), "{s}");
        }
    }
}

#[test]
fn umask_applies_to_created_files() {
    let dir = TempDir::new("umask");
    for s in FULL {
        let f = dir.join(&format!("f-{s}"));
        let status = Command::new("sh")
            .args(["-c", "touch \"$1\"", "sh"])
            .arg(&f)
            .umask(0o077)
            .strategy(s)
            .status()
            .unwrap();
        assert!(status.success(), "{s}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o600, "{s}");
    }
}

#[test]
fn uid_gid_groups() {
    if !is_root() {
        eprintln!("skipped: credential changes need root");
        return;
    }
    // A copy of the probe that user 65534 can surely execute (just written: see
    // output_retrying_etxtbsy).
    let dir = TempDir::new("creds");
    let probe = dir.probe_copy("probe");
    for s in FULL {
        let run = |configure: &dyn Fn(&mut Command)| {
            let mut cmd = Command::new(&probe);
            cmd.arg("state").current_dir(dir.path()).strategy(s);
            configure(&mut cmd);
            let out =
                common::output_retrying_etxtbsy(&mut cmd).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert!(out.status.success(), "{s}: {}", out.status);
            State::parse(&String::from_utf8(out.stdout).unwrap())
        };
        let st = run(&|c| {
            c.uid(65534).gid(65534);
        });
        assert_eq!(st.get("uid"), "65534\t65534\t65534\t65534", "{s}");
        assert_eq!(st.get("gid"), "65534\t65534\t65534\t65534", "{s}");
        assert_eq!(st.get("groups"), "", "{s}: supplementary groups are dropped with uid()");

        let st = run(&|c| {
            c.uid(65534).gid(65533).groups([100, 65534]);
        });
        assert_eq!(st.get("uid"), "65534\t65534\t65534\t65534", "{s}");
        assert_eq!(st.get("gid"), "65533\t65533\t65533\t65533", "{s}");
        assert_eq!(st.get("groups"), "100 65534", "{s}");

        // gid only: the uid stays root.
        let st = run(&|c| {
            c.gid(65534);
        });
        assert_eq!(st.get("uid"), "0\t0\t0\t0", "{s}");
        assert_eq!(st.get("gid"), "65534\t65534\t65534\t65534", "{s}");

        // The parent-death signal is set after the credential change (which clears it).
        let st = run(&|c| {
            c.uid(65534).gid(65534).parent_death_signal(Signal::TERM);
        });
        assert_eq!(st.get("uid"), "65534\t65534\t65534\t65534", "{s}");
        assert_eq!(st.int("pdeathsig"), i64::from(libc::SIGTERM), "{s}");
    }
}

#[test]
fn parent_death_signal_is_set() {
    for s in FULL {
        let st = probe_state(s, |c| {
            c.parent_death_signal(Signal::TERM);
        });
        assert_eq!(st.int("pdeathsig"), i64::from(libc::SIGTERM), "{s}");
        let st = probe_state(s, |c| {
            c.parent_death_signal("USR2".parse().unwrap());
        });
        assert_eq!(st.int("pdeathsig"), i64::from(libc::SIGUSR2), "{s}");
        let st = probe_state(s, |_| {});
        assert_eq!(st.int("pdeathsig"), 0, "{s}");
    }
}

#[test]
fn parent_death_signal_fires_when_the_spawning_thread_exits() {
    for s in FULL {
        let child = std::thread::spawn(move || {
            probe_cmd(s, ["sleep", "30"]).parent_death_signal(Signal::KILL).spawn().unwrap()
        })
        .join()
        .unwrap();
        let mut child = child;
        let status = child.wait_timeout(Duration::from_secs(20)).unwrap();
        if status.is_none() {
            child.kill().unwrap();
        }
        assert_eq!(
            status,
            Some(spawnkit::ExitStatus::Signaled { signal: libc::SIGKILL, core_dumped: false }),
            "{s}"
        );
    }
}

#[test]
fn no_new_privs_is_set() {
    for s in FULL {
        let st = probe_state(s, |c| {
            c.no_new_privs(true);
        });
        assert_eq!(st.get("nnp"), "1", "{s}");
        let st = probe_state(s, |c| {
            c.no_new_privs(false);
        });
        assert_eq!(st.get("nnp"), "0", "{s}");
    }
}

#[test]
fn everything_at_once() {
    let cpus = allowed_cpus();
    let dir = TempDir::new("all");
    for s in FULL {
        let st = probe_state(s, |c| {
            c.setsid(true)
                .rlimit(Resource::Nofile, 100, 200)
                .nice(2)
                .cpu_affinity([cpus[0]])
                .umask(0o066)
                .current_dir(dir.path())
                .parent_death_signal(Signal::HUP)
                .no_new_privs(true);
        });
        assert_eq!(st.int("sid"), st.int("pid"), "{s}");
        assert_eq!(st.limit("NOFILE"), ("100".into(), "200".into()), "{s}");
        assert_eq!(st.int("nice"), i64::from((own_nice() + 2).clamp(-20, 19)), "{s}");
        assert_eq!(st.get("cpus_allowed"), cpus[0].to_string(), "{s}");
        assert_eq!(st.get("umask"), "0066", "{s}");
        assert_eq!(st.get("cwd"), dir.path().to_str().unwrap(), "{s}");
        assert_eq!(st.int("pdeathsig"), i64::from(libc::SIGHUP), "{s}");
        assert_eq!(st.get("nnp"), "1", "{s}");
    }
}

#[test]
fn posix_spawn_refuses_what_it_cannot_do() {
    type Set = fn(&mut Command);
    let options: [(&str, Set); 9] = [
        ("setrlimit", |c| {
            c.rlimit(Resource::Nofile, 64, 64);
        }),
        ("setpriority", |c| {
            c.nice(1);
        }),
        ("sched_setaffinity", |c| {
            c.cpu_affinity([0]);
        }),
        // uid() also drops supplementary groups, a step that comes first and is named.
        ("setgroups", |c| {
            c.uid(65534);
        }),
        ("setresgid", |c| {
            c.gid(65534);
        }),
        ("setgroups", |c| {
            c.groups([65534]);
        }),
        ("umask", |c| {
            c.umask(0o22);
        }),
        ("prctl PR_SET_PDEATHSIG", |c| {
            c.parent_death_signal(Signal::TERM);
        }),
        ("prctl PR_SET_NO_NEW_PRIVS", |c| {
            c.no_new_privs(true);
        }),
    ];
    for (name, set) in options {
        let mut cmd = probe_cmd(Strategy::PosixSpawn, ["exit", "0"]);
        set(&mut cmd);
        let err = cmd.spawn().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{name}: {err}");
        assert_eq!(err.step(), "posix_spawn", "{name}: {err}");
        assert_eq!(err.raw_os_error(), None, "{name}");
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("posix_spawn: the posix-spawn strategy cannot do {name} (")),
            "{name}: {msg}"
        );
        assert!(msg.ends_with("; use clone-vfork or fork-exec"), "{msg}");
        // The same command works with the other strategies.
        for s in FULL {
            if name == "setresgid" || name == "setgroups" {
                if !is_root() {
                    continue;
                }
                cmd.current_dir("/");
            }
            let status = cmd.strategy(s).status().unwrap_or_else(|e| panic!("{s} {name}: {e}"));
            assert!(status.success(), "{s} {name}");
        }
    }
}
