"""The native API (spawnkit.Command): what subprocess cannot say, seen from inside the child."""

import ctypes
import errno
import gc
import os
import resource
import select
import signal
import subprocess as std
import sys
import time

import pytest

import spawnkit
from conftest import PY, is_root, py
from spawnkit import DEVNULL, PIPE, STDOUT, Command

STRATEGIES = list(spawnkit.STRATEGIES)


def child(code):
    """A Command running a small Python child."""
    return Command(PY).args(["-S", "-c", code])


def out(cmd, **kw):
    r = cmd.output(**kw)
    assert r.returncode == 0, r
    return r.stdout.decode()


# ---------------------------------------------------------------- basics

@pytest.mark.parametrize("strategy", STRATEGIES)
def test_strategies_run_the_same_command(strategy, tmp_path):
    cmd = (child("import os, sys; print(os.getcwd(), os.environ.get('K'), sys.argv[1:])")
           .arg("x").current_dir(tmp_path).env("K", "v").strategy(strategy))
    assert out(cmd) == f"{tmp_path} v ['x']\n"


def test_output_status_and_spawn():
    r = Command("sh").args(["-c", "echo o; echo e >&2; exit 3"]).output()
    assert (r.returncode, r.stdout, r.stderr) == (3, b"o\n", b"e\n")
    assert Command("sh").args(["-c", "exit 4"]).status() == 4
    p = Command("cat").stdin(PIPE).stdout(PIPE).spawn()
    assert isinstance(p, spawnkit.Popen) and isinstance(p, std.Popen)
    assert p.communicate(b"hi") == (b"hi", None) and p.returncode == 0
    r = Command("cat").output(input=b"fed")
    assert r.stdout == b"fed"
    with Command("cat").stdin(PIPE).stdout(PIPE).spawn(text=True) as p:
        assert p.communicate("text") == ("text", None)


def test_command_is_the_native_class_and_spawns_again():
    # spawnkit.Command is the engine's Command (a PyO3 class); spawning copies it, so one
    # command is a template: spawned again, and from several threads at once.
    import threading

    from spawnkit import _native

    assert issubclass(Command, _native.Command)
    cmd = child("import os, sys; print(sys.argv[1], os.environ['K'])").arg("a").env("K", "1")
    assert out(cmd) == "a 1\n" and out(cmd) == "a 1\n"
    assert out(cmd.env("K", "2")) == "a 2\n"
    seen, errors = [], []

    def spawn_some():
        try:
            for _ in range(20):
                seen.append(out(cmd))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=spawn_some) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and seen == ["a 2\n"] * 80


def test_spawn_many_keeps_order_and_returns_failures_per_item():
    cmds = [Command("sh").args(["-c", "exit 3"]), Command("/no/such/program"),
            Command("sh").args(["-c", "echo $0"]).arg0("third")]
    got = spawnkit.spawn_many(cmds, stdout=PIPE)
    assert isinstance(got[1], FileNotFoundError) and got[1].filename == "/no/such/program"
    assert got[0].wait() == 3
    assert got[2].communicate()[0] == b"third\n" and got[2].returncode == 0


def test_spawn_takes_only_stream_arguments():
    # Everything else is an option of the Command: Popen's cwd= would be silently ignored.
    with pytest.raises(TypeError, match="cwd"):
        Command("true").spawn(cwd="/")
    assert Command("true").spawn(stdout=DEVNULL, text=True).wait() == 0


def test_arg0_and_env():
    assert out(Command("sh").arg0("my-name").args(["-c", 'echo "$0"'])) == "my-name\n"
    cmd = child("import os; print(sorted(k for k in os.environ if k.startswith('SK_')))")
    os.environ["SK_INHERITED"] = "1"
    try:
        assert out(cmd.env("SK_NEW", "x")) == "['SK_INHERITED', 'SK_NEW']\n"
        assert out(cmd.env_remove("SK_INHERITED")) == "['SK_NEW']\n"
        code = "import os; print(sorted(k for k in os.environ if k != 'LC_CTYPE'))"
        assert out(child(code).env_clear().envs({"A": "1", "B": "2"})) == "['A', 'B']\n"
    finally:
        del os.environ["SK_INHERITED"]


