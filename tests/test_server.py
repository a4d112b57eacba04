"""The spawn server's Python faces: spawnkit.Server (private, forked early), spawnkit.connect
(a real `spawnkit serve` process), Command.spawn(via=...), and spawnkit.subprocess routed
through a server by use_server() or $SPAWNKIT_SERVER. Checked from inside the children."""

import json
import os
import signal
import subprocess as std
import sys
import threading
import time
from pathlib import Path

import pytest

import spawnkit
from conftest import PY
from spawnkit import PIPE, Command
from spawnkit import subprocess as sks

ROOT = Path(__file__).resolve().parent.parent
SK = ROOT / "target" / "debug" / "spawnkit"

PROBE = ("import json, os, sys; json.dump({'ppid': os.getppid(), 'cwd': os.getcwd(), "
         "'env': os.environ.get('SK_SERVER_TEST'), 'argv': sys.argv[1:], "
         "'fds': sorted(int(f) for f in os.listdir('/proc/self/fd'))}, sys.stdout)")


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    """A real `spawnkit serve` on a socket of its own; yields (socket path, server pid)."""
    if not SK.exists():
        pytest.skip(f"{SK} is not built (scripts/test builds it)")
    d = tmp_path_factory.mktemp("serve")
    sock = d / "sock"
    p = std.Popen([SK, "serve", "--socket", sock], stdout=std.PIPE, stderr=std.STDOUT)
    for _ in range(100):
        if sock.exists():
            break
        time.sleep(0.05)
    else:
        p.kill()
        pytest.fail(f"spawnkit serve did not start: {p.stdout.read()}")
    yield str(sock), p.pid
    p.terminate()
    p.wait(10)


@pytest.fixture
def private():
    srv = spawnkit.Server()
    yield srv
    srv.close()


def probe(via, *args, **kw):
    cmd = Command(PY).args(["-S", "-c", PROBE, *args])
    for k, v in kw.items():
        getattr(cmd, k)(*v) if isinstance(v, tuple) else getattr(cmd, k)(v)
    p = cmd.spawn(via=via, stdout=PIPE)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0
    return json.loads(out)


def test_private_server_child_sees_the_callers_cwd_env_and_the_server_as_parent(private, tmp_path):
    os.environ["SK_SERVER_TEST"] = "from-client"
    try:
        seen = probe(private, "a b", current_dir=str(tmp_path))
    finally:
        del os.environ["SK_SERVER_TEST"]
    assert seen["ppid"] == private.pid != os.getpid()
    assert (seen["cwd"], seen["env"], seen["argv"]) == (str(tmp_path), "from-client", ["a b"])
    # Nothing of the server's reaches the child: the same fds as a local spawn's.
    assert seen["fds"] == probe(None)["fds"]
    # Unset cwd: the caller's, not the server's.
    assert probe(private)["cwd"] == os.getcwd()


def test_spawnkit_serve_passes_fds_pipes_status_and_errors(serve, tmp_path):
    path, pid = serve
    with spawnkit.connect(path) as srv:
        assert str(srv.path) == path and srv.pid is None
        r, w = os.pipe()
        try:
            seen = probe(srv, fd=(5, w))
            assert seen["ppid"] == pid and 5 in seen["fds"]
        finally:
            os.close(r)
            os.close(w)
        p = Command("cat").stdin(PIPE).stdout(PIPE).spawn(via=srv)
        assert p.communicate(b"through the server") == (b"through the server", None)
        assert Command("sh").args(["-c", "exit 7"]).spawn(via=srv).wait() == 7
        q = Command("sleep").arg("30").spawn(via=srv)
        q.send_signal(signal.SIGTERM)
        assert q.wait() == -signal.SIGTERM
        with pytest.raises(FileNotFoundError) as e:
            Command("/no/such/program").spawn(via=srv)
        assert e.value.filename == "/no/such/program" and e.value.step == "execve"
        with pytest.raises(FileNotFoundError) as e:
            Command("true").current_dir(tmp_path / "gone").spawn(via=srv)
        assert e.value.step == "chdir" and e.value.in_child is True


def test_use_server_routes_unchanged_subprocess_code(private):
    sks.use_server(private)
    try:
        r = sks.run(["sh", "-c", "echo $PPID; exit 3"], capture_output=True, text=True)
        assert (r.returncode, r.stdout) == (3, f"{private.pid}\n")
        assert sks.check_output(["echo", "hi"]) == b"hi\n"
        with pytest.raises(ValueError, match="preexec_fn cannot run through a spawn server"):
            sks.run(["true"], preexec_fn=lambda: None)
        with pytest.raises(FileNotFoundError):
            sks.run(["/no/such/program"])
    finally:
        sks.use_server(None)
    assert sks.run(["sh", "-c", "echo $PPID"], capture_output=True, text=True).stdout == \
        f"{os.getpid()}\n"


