"""spawnkit.asyncio: asyncio's subprocess API with spawnkit children waited for by pidfd.

CPython's own Lib/test/test_asyncio/test_subprocess.py runs against it three times: on
spawnkit.asyncio's event loop (so `asyncio.create_subprocess_exec` and `loop.subprocess_exec`
go through spawnkit unchanged), the same with a private spawn server set process-wide
(`spawnkit.subprocess.use_server`: requests in flight, answers awaited through the loop), and
with `spawnkit.asyncio.create_subprocess_exec`/`_shell` in place of asyncio's on a plain loop.
Tests that mock CPython internals are listed with why.
"""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import spawnkit.asyncio as ska

# test name -> why it does not apply to spawnkit.asyncio
NOT_APPLICABLE = {
    "test_popen_error": "mocks the standard subprocess.Popen, which spawnkit does not call "
                        "(test_a_failed_start_closes_everything below is its counterpart)",
    "test_popen_error_with_stdin_pipe": "mocks the standard subprocess.Popen (as above)",
}

# test name -> why it does not apply through a spawn server (the server run only)
NOT_THROUGH_A_SERVER = {
    name: "passes close_fds=False, which a spawn server refuses (it would hand over the "
          "server's own fds: docs/protocol.md); test_close_fds_false_refused_through_a_server "
          "checks the refusal"
    for name in ("test_devnull_error", "test_devnull_input", "test_devnull_output",
                 "test_devstdin_input", "test_empty_input", "test_stdin_not_inheritable")
}

RUNNER = textwrap.dedent("""
    import asyncio, sys, unittest
    import spawnkit, spawnkit.asyncio as ska, spawnkit.subprocess as sks
    from test.test_asyncio import test_subprocess as T, utils as test_utils

    SERVER = spawnkit.Server()  # forked now, while this process is small

    class SpawnkitLoopTests(T.SubprocessMixin, test_utils.TestCase):
        def setUp(self):
            super().setUp()
            self.loop = ska.new_event_loop()
            self.set_event_loop(self.loop)

    class SpawnkitServerTests(SpawnkitLoopTests):
        # Every child through the private server, its answer awaited by the loop.
        def setUp(self):
            super().setUp()
            sks.use_server(SERVER)

        def tearDown(self):
            sks.use_server(None)
            super().tearDown()

    for name in sys.argv[1].split(","):
        setattr(SpawnkitServerTests, name, unittest.skip("refused through a server")(
            lambda self: None))

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

    skip = set(sys.argv[2:])

    def tests(suite):
        for t in suite:
            if isinstance(t, unittest.TestSuite):
                yield from tests(t)
            else:
                yield t

    load = unittest.defaultTestLoader.loadTestsFromTestCase
    loaded = unittest.TestSuite([load(SpawnkitLoopTests), load(SpawnkitServerTests),
                                 load(SpawnkitFunctionsTests)])
    keep = unittest.TestSuite(t for t in tests(loaded) if t.id().rsplit(".", 1)[-1] not in skip)
    result = unittest.TextTestRunner(verbosity=1).run(keep)
    print(f"{result.testsRun} run, {len(result.failures)} failures, {len(result.errors)} errors")
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 60 else 1)
""")


