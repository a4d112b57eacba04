"""spawnkit.asyncio: asyncio's subprocess API with spawnkit children waited for by pidfd.

CPython's own Lib/test/test_asyncio/test_subprocess.py runs against it twice: on
spawnkit.asyncio's event loop (so `asyncio.create_subprocess_exec` and `loop.subprocess_exec`
go through spawnkit unchanged) and with `spawnkit.asyncio.create_subprocess_exec`/`_shell` in
place of asyncio's on a plain loop. Tests that mock CPython internals are listed with why.
"""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import spawnkit.asyncio as ska

# test name -> why it does not apply to spawnkit.asyncio
NOT_APPLICABLE = {
    "test_popen_error": "mocks the standard subprocess.Popen, which spawnkit does not call "
                        "(test_a_failed_start_closes_everything below is its counterpart)",
    "test_popen_error_with_stdin_pipe": "mocks the standard subprocess.Popen (as above)",
}

RUNNER = textwrap.dedent("""
    import asyncio, sys, unittest
    import spawnkit.asyncio as ska
    from test.test_asyncio import test_subprocess as T, utils as test_utils

    class SpawnkitLoopTests(T.SubprocessMixin, test_utils.TestCase):
        def setUp(self):
            super().setUp()
            self.loop = ska.new_event_loop()
            self.set_event_loop(self.loop)

    class SpawnkitFunctionsTests(T.SubprocessMixin, test_utils.TestCase):
        # asyncio's create_subprocess_* replaced by spawnkit's on a plain loop (the tests that
        # call loop.subprocess_exec directly still need a watcher there).
        def setUp(self):
            super().setUp()
            self.saved = asyncio.create_subprocess_exec, asyncio.create_subprocess_shell
            for m in (asyncio, asyncio.subprocess):
                m.create_subprocess_exec = ska.create_subprocess_exec
                m.create_subprocess_shell = ska.create_subprocess_shell
            policy = asyncio.get_event_loop_policy()
            self.loop = policy.new_event_loop()
            self.set_event_loop(self.loop)
            watcher = asyncio.ThreadedChildWatcher()
            watcher.attach_loop(self.loop)
            policy.set_child_watcher(watcher)

        def tearDown(self):
            for m in (asyncio, asyncio.subprocess):
                m.create_subprocess_exec, m.create_subprocess_shell = self.saved
            super().tearDown()
            policy = asyncio.get_event_loop_policy()
            watcher = policy.get_child_watcher()
            policy.set_child_watcher(None)
            watcher.attach_loop(None)
            watcher.close()

    skip = set(sys.argv[1:])

    def tests(suite):
        for t in suite:
            if isinstance(t, unittest.TestSuite):
                yield from tests(t)
            else:
                yield t

    load = unittest.defaultTestLoader.loadTestsFromTestCase
    loaded = unittest.TestSuite([load(SpawnkitLoopTests), load(SpawnkitFunctionsTests)])
    keep = unittest.TestSuite(t for t in tests(loaded) if t.id().rsplit(".", 1)[-1] not in skip)
    result = unittest.TextTestRunner(verbosity=1).run(keep)
    print(f"{result.testsRun} run, {len(result.failures)} failures, {len(result.errors)} errors")
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 40 else 1)
""")


def test_cpython_test_asyncio_subprocess_passes_with_spawnkit():
    try:
        import test.test_asyncio.test_subprocess  # noqa: F401
    except ImportError:
        pytest.skip("this Python has no test package (Lib/test)")
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    r = subprocess.run([sys.executable, "-c", RUNNER, *NOT_APPLICABLE], capture_output=True,
                       text=True, timeout=600, env=env, cwd=os.path.dirname(__file__))
    tail = "\n".join((r.stdout + r.stderr).splitlines()[-60:])
    assert r.returncode == 0, tail


def open_fds():
    return sorted(int(n) for n in os.listdir("/proc/self/fd"))


def test_no_watcher_thread_no_sigchld_handler():
    # Waiting costs a readiness event on the pidfd: no thread is started, no SIGCHLD handler
    # installed, and the children are reaped (no zombie, no fd left).
    before_handler = signal.getsignal(signal.SIGCHLD)
    before_fds = open_fds()
    threads_seen = []

    async def main():
        procs = []
        for i in range(40):
            procs.append(await ska.create_subprocess_exec(
                "sh", "-c", f"exit {i % 7}", stdout=asyncio.subprocess.DEVNULL))
            threads_seen.append(threading.active_count())
        codes = await asyncio.gather(*(p.wait() for p in procs))
        return codes, [p.pid for p in procs]

    codes, pids = asyncio.run(main())
    assert codes == [i % 7 for i in range(40)]
    assert max(threads_seen) == threading.active_count() == 1
    assert signal.getsignal(signal.SIGCHLD) == before_handler
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"{pid} is left (a zombie?)"
    assert open_fds() == before_fds


def test_streams_and_signals_from_inside_the_child():
    async def main():
        p = await ska.create_subprocess_exec(
            sys.executable, "-c",
            "import os, sys; data = sys.stdin.read(); "
            "print(os.getppid(), data.upper()); print('err', file=sys.stderr)",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await p.communicate(b"hello")
        q = await ska.create_subprocess_shell("sleep 30")
        q.send_signal(signal.SIGTERM)
        return p.returncode, out, err, await q.wait()

    rc, out, err, killed = asyncio.run(main())
    assert (rc, out, err, killed) == (0, f"{os.getpid()} HELLO\n".encode(), b"err\n",
                                      -signal.SIGTERM)


def test_a_failed_start_closes_everything():
    # What CPython's test_popen_error checks with a mock, with a real failure: the exception
    # reaches the caller, and no pipe, socket or warning is left behind.
    before = open_fds()

    async def main():
        with pytest.raises(FileNotFoundError) as e:
            await ska.create_subprocess_exec("/no/such/program", stdin=asyncio.subprocess.PIPE,
                                             stdout=asyncio.subprocess.PIPE)
        return e.value.filename

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert asyncio.run(main()) == "/no/such/program"
    assert open_fds() == before


def test_the_event_loop_runs_unchanged_asyncio_code():
    async def main():
        p = await asyncio.create_subprocess_exec("sh", "-c", "echo $0", "x",
                                                 stdout=asyncio.subprocess.PIPE)
        out, _ = await p.communicate()
        return type(asyncio.get_running_loop()), out, p.returncode

    loop_type, out, rc = ska.run(main())
    assert loop_type is ska.EventLoop and (out, rc) == (b"x\n", 0)


def test_uvloop_loops_work_too():
    uvloop = pytest.importorskip("uvloop")

    async def main():
        p = await ska.create_subprocess_exec("cat", stdin=asyncio.subprocess.PIPE,
                                             stdout=asyncio.subprocess.PIPE)
        return await p.communicate(b"via uvloop"), p.returncode

    assert uvloop.run(main()) == ((b"via uvloop", None), 0)