def test_stderr_to_stdout():
    r = Command("sh").args(["-c", "echo o; echo e >&2"]).stderr(STDOUT).output()
    assert r.stdout == b"o\ne\n" and r.stderr is None
    assert Command("sh").args(["-c", "echo o"]).stdout(DEVNULL).output().stdout is None


# ---------------------------------------------------------------- limits, scheduling

def test_rlimits():
    code = ("import resource as r; "
            "print(r.getrlimit(r.RLIMIT_NOFILE), r.getrlimit(r.RLIMIT_CORE), "
            "r.getrlimit(r.RLIMIT_FSIZE)[0] == r.RLIM_INFINITY)")
    cmd = (child(code).rlimit("nofile", 64, 128).rlimit(resource.RLIMIT_CORE, 0)
           .rlimit("RLIMIT_FSIZE", spawnkit.RLIM_INFINITY))
    assert out(cmd) == "(64, 128) (0, 0) True\n"


def test_bad_rlimit():
    with pytest.raises(ValueError, match="unknown resource"):
        Command("true").rlimit("nosuch", 1).status()
    with pytest.raises(OSError) as e:
        Command("true").rlimit("nofile", 10, 5).status()  # soft > hard: EINVAL
    assert e.value.errno == errno.EINVAL
    assert e.value.step == "setrlimit" and e.value.in_child is True
    assert "setrlimit NOFILE" in str(e.value)


def test_rlimit_negative_values():
    # -1 is resource.RLIM_INFINITY: unlimited. Any other negative value is refused, as
    # spawnkit run --rlimit refuses it, instead of wrapping to a huge limit the child's
    # setrlimit then fails on (EPERM) or, as root, grants.
    assert resource.RLIM_INFINITY == spawnkit.RLIM_INFINITY == -1
    plan = Command("true").rlimit("nofile", 64, -1).rlimit("core", -1).plan().splitlines()
    assert "setrlimit NOFILE 64:unlimited" in plan and "setrlimit CORE unlimited:unlimited" in plan
    for soft, hard in [(-2, -2), (-2, None), (10, -5), (-(2**63), -1)]:
        with pytest.raises(ValueError, match=r"setrlimit NOFILE: -\d+ is not a limit"):
            Command("true").rlimit("nofile", soft, hard).status()
        with pytest.raises(ValueError, match="is not a limit"):
            Command("true").rlimit("nofile", soft, hard).plan()


def test_nice_and_cpus():
    base = os.nice(0)
    assert out(child("import os; print(os.nice(0))").nice(3)) == f"{min(base + 3, 19)}\n"
    cpu = sorted(os.sched_getaffinity(0))[0]
    code = "import os; print(sorted(os.sched_getaffinity(0)))"
    assert out(child(code).cpu_affinity([cpu])) == f"[{cpu}]\n"


def test_parent_death_signal_and_no_new_privs():
    code = ("import ctypes; libc = ctypes.CDLL(None); s = ctypes.c_int(); "
            "libc.prctl(2, ctypes.byref(s), 0, 0, 0); "  # PR_GET_PDEATHSIG
            "print(s.value, libc.prctl(39, 0, 0, 0, 0))")  # PR_GET_NO_NEW_PRIVS
    assert out(child(code)) == "0 0\n"
    assert out(child(code).parent_death_signal("TERM").no_new_privs()) == \
        f"{int(signal.SIGTERM)} 1\n"
    assert out(child(code).parent_death_signal(signal.SIGKILL)) == f"{int(signal.SIGKILL)} 0\n"