def test_cpython_test_asyncio_subprocess_passes_with_spawnkit():
    try:
        import test.test_asyncio.test_subprocess  # noqa: F401
    except ImportError:
        pytest.skip("this Python has no test package (Lib/test)")
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    r = subprocess.run([sys.executable, "-c", RUNNER, ",".join(NOT_THROUGH_A_SERVER),
                        *NOT_APPLICABLE], capture_output=True,
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


def test_many_local_starts_in_flight_on_one_loop():
    # 64 children started at once from one loop: each clone returns at once and its exec is
    # awaited through the loop; every child gets its own streams, no thread is made, nothing
    # is left open.
    before = open_fds()

    async def main():
        async def one(i):
            p = await ska.create_subprocess_exec(
                "sh", "-c", f"echo {i}; exit {i % 5}", stdout=asyncio.subprocess.PIPE)
            out, _ = await p.communicate()
            return out, p.returncode, threading.active_count()
        return await asyncio.gather(*(one(i) for i in range(64)))

    got = asyncio.run(main())
    assert [(o, rc) for o, rc, _ in got] == [(f"{i}\n".encode(), i % 5) for i in range(64)]
    assert max(t for _, _, t in got) == 1
    assert open_fds() == before


def test_a_cancelled_local_start_leaves_no_child():
    # Cancelled while its exec is awaited: the child is killed and reaped, the task sees its
    # cancellation, and the loop's reader for the start is gone.
    marker = f"31.{os.getpid()}"
    before = open_fds()

    async def main():
        t = asyncio.ensure_future(ska.create_subprocess_exec("sleep", marker))
        await asyncio.sleep(0)  # cloned, its exec awaited
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        p = await ska.create_subprocess_exec("true")
        return await p.wait()

    assert asyncio.run(main()) == 0
    assert processes_with_arg(marker) == []
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


CHILD_VIEW = ("import os; print(os.getppid(), os.readlink('/proc/self/fd/0'), "
              "sorted(int(n) for n in os.listdir('/proc/self/fd')))")


def child_view(run):
    """(ppid, stdin's target, open fds) as a child started by `run`'s loop sees them, and the
    threads this process had at most meanwhile."""
    threads = []

    async def main():
        p = await ska.create_subprocess_exec(sys.executable, "-c", CHILD_VIEW,
                                             stdin=asyncio.subprocess.DEVNULL,
                                             stdout=asyncio.subprocess.PIPE)
        threads.append(threading.active_count())
        out, _ = await p.communicate()
        ppid, stdin, fds = out.decode().split(" ", 2)
        return int(ppid), stdin, fds.strip(), p.returncode

    return run(main()), max(threads)


@pytest.fixture(scope="module")
def server():
    import spawnkit
    with spawnkit.Server() as s:
        yield s


@pytest.fixture
def through(server):
    import spawnkit.subprocess as sks
    sks.use_server(server)
    yield server
    sks.use_server(None)


def test_plain_streams_as_cpython_gives_them():
    # The fast path (argv and streams only): stdin is /dev/null, the parent is this process,
    # and the child has 0-2 and nothing else of ours (fd 3 is its own listdir's).
    (ppid, stdin, fds, rc), threads = child_view(asyncio.run)
    assert (ppid, stdin, fds, rc, threads) == (os.getpid(), "/dev/null", "[0, 1, 2, 3]", 0, 1)


def test_through_a_server_the_child_is_the_servers(through):
    # With a spawn server set process-wide, the loop sends the request and awaits the answer:
    # the child's parent is the server (this thread never cloned it), no thread was made.
    before = open_fds()
    (ppid, stdin, fds, rc), threads = child_view(asyncio.run)
    assert (ppid, stdin, fds, rc, threads) == (through.pid, "/dev/null", "[0, 1, 2, 3]", 0, 1)
    assert open_fds() == before


def test_many_in_flight_through_a_server(through):
    # 200 children, 64 at a time, each its own exit code: every answer reaches its own task.
    async def main():
        sem = asyncio.Semaphore(64)

        async def one(i):
            async with sem:
                p = await ska.create_subprocess_exec("sh", "-c", f"exit {i % 100}")
                return await p.wait()

        return await asyncio.gather(*(one(i) for i in range(200)))

    assert asyncio.run(main()) == [i % 100 for i in range(200)]


def test_errors_through_a_server_as_locally(through):
    before = open_fds()

    async def main():
        with pytest.raises(FileNotFoundError) as e:
            await ska.create_subprocess_exec("/no/such/program", stdin=asyncio.subprocess.PIPE,
                                             stdout=asyncio.subprocess.PIPE)
        with pytest.raises(ValueError, match="close_other_fds"):
            await ska.create_subprocess_exec("true", close_fds=False)
        return e.value.filename

    assert asyncio.run(main()) == "/no/such/program"
    assert open_fds() == before


def test_close_fds_false_refused_through_a_server(through):
    async def main():
        with pytest.raises(ValueError, match="hand over the server's fds"):
            await ska.create_subprocess_exec("true", stdin=asyncio.subprocess.DEVNULL,
                                             close_fds=False)

    asyncio.run(main())


def processes_with_arg(arg):
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if arg.encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
            pass
    return found


def test_a_cancelled_request_leaves_no_child(through):
    # Cancelled while its answer is awaited: the child the server started is killed and
    # reaped, and the task sees its cancellation.
    marker = f"30.{os.getpid()}"

    async def main():
        t = asyncio.ensure_future(ska.create_subprocess_exec("sleep", marker))
        await asyncio.sleep(0)  # the request is out, its answer awaited
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        p = await ska.create_subprocess_exec("true")  # the connection still works
        return await p.wait()

    assert asyncio.run(main()) == 0
    assert processes_with_arg(marker) == []


def test_uvloop_through_a_server(through):
    uvloop = pytest.importorskip("uvloop")
    (ppid, stdin, fds, rc), threads = child_view(uvloop.run)
    assert (ppid, stdin, rc) == (through.pid, "/dev/null", 0)


def test_a_closed_loop_is_not_kept():
    # The face's per-loop state is weak: a finished loop is freed.
    import gc
    import weakref

    loop = asyncio.new_event_loop()

    async def main():
        p = await ska.create_subprocess_exec("true")
        return await p.wait()

    assert loop.run_until_complete(main()) == 0
    loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None


async def _cancel_starts_with_pipes(marker):
    """Cancel starts with pipes while each awaits its exec (or the server's answer); with the
    CancelledError still referenced, the fds opened since and not closed, for each."""
    await asyncio.sleep(0)
    before = open_fds()  # the loop's own included
    left = []
    for _ in range(10):
        t = asyncio.ensure_future(ska.create_subprocess_exec(
            "sleep", marker, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE))
        await asyncio.sleep(0)  # the start is out, its outcome awaited
        t.cancel()
        with pytest.raises(asyncio.CancelledError) as e:
            await t
        # The exception (its traceback holds the start's frames) is alive: no pipe is open
        # on its account.
        assert e.value is not None
        left.append(sorted(set(open_fds()) - set(before)))
    return left


@pytest.mark.parametrize("how", ["locally", "through a server"])
def test_a_cancelled_start_closes_its_pipes(how, request):
    # asyncio's own start closes them: no fd waits for the collector, no ResourceWarning.
    import gc
    import warnings

    if how != "locally":
        request.getfixturevalue("through")
    marker = f"32.{os.getpid()}"
    before = open_fds()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always", ResourceWarning)
        left = asyncio.run(_cancel_starts_with_pipes(marker))
        gc.collect()
    assert [x for x in w if issubclass(x.category, ResourceWarning)] == []
    assert left == [[]] * 10
    assert processes_with_arg(marker) == []
    assert open_fds() == before


LEFT_RUNNING = textwrap.dedent("""
    import asyncio, gc, os, sys
    import spawnkit.asyncio as ska

    async def main():
        p = await ska.create_subprocess_exec("sleep", "30", stdin=asyncio.subprocess.PIPE,
                                             stdout=asyncio.subprocess.PIPE)
        return p.pid, os.readlink(f"/proc/{p.pid}/fd/1")

    pid, pipe = (ska.run if sys.argv[1] == "EventLoop" else asyncio.run)(main())
    gc.collect()
    with open(f"/proc/{pid}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    ours = []
    for n in os.listdir("/proc/self/fd"):
        try:
            ours.append(os.readlink(f"/proc/self/fd/{n}"))
        except FileNotFoundError:
            pass  # the listing's own
    print(state in "RSD", pipe in ours)  # running, and its pipe closed here
    os.kill(pid, 9)
""")


@pytest.mark.parametrize("loop", ["asyncio", "EventLoop"])
def test_a_loop_closed_with_a_child_running_says_nothing(loop):
    # CPython 3.11 says nothing and leaves the child running; the transport, no longer held
    # by the closed loop, must not ask it to schedule anything ("Event loop is closed"), and
    # its pipe is closed with it.
    r = subprocess.run([sys.executable, "-c", LEFT_RUNNING, loop], capture_output=True,
                       text=True, timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == "True False\n"


SK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "target",
                  "debug", "spawnkit")


def start_serve(sock):
    """A real `spawnkit serve` on `sock`, once its socket is there."""
    srv = subprocess.Popen([SK, "serve", "--socket", sock], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(sock):
            return srv
        time.sleep(0.025)
    srv.kill()
    srv.wait()
    pytest.fail("spawnkit serve did not start")


def test_a_restarted_server_leaves_no_connection_behind(tmp_path):
    # use_server(PATH): after the server restarts, the request that meets the closed
    # connection fails (ConnectionError, never sent again: as spawnkit.subprocess), the next
    # spawn connects again and its child is the new server's; the dead connection is not
    # kept (one fd per restart was, even after a collection).
    import gc

    import spawnkit.subprocess as sks
    if not os.path.exists(SK):
        pytest.skip(f"{SK} is not built (scripts/test builds it)")
    sock = str(tmp_path / "sock")

    async def parent():
        p = await ska.create_subprocess_exec(sys.executable, "-S", "-c",
                                             "import os; print(os.getppid())",
                                             stdout=asyncio.subprocess.PIPE)
        out, _ = await p.communicate()
        assert p.returncode == 0
        return int(out)

    srv = start_serve(sock)
    sks.use_server(sock)
    try:
        assert asyncio.run(parent()) == srv.pid
        gc.collect()
        before = len(open_fds())  # the connection among them, replaced at each restart
        for _ in range(5):
            srv.terminate()
            srv.wait(10)
            srv = start_serve(sock)
            with pytest.raises(ConnectionError):
                asyncio.run(parent())
            assert asyncio.run(parent()) == srv.pid
        # The failed request's traceback (in a cycle with asyncio's task) holds its
        # connection until the cycle collector runs.
        gc.collect()
        assert len(open_fds()) == before
    finally:
        sks.use_server(None)
        srv.terminate()
        srv.wait(10)


def test_an_event_loop_waits_for_a_server_child_without_spinning(through):
    # The loop watches a server's child until the server has reaped it (an epoll set that
    # holds the pidfd turns readable on its hang-up): with the server stopped after the
    # child's exit, the loop sleeps, where a reader on the pidfd woke at the exit and its
    # wait then spun, blocking the loop, until the reap.
    async def main():
        p = await ska.create_subprocess_exec("/bin/sleep", "0.1")
        os.kill(through.pid, signal.SIGSTOP)
        # Resumed by another process: a loop blocked in a spinning wait runs no callback.
        resume = subprocess.Popen(["/bin/sh", "-c", f"sleep 0.6; kill -CONT {through.pid}"])
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        t0, c0 = time.monotonic(), time.process_time()
        try:
            # Bounded: a wait that missed the hang-up fails the test rather than hanging it.
            rc = await asyncio.wait_for(p.wait(), 10)
        finally:
            os.kill(through.pid, signal.SIGCONT)
            resume.wait()
            ticker.cancel()
        return rc, time.monotonic() - t0, time.process_time() - c0, ticks

    rc, waited, cpu, ticks = asyncio.run(main())
    assert rc == 0
    assert waited >= 0.5, waited
    assert cpu < 0.15, f"the loop spun: {cpu:.3f} s of CPU in {waited:.3f} s"
    assert ticks >= 5, f"the loop was blocked: {ticks} ticks in {waited:.3f} s"