def test_each_call_through_a_server_sees_os_environ_as_it_is_then(private):
    """The environment travels once per connection and then by reference: a change to
    os.environ between calls, an env= of the call's own, and a removal each reach the next
    child as they would locally."""
    sks.use_server(private)
    show = ["sh", "-c", 'echo "${SK_ENV_TRAVEL-unset}:${SK_ENV_OTHER-unset}"']
    out = lambda **kw: sks.run(show, capture_output=True, text=True, **kw).stdout
    try:
        assert out() == "unset:unset\n"
        for value in ("one", "two", "two", "three"):
            os.environ["SK_ENV_TRAVEL"] = value
            assert out() == f"{value}:unset\n"
        assert out(env={"SK_ENV_OTHER": "given", "PATH": os.environ["PATH"]}) == "unset:given\n"
        assert out() == "three:unset\n"
        del os.environ["SK_ENV_TRAVEL"]
        assert out() == "unset:unset\n"
    finally:
        os.environ.pop("SK_ENV_TRAVEL", None)
        sks.use_server(None)


def test_spawnkit_server_environment_variable(serve):
    path, pid = serve
    code = ("import os, sys, spawnkit.subprocess as s\n"
            "a = s.run(['sh', '-c', 'echo $PPID'], capture_output=True, text=True).stdout\n"
            "child = os.fork()\n"
            "if child == 0:\n"
            "    b = s.run(['sh', '-c', 'echo $PPID'], capture_output=True, text=True).stdout\n"
            "    os.write(1, b.encode()); os._exit(0)\n"
            "os.waitpid(child, 0)\n"
            "print(a.strip())\n")
    r = std.run([PY, "-c", code], capture_output=True, text=True,
                env=dict(os.environ, SPAWNKIT_SERVER=path), timeout=60)
    assert r.returncode == 0, r.stderr
    # The forked copy connects again (it may not write into its parent's connection).
    assert r.stdout.split() == [str(pid), str(pid)]


def test_wrong_or_missing_key_is_refused_and_nothing_spawned(serve, tmp_path):
    path, _ = serve
    bad = tmp_path / "bad.key"
    bad.write_bytes(os.urandom(32))
    bad.chmod(0o600)
    with pytest.raises(ConnectionError):
        spawnkit.connect(path, key_file=bad)
    with pytest.raises(FileNotFoundError):
        spawnkit.connect(path, key_file=tmp_path / "none.key")


def test_a_private_server_belongs_to_its_process(private):
    pid = os.fork()
    if pid == 0:
        try:
            Command("true").spawn(via=private)
            os._exit(1)
        except RuntimeError as e:
            os._exit(0 if "fork" in str(e) else 2)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent's connection is intact.
    assert Command("true").spawn(via=private).wait() == 0


def test_closed_server_and_its_children(tmp_path):
    srv = spawnkit.Server()
    spid = srv.pid
    p = Command("sleep").arg("0.5").spawn(via=srv)
    srv.close()
    assert srv.closed
    with pytest.raises(ValueError, match="closed"):
        Command("true").spawn(via=srv)
    # The private server is gone (reaped by close), its child runs on and is still waitable.
    assert not Path(f"/proc/{spid}").exists()
    assert p.wait(timeout=10) == 0


def test_spawn_many_through_a_server_keeps_order_and_per_item_errors(private):
    cmds = [Command("sh").args(["-c", f"echo {i} $PPID"]) for i in range(12)]
    cmds.insert(5, Command("/no/such/program"))
    got = spawnkit.spawn_many(cmds, via=private, stdout=PIPE)
    assert isinstance(got[5], FileNotFoundError) and got[5].filename == "/no/such/program"
    outs = [p.communicate(timeout=30)[0] for i, p in enumerate(got) if i != 5]
    assert outs == [f"{i} {private.pid}\n".encode() for i in range(12)]
    assert all(p.returncode == 0 for i, p in enumerate(got) if i != 5)
    # The connection is in step afterwards.
    assert Command("true").spawn(via=private).wait() == 0