def test_parent_death_signal_fires():
    # A middle process spawns a sleeper with pdeathsig KILL and exits; the sleeper dies.
    code = ("import spawnkit, sys; p = spawnkit.Command('sleep').arg('30')"
            ".parent_death_signal('KILL').spawn(); print(p.pid, flush=True)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(spawnkit.__file__))]))
    mid = std.run([PY, "-c", code], capture_output=True, env=env, check=True)
    pid = int(mid.stdout)
    for _ in range(200):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[1].startswith("Z"):
                    break
        except FileNotFoundError:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the child outlived its parent")


# ---------------------------------------------------------------- fds, signals

def test_fd_maps():
    r, w = os.pipe()
    try:
        code = "import os; os.write(5, b'to five'); os.close(5)"
        Command(PY).args(["-S", "-c", code]).fd(5, w).status()
        os.close(w)
        w = -1
        assert os.read(r, 100) == b"to five"
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_fd_swap_and_keep():
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    try:
        os.dup2(w1, 20)
        os.dup2(w2, 21)
        code = "import os; os.write(20, b'a'); os.write(21, b'b'); os.write(30, b'k')"
        kept_r, kept_w = os.pipe()
        os.dup2(kept_w, 30)  # close-on-exec is cleared for a kept fd
        assert Command(PY).args(["-S", "-c", code]).fd(20, 21).fd(21, 20).keep_fd(30).status() == 0
        for fd in (w1, w2, 20, 21, 30, kept_w):
            os.close(fd)
        assert (os.read(r1, 10), os.read(r2, 10), os.read(kept_r, 10)) == (b"b", b"a", b"k")
        os.close(kept_r)
    finally:
        for fd in (r1, r2):
            os.close(fd)


def test_close_other_fds():
    r, w = os.pipe()
    os.set_inheritable(r, True)
    try:
        code = f"import os; print(os.path.exists('/proc/self/fd/{r}'))"
        assert out(child(code)) == "False\n"
        assert out(child(code).close_other_fds(False)) == "True\n"
    finally:
        os.close(r)
        os.close(w)


STATUS = ("import re; s = open('/proc/self/status').read(); "
          "print(*re.findall(r'^Sig(?:Blk|Ign):\\s*(\\w+)', s, re.M))")


def test_signal_mask_and_defaults():
    def bits(*sigs):
        return f"{sum(1 << (int(s) - 1) for s in sigs):016x}"
    assert out(child(STATUS).signal_mask([])).split()[0] == bits()
    assert out(child(STATUS).signal_mask(["USR1", signal.SIGHUP])).split()[0] == \
        bits(signal.SIGUSR1, signal.SIGHUP)
    old = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        ign = int(out(child(STATUS)).split()[1], 16)
        assert ign & (1 << (signal.SIGUSR2 - 1))
        ign = int(out(child(STATUS).signal_default("USR2")).split()[1], 16)
        assert not ign & (1 << (signal.SIGUSR2 - 1))
        ign = int(out(child(STATUS).restore_signals(False)).split()[1], 16)
        assert ign & (1 << (signal.SIGPIPE - 1))  # Python ignores SIGPIPE; not restored
    finally:
        signal.signal(signal.SIGUSR2, old)


def test_session_and_group():
    code = "import os; p = os.getpid(); print(os.getsid(0) == p, os.getpgid(0) == p)"
    assert out(child(code).setsid()) == "True True\n"
    assert out(child(code).process_group(0)) == "False True\n"


@pytest.mark.skipif(not is_root(), reason="needs root to change credentials")
def test_credentials_and_umask():
    # /bin/sh, not this venv's Python: user nobody may not reach the venv.
    cmd = Command("sh").args(["-c", "echo $(id -u) $(id -g) $(id -G) $(umask)"])
    assert out(cmd.uid(65534).gid(65534).umask(0o027)) == "65534 65534 65534 0027\n"
    cmd = Command("sh").args(["-c", "echo $(id -u) $(id -g) $(id -G | tr ' ' '\\n' | sort -n)"])
    assert out(cmd.uid("nobody").gid(65534).groups([65534, 1]).umask(0o022)) == \
        "65534 65534 1 65534\n"


def test_a_umask_above_0777_is_refused_by_the_native_api():
    # The library's one check (spawnkit run --umask 1777 says the same); spawnkit.subprocess
    # masks it as CPython's child does.
    with pytest.raises(ValueError, match=r"umask 1777: not a mode \(0..=0777\)"):
        Command("true").umask(0o1777).plan()
    r = spawnkit.subprocess.run(["sh", "-c", "umask"], umask=0o1027, capture_output=True)
    assert r.stdout == b"0027\n"


def test_all_ones_ids_are_refused():
    # (uid_t)-1 is "no change" to setresuid: the child would silently keep the parent's ids.
    for cmd in (Command("id").uid(2**32 - 1), Command("id").gid(2**32 - 1)):
        with pytest.raises(ValueError, match=r"\(.id_t\)-1 is not an id"):
            cmd.status()
        with pytest.raises(ValueError, match=r"\(.id_t\)-1 is not an id"):
            cmd.plan()


# ---------------------------------------------------------------- strategies, plans, errors

def test_posix_spawn_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="posix-spawn"):
        Command("true").strategy("posix-spawn").rlimit("nofile", 64).status()
    with pytest.raises(ValueError, match="unknown strategy"):
        Command("true").strategy("teleport")