def test_unchanged_code_through_a_server_started_from_a_script(tmp_path, monkeypatch):
    # `spawnkit serve &` from a script ignores SIGINT and SIGQUIT: its children must not (a
    # child that kept that could not be interrupted). A relative cwd is the caller's.
    if not SK.exists():
        pytest.skip(f"{SK} is not built (scripts/test builds it)")
    sock = tmp_path / "sock"
    srv = std.Popen(["sh", "-c", f'trap "" INT QUIT; exec "{SK}" serve --socket "{sock}"'],
                    stdout=std.DEVNULL)
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        (tmp_path / "sub").mkdir()
        monkeypatch.chdir(tmp_path)
        code = """if True:
            import os, signal, time, spawnkit.subprocess as sp
            out = sp.run(["sh", "-c", "grep SigIgn /proc/self/status; pwd"], cwd="sub",
                         capture_output=True, text=True, check=True).stdout.split()
            print(out[1], out[2])
            p = sp.Popen(["sleep", "30"])
            time.sleep(0.3)
            p.send_signal(signal.SIGINT)
            print(p.wait(timeout=10))
        """
        env = {**os.environ, "SPAWNKIT_SERVER": str(sock)}
        r = std.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                    timeout=60)
        assert r.returncode == 0, r.stderr
        sigign, cwd, status = r.stdout.split()
        assert int(sigign, 16) & 0b110 == 0, f"SigIgn {sigign}"
        assert cwd == str(tmp_path / "sub")
        assert status == str(-signal.SIGINT)
    finally:
        srv.terminate()
        srv.wait(10)


def _threads_cpu_ns(pid):
    """The CPU time of every thread of `pid` so far (schedstat), ns."""
    total = 0
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((t / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def test_wake_tells_the_server_a_request_is_coming(private):
    # Server.wake(): a Wake frame, after which the server's loop polls for the request (up
    # to 100 us) instead of sleeping.
    # Seen from the server: its CPU over 30 wake() calls 3 ms apart is above its CPU over the
    # same pause without them (each Wake polls ~100 us; the budget allows 2 ms in 10 ms).
    assert Command("true").spawn(via=private).wait(timeout=30) == 0  # up, then idle

    def spent(wake):
        before = _threads_cpu_ns(private.pid)
        for _ in range(30):
            if wake:
                assert private.wake() is None
            time.sleep(0.003)
        return _threads_cpu_ns(private.pid) - before

    idle, woken = spent(False), spent(True)
    assert woken - idle > 30 * 20_000, (idle, woken)
    # Then requests are served as ever.
    sks.use_server(private)
    try:
        r = sks.run(["sh", "-c", "echo $PPID"], capture_output=True, text=True)
        assert r.stdout == f"{private.pid}\n"
    finally:
        sks.use_server(None)
    private.close()
    with pytest.raises(ValueError, match="closed"):
        private.wake()



def test_waiting_for_a_server_child_sleeps_until_the_server_has_reaped_it(private):
    # A server's child is known to have ended once the server has reaped it (its pidfd hangs
    # up, and then holds the exit status); the pidfd is readable from the exit on. With the
    # server stopped after the child's exit, the wait must sleep until the server runs again
    # and reaps it, not spin on a readable pidfd (which burnt the waiting thread's CPU for as
    # long as the reap took).
    sks.use_server(private)
    try:
        for timeout in (None, 30):
            p = sks.Popen(["/bin/sh", "-c", "exit 7"])
            time.sleep(0.2)  # it has exited; the server has reaped it by now
            assert p.wait(timeout) == 7
            p = sks.Popen(["/bin/sleep", "0.1"])
            os.kill(private.pid, signal.SIGSTOP)
            # Resumed by another process: a spinning wait may starve this one's threads.
            resume = std.Popen(["/bin/sh", "-c", f"sleep 0.6; kill -CONT {private.pid}"])
            seen = []

            def wait(p=p, timeout=timeout):
                t0, c0 = time.monotonic(), time.thread_time()
                rc = p.wait(timeout)
                seen.append((rc, time.monotonic() - t0, time.thread_time() - c0))

            # On a thread, joined with a bound: a wait that missed the hang-up fails the test
            # rather than hanging it.
            waiter = threading.Thread(target=wait, daemon=True)
            try:
                waiter.start()
                waiter.join(10)
            finally:
                os.kill(private.pid, signal.SIGCONT)
                resume.wait()
            assert seen, "the wait did not end within 10 s"
            rc, waited, cpu = seen[0]
            assert rc == 0
            assert waited >= 0.5, waited  # the reap waited for the server
            assert cpu < 0.1, f"the wait spun: {cpu:.3f} s of CPU in {waited:.3f} s"
    finally:
        sks.use_server(None)