def test_pre_exec_uses_fork_exec(tmp_path):
    marker = tmp_path / "ran"
    assert Command("true").pre_exec(lambda: marker.write_text("yes")).status() == 0
    assert marker.read_text() == "yes"
    with pytest.raises(ValueError, match="fork-exec"):
        Command("true").pre_exec(lambda: None).strategy("clone-vfork").status()
    with pytest.raises(std.SubprocessError, match="preexec_fn"):
        Command("true").pre_exec(lambda: 1 / 0).status()


def test_signal_mask_refuses_what_cannot_be_blocked():
    # As spawnkit run --sigmask KILL: the kernel would silently leave them out.
    for sig in ["KILL", "SIGSTOP", signal.SIGKILL, 19]:
        with pytest.raises(ValueError, match=r"SIG(KILL|STOP) cannot be blocked"):
            Command("true").signal_mask(["INT", sig]).status()
        with pytest.raises(ValueError, match="cannot be blocked"):
            Command("true").signal_mask([sig]).plan()


def test_plan_shows_the_steps_without_spawning(tmp_path):
    plan = (Command("/bin/true").current_dir(tmp_path).rlimit("nofile", 64).nice(2)
            .fd(4, 3).fd(3, 4).setsid().umask(0o22).no_new_privs().plan())
    lines = plan.splitlines()
    assert lines[0] == "strategy clone-vfork"
    assert "setsid" in lines and "setrlimit NOFILE 64:64" in lines
    assert f'chdir "{tmp_path}"' in lines and "prctl PR_SET_NO_NEW_PRIVS" in lines
    assert lines[-1].startswith('execve "/bin/true"')
    assert Command("true").strategy("fork-exec").plan().startswith("strategy fork-exec")


def test_plan_escapes_what_is_not_printable_utf8(tmp_path):
    # As ls --quoting-style=c: the text is exact, and a backslash always starts an escape.
    d = os.fsencode(tmp_path) + b'/d\xff\\ "q"\t\x1b\xc3\xa9'
    plan = (Command(b"/bin/tr\xfe").args([b"a\xff", "b\\c", "\u202e"]).current_dir(d)
            .plan().splitlines())
    assert f'chdir "{tmp_path}/d\\377\\\\ \\"q\\"\\t\\033\u00e9"' in plan, plan
    assert plan[-1] == ('execve "/bin/tr\\376" argv ["/bin/tr\\376", "a\\377", "b\\\\c", '
                        '"\\342\\200\\256"]'), plan[-1]
    with pytest.raises(FileNotFoundError) as e:
        Command("true").current_dir(b"/nope/\xff").status()
    assert e.value.strerror == 'chdir "/nope/\\377": No such file or directory'
    assert e.value.filename == b"/nope/\xff"


def test_native_errors_name_the_step():
    with pytest.raises(FileNotFoundError) as e:
        Command("spawnkit-no-such-program").status()
    assert e.value.step == "execve" and e.value.filename == "spawnkit-no-such-program"
    assert "not found in PATH" in str(e.value)
    with pytest.raises(FileNotFoundError) as e:
        Command("true").current_dir("/nonexistent-dir").status()
    assert e.value.step == "chdir" and e.value.filename == "/nonexistent-dir"
    with pytest.raises(ValueError, match="embedded null byte"):
        Command("true").arg("a\0b").status()


# ---------------------------------------------------------------- pidfd, lifecycle

def test_pidfd_is_pollable():
    p = Command("sleep").arg("0.3").spawn()
    fd = p.pidfd
    assert isinstance(fd, int) and fd >= 0
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    assert poller.poll(0) == []  # still running
    assert poller.poll(10_000) == [(fd, select.POLLIN)]
    assert p.poll() == 0
    assert p.pidfd is None  # closed once reaped


def test_pidfd_with_selectors_and_signal():
    import selectors
    p = Command("sleep").arg("30").spawn()
    with selectors.DefaultSelector() as sel:
        sel.register(p.pidfd, selectors.EVENT_READ)
        signal.pidfd_send_signal(p.pidfd, signal.SIGTERM)
        assert sel.select(10)
    assert p.wait() == -signal.SIGTERM


def test_kill_on_drop():
    p = Command("sleep").arg("30").kill_on_drop().spawn()
    pid = p.pidfd and p.pid
    del p
    import gc
    gc.collect()
    assert not os.path.exists(f"/proc/{pid}")  # killed and reaped


def test_reap_orphans_and_clone3():
    assert spawnkit.reap_orphans() >= 0
    assert isinstance(spawnkit.uses_clone3(), bool)
    assert set(spawnkit.STRATEGIES) == {"clone-vfork", "posix-spawn", "fork-exec"}


def test_gil_released_while_waiting():
    import threading
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.005)
    t = threading.Thread(target=ticker)
    t.start()
    try:
        Command("sleep").arg("0.5").status()
    finally:
        stop.set()
        t.join()
    assert len(ticks) > 10


def test_every_public_name_of_the_package_resolves_imported_lazily_or_not():
    import subprocess as std_subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys, spawnkit
        assert "spawnkit.subprocess" not in sys.modules and "spawnkit.observe" not in sys.modules
        for name in spawnkit.__all__:
            getattr(spawnkit, name)
        assert set(spawnkit.__all__) <= set(dir(spawnkit))
        from spawnkit import PIPE, Popen, ps, subprocess, observe, MemoryInfo
        assert spawnkit.subprocess is sys.modules["spawnkit.subprocess"] is subprocess
        assert Popen is subprocess.Popen and ps is observe.ps and PIPE == -1
        assert spawnkit.Command("sh").args(["-c", "echo hi"]).output().stdout == b"hi\\n"
        try:
            spawnkit.no_such_name
        except AttributeError as e:
            assert "no_such_name" in str(e)
        else:
            raise AssertionError("no AttributeError")
        print("ok")
    """)
    out = std_subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_spawn_many_near_the_fd_limit_starts_what_one_by_one_would():
    # In a process of its own with a low fd limit: a local start not yet finished holds a
    # pipe besides its pidfd; when fds run out, spawn_many finishes the ones it holds and
    # tries again, so it starts every child that one spawn after another would have.
    code = """if True:
        import os, resource, spawnkit
        n = 41
        room = len(os.listdir("/proc/self/fd")) + n + 2
        resource.setrlimit(resource.RLIMIT_NOFILE, (room, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        got = spawnkit.spawn_many([spawnkit.Command("true") for _ in range(n)])
        bad = [g for g in got if isinstance(g, BaseException)]
        assert not bad, f"{len(bad)} of {n} failed: {bad[:2]}"
        assert all(p.wait() == 0 for p in got)
        print("ok")
    """
    out = std.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_spawn_many_locally_past_its_start_window():
    # More commands than the start window: every child still comes back in order, failures
    # per item, and nothing is left open. (Earlier tests' pipes closed first: a collection
    # during this one would close them and look like a change.)
    gc.collect()
    before = sorted(int(n) for n in os.listdir("/proc/self/fd"))
    cmds = [spawnkit.Command("sh").args(["-c", f"echo {i}"]) for i in range(150)]
    cmds[70] = spawnkit.Command("/nonexistent/spawnkit-test-program")
    got = spawnkit.spawn_many(cmds, stdout=PIPE)
    assert isinstance(got[70], FileNotFoundError)
    for i, p in enumerate(got):
        if i != 70:
            out, _ = p.communicate()
            assert out == f"{i}\n".encode()
    assert sorted(int(n) for n in os.listdir("/proc/self/fd")) == before
