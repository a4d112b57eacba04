"""asyncio subprocesses started by spawnkit and waited for through their pidfd.

``spawnkit.asyncio.create_subprocess_exec`` and ``create_subprocess_shell`` take the same
arguments as asyncio's and return the same ``asyncio.subprocess.Process`` (``wait``,
``communicate``, ``send_signal``, ``returncode``, the ``stdin``/``stdout``/``stderr`` streams);
they work on any running event loop. The child is started by :mod:`spawnkit.subprocess`
(``clone3(CLONE_VM|CLONE_PIDFD)`` without ``CLONE_VFORK``: the loop's thread is busy for the
clone only, never for a fork of a large parent nor for the child's exec, which is awaited with
``loop.add_reader`` on a close-on-exec pipe), and its exit is learnt with ``loop.add_reader(pidfd)``:
no child watcher, no watcher thread, no SIGCHLD handler, nothing shared with other code that
waits for children.

:class:`EventLoop` (and :class:`EventLoopPolicy`, :func:`new_event_loop`, :func:`run`) is a
selector event loop whose ``subprocess_exec``/``subprocess_shell`` do the same, so code that
calls ``asyncio.create_subprocess_exec`` or ``loop.subprocess_exec`` unchanged gets spawnkit
children too::

    import spawnkit.asyncio
    spawnkit.asyncio.run(main())          # or asyncio.run(main(), loop_factory=...) on 3.12+
"""

import asyncio as _asyncio
import collections as _collections
import select as _select
import subprocess as _std_subprocess
import threading as _threading
import time as _time
import warnings as _warnings
import weakref as _weakref
from asyncio import base_subprocess as _base_subprocess
from asyncio import events as _events
from asyncio import log as _log
from asyncio import streams as _streams
from asyncio.subprocess import Process, SubprocessStreamProtocol

from . import subprocess as _sk_subprocess

__all__ = [
    "create_subprocess_exec",
    "create_subprocess_shell",
    "EventLoop",
    "EventLoopPolicy",
    "new_event_loop",
    "run",
    "Process",
]

PIPE = _std_subprocess.PIPE
STDOUT = _std_subprocess.STDOUT
DEVNULL = _std_subprocess.DEVNULL


class _Transport(_base_subprocess.BaseSubprocessTransport):
    """asyncio's subprocess transport for a child ``spawnkit.subprocess`` started (a
    ``Popen`` given, not made here as ``BaseSubprocessTransport.__init__`` does)."""

    def __init__(self, loop, protocol, proc, stdin, stdout, stderr, extra=None):
        # BaseSubprocessTransport's state, as its __init__ sets it once the child started.
        _asyncio.SubprocessTransport.__init__(self, extra)
        self._closed = False
        self._protocol = protocol
        self._loop = loop
        self._proc = proc
        self._pid = proc.pid
        self._returncode = None
        self._exit_waiters = []
        self._pending_calls = _collections.deque()
        self._pipes = {}
        self._finished = False
        if stdin == PIPE:
            self._pipes[0] = None
        if stdout == PIPE:
            self._pipes[1] = None
        if stderr == PIPE:
            self._pipes[2] = None
        self._extra["subprocess"] = proc
        if loop.get_debug():
            _log.logger.debug("process %r created: pid %s", proc.args[0], self._pid)

    def __del__(self, _warn=_warnings.warn):
        if not self._closed and self._loop.is_closed():
            # The loop closed with the child still running: its reader on the pidfd, which
            # held this transport, went with the loop's selector. BaseSubprocessTransport's
            # __del__ would have the closed loop schedule the pipes' connection_lost
            # ("Event loop is closed"). As CPython 3.11's loop (whose watcher thread holds
            # the transport until the child exits) says nothing and leaves the child
            # running: only the pipes go (their transports' own __del__ closes their fds if
            # the closed loop cannot).
            self._closed = True
            for proto in self._pipes.values():
                if proto is not None:
                    try:
                        proto.pipe.close()
                    except RuntimeError:
                        pass
            return
        super().__del__(_warn)


def _watch(loop, transport):
    """Call ``transport._process_exited`` once the child's pidfd is readable (it exited), or,
    for a child a spawn server started, once it hangs up (the server reaped it)."""
    proc = transport._proc
    # The native handle owns the pidfd: holding it (the default argument) keeps the fd open,
    # and so registered only once in the selector, even if something reaps the child through
    # the Popen first; it goes with the callback once the reader is removed.
    child = proc._child
    pidfd = child.pidfd
    hangup = None
    if child.ends_at_hangup:
        # Its status exists from the server's reap on, while the pidfd is readable from the
        # exit: a reader on the pidfd would wake too early (and its wait would then block the
        # loop until the reap). An epoll set holding the pidfd with no event asked is
        # readable once the pidfd hangs up (POLLHUP is always reported): the loop watches it.
        hangup = _select.epoll()
        hangup.register(pidfd, 0)
        watched = hangup.fileno()
    else:
        watched = pidfd

    def exited(child=child):
        loop.remove_reader(watched)
        if hangup is not None:
            hangup.close()
        rc = proc.poll()
        if rc is None:  # pragma: no cover - a readable pidfd means the child has exited
            rc = proc.wait()
        if transport._returncode is None:
            transport._process_exited(rc)

    loop.add_reader(watched, exited)


def _check(universal_newlines, bufsize, text, encoding, errors):
    # The same refusals as BaseEventLoop.subprocess_exec/subprocess_shell.
    if universal_newlines:
        raise ValueError("universal_newlines must be False")
    if bufsize != 0:
        raise ValueError("bufsize must be 0")
    if text:
        raise ValueError("text must be False")
    if encoding is not None:
        raise ValueError("encoding must be None")
    if errors is not None:
        raise ValueError("errors must be None")


#: At most this long (seconds) of spawning per turn of the event loop: many tasks ready to
#: spawn at once take turns with the loop's other work instead of holding it for all of them.
SPAWN_SLICE = 0.002


class _Turn:
    """Per loop: the time spent spawning in this turn of the loop, the last spawn's cost, and
    the tasks waiting for a turn with time left. A new turn wakes as many of them, in order,
    as the last spawn's cost says fit in a slice; one that finds the slice used up when it
    runs waits again, ahead of the others."""

    # No reference to the loop: it is the key of this value in the weak `_turns`.
    __slots__ = ("spent", "last", "reset", "waiting", "again")

    def __init__(self):
        self.spent = 0.0
        self.last = 0.0
        self.reset = False
        self.waiting = _collections.deque()
        self.again = []  # woken too late in a full turn: first in the next

    def charge(self, loop, seconds):
        """Count `seconds` of spawning on `loop` against this turn."""
        self.spent += seconds
        self.last = seconds
        if not self.reset:
            self.reset = True
            loop.call_soon(self.next_turn)

    def next_turn(self):
        self.spent = 0.0
        self.reset = False
        if self.again:
            self.waiting.extendleft(reversed(self.again))
            self.again = []
        self.wake(max(1, int(SPAWN_SLICE / max(self.last, 1e-5))))

    def wake(self, n=1):
        """Let the first `n` waiting tasks go."""
        while self.waiting and n > 0:
            f = self.waiting.popleft()
            if not f.done():
                f.set_result(None)
                n -= 1


# Per loop.
_turns = _weakref.WeakKeyDictionary()


async def _take_turn(loop):
    """Wait, in order, for a turn of the loop with time left for spawning."""
    turn = _turns.get(loop)
    if turn is None:
        turn = _turns[loop] = _Turn()
    queue = turn.waiting
    while turn.spent >= SPAWN_SLICE or queue:
        f = loop.create_future()
        queue.append(f)
        try:
            await f
        except BaseException:
            turn.wake()  # pass the turn on
            raise
        if turn.spent < SPAWN_SLICE:
            break
        queue = turn.again
        if not turn.reset:  # pragma: no cover - a full turn has its next one scheduled
            turn.reset = True
            loop.call_soon(turn.next_turn)
    return turn


def _popen(args, shell, stdin, stdout, stderr, bufsize, kwargs, via=None, submit_only=False):
    """The child's ``Popen`` (`_plain`'s when nothing but the streams is asked for)."""
    if shell:
        args = ["/bin/sh", "-c", args]
    else:
        args = list(args)
    if (not kwargs and _sk_subprocess._is_plain_stream(stdin)
            and _sk_subprocess._is_plain_stream(stdout)
            and _sk_subprocess._is_plain_stream(stderr)):
        return _sk_subprocess._plain(args, stdin, stdout, stderr, via, submit_only)
    proc = _sk_subprocess.Popen.__new__(_sk_subprocess.Popen)
    proc._sk_via = via
    proc._sk_submit_only = submit_only
    proc.__init__(args, stdin=stdin, stdout=stdout, stderr=stderr,
                  universal_newlines=False, bufsize=bufsize, **kwargs)
    return proc


def _server():
    """The process-wide spawn server (``spawnkit.subprocess.use_server``, ``$SPAWNKIT_SERVER``)
    or None, and whether its answers can be awaited (its children's pidfds tell their status:
    else a spawn through it waits for the answer, as ``spawnkit.subprocess`` does)."""
    if _sk_subprocess._server_state is None:
        return None, False
    server = _sk_subprocess._process_server()
    return server, not server.exit_frames


class _Answers:
    """One spawn server's requests awaited by event loops: a future per request, resolved
    when the server's socket is readable and ``Server.answered`` lists it (each loop that
    waits watches the socket; answers read by one loop for another's request are handed
    over with ``call_soon_threadsafe``). It lives in `_answers` only while a request through
    its server is awaited: a connection given up (its server restarted) is not kept open."""

    def __init__(self, server):
        self.server = server
        self.fd = server.fileno()
        self.lock = _threading.Lock()
        self.futures = {}  # request id -> future
        self.loops = {}  # loop -> requests it awaits

    def wait(self, loop, request):
        """Called with `_answers_lock` held."""
        f = loop.create_future()
        with self.lock:
            self.futures[request] = f
            n = self.loops.get(loop, 0)
            self.loops[loop] = n + 1
        if n == 0:
            loop.add_reader(self.fd, self.ready, loop)
        return f

    def done(self, loop, request):
        """`request` is no longer awaited on `loop` (answered, or its task was cancelled)."""
        with _answers_lock:
            with self.lock:
                self.futures.pop(request, None)
                n = self.loops[loop] - 1
                if n:
                    self.loops[loop] = n
                else:
                    del self.loops[loop]
                idle = not self.loops
            if idle and _answers.get(id(self.server)) is self:
                del _answers[id(self.server)]
        if not n and not loop.is_closed():
            loop.remove_reader(self.fd)

    def ready(self, loop):
        try:
            ids = self.server.answered()
        except Exception:  # noqa: BLE001 - the connection broke: each receive says so
            ids = None
        with self.lock:
            futures = list(self.futures.items()) if ids is None else [
                (i, self.futures[i]) for i in ids if i in self.futures]
        for _, f in futures:
            owner = f.get_loop()
            if owner is loop:
                if not f.done():
                    f.set_result(None)
            else:
                owner.call_soon_threadsafe(_set_result, f)


def _set_result(f):
    if not f.done():
        f.set_result(None)


# id(server) -> its _Answers, while a request through it is awaited (the entry holds the
# server, so the id is not reused meanwhile).
_answers = {}
_answers_lock = _threading.Lock()


def _await_answer(loop, server, request):
    """The future resolved when the answer to `request` has arrived at `server`, and the
    `_Answers` to tell when it is no longer awaited (`done`)."""
    with _answers_lock:
        answers = _answers.get(id(server))
        if answers is None:
            answers = _answers[id(server)] = _Answers(server)
        return answers, answers.wait(loop, request)


def _end_pending(proc):
    """A start or request whose task was cancelled: take the child and kill and reap it,
    and close this side of its pipes (no transport will own them)."""
    try:
        try:
            proc._sk_finish()
        except Exception:  # noqa: BLE001,S110 - the spawn failed: nothing to end
            return
        proc.kill()
        proc.wait()
    finally:
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass


async def _spawn_via(loop, server, args, shell, stdin, stdout, stderr, bufsize, kwargs):
    """Send the request to `server` and await its answer: the loop's thread never clones."""
    proc = _popen(args, shell, stdin, stdout, stderr, bufsize, kwargs, server, True)
    request = proc._sk_pending[2]
    answers, f = _await_answer(loop, server, request)
    try:
        await f
    except BaseException:
        # The request is out: take its child (the server answers at once) and end it.
        answers.done(loop, request)
        _end_pending(proc)
        raise
    answers.done(loop, request)
    proc._sk_finish()
    return proc


async def _spawn_here(loop, args, shell, stdin, stdout, stderr, bufsize, kwargs, via):
    """Start the child on the loop's thread (at most SPAWN_SLICE of it per turn of the loop)
    and await its exec through ``loop.add_reader``: the clone is the loop's, the exec is the
    child's own (``Command.start``: no CLONE_VFORK), so children exec while the loop runs.
    Through a server whose answers cannot be awaited (`via`), the spawn is done whole."""
    turn = await _take_turn(loop)
    started = _time.perf_counter()
    try:
        proc = _popen(args, shell, stdin, stdout, stderr, bufsize, kwargs, via, via is None)
    finally:
        turn.charge(loop, _time.perf_counter() - started)
    if via is not None:
        return proc
    fd = proc._sk_pending[2].fileno()
    if fd is not None:
        f = loop.create_future()
        loop.add_reader(fd, _set_result, f)
        try:
            await f
        except BaseException:
            # The child runs: take it (its exec comes at once) and end it.
            loop.remove_reader(fd)
            _end_pending(proc)
            raise
        loop.remove_reader(fd)
    proc._sk_finish()
    return proc


async def _make_transport(loop, protocol, args, shell, stdin, stdout, stderr, bufsize,
                          extra=None, **kwargs):
    server, awaitable = _server()
    if awaitable:
        proc = await _spawn_via(loop, server, args, shell, stdin, stdout, stderr, bufsize,
                                kwargs)
    else:
        proc = await _spawn_here(loop, args, shell, stdin, stdout, stderr, bufsize, kwargs,
                                 server)
    transport = _Transport(loop, protocol, proc, stdin, stdout, stderr, extra)
    _watch(loop, transport)
    if not transport._pipes:
        # Nothing to connect: the protocol is told now (BaseSubprocessTransport does it from
        # a task of its own, before the caller resumes).
        transport._pending_calls = None
        try:
            protocol.connection_made(transport)
        except BaseException:
            transport.close()
            raise
        return transport
    waiter = loop.create_future()
    loop.create_task(transport._connect_pipes(waiter))
    try:
        await waiter
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:
        transport.close()
        await transport._wait()
        raise
    return transport


async def subprocess_exec(loop, protocol_factory, program, *args, stdin=PIPE, stdout=PIPE,
                          stderr=PIPE, universal_newlines=False, shell=False, bufsize=0,
                          encoding=None, errors=None, text=None, **kwargs):
    """``loop.subprocess_exec`` for any selector loop, with a spawnkit child."""
    _check(universal_newlines, bufsize, text, encoding, errors)
    if shell:
        raise ValueError("shell must be False")
    protocol = protocol_factory()
    transport = await _make_transport(loop, protocol, (program,) + args, False, stdin, stdout,
                                      stderr, bufsize, **kwargs)
    return transport, protocol


async def subprocess_shell(loop, protocol_factory, cmd, *, stdin=PIPE, stdout=PIPE,
                           stderr=PIPE, universal_newlines=False, shell=True, bufsize=0,
                           encoding=None, errors=None, text=None, **kwargs):
    """``loop.subprocess_shell`` for any selector loop, with a spawnkit child."""
    if not isinstance(cmd, (bytes, str)):
        raise ValueError("cmd must be a string")
    _check(universal_newlines, bufsize, text, encoding, errors)
    if not shell:
        raise ValueError("shell must be True")
    protocol = protocol_factory()
    transport = await _make_transport(loop, protocol, cmd, True, stdin, stdout, stderr,
                                      bufsize, **kwargs)
    return transport, protocol


async def create_subprocess_exec(program, *args, stdin=None, stdout=None, stderr=None,
                                 limit=_streams._DEFAULT_LIMIT, **kwds):
    """Start ``program`` with ``args`` (as :func:`asyncio.create_subprocess_exec`)."""
    loop = _events.get_running_loop()
    transport, protocol = await subprocess_exec(
        loop, lambda: SubprocessStreamProtocol(limit=limit, loop=loop), program, *args,
        stdin=stdin, stdout=stdout, stderr=stderr, **kwds)
    return Process(transport, protocol, loop)


async def create_subprocess_shell(cmd, stdin=None, stdout=None, stderr=None,
                                  limit=_streams._DEFAULT_LIMIT, **kwds):
    """Run ``cmd`` with /bin/sh (as :func:`asyncio.create_subprocess_shell`)."""
    loop = _events.get_running_loop()
    transport, protocol = await subprocess_shell(
        loop, lambda: SubprocessStreamProtocol(limit=limit, loop=loop), cmd,
        stdin=stdin, stdout=stdout, stderr=stderr, **kwds)
    return Process(transport, protocol, loop)


class EventLoop(_asyncio.SelectorEventLoop):
    """A selector event loop whose subprocesses are spawnkit's, waited for by pidfd."""

    async def _make_subprocess_transport(self, protocol, args, shell, stdin, stdout, stderr,
                                         bufsize, extra=None, **kwargs):
        return await _make_transport(self, protocol, args, shell, stdin, stdout, stderr,
                                     bufsize, extra=extra, **kwargs)


class EventLoopPolicy(_asyncio.DefaultEventLoopPolicy):
    """The default policy, making :class:`EventLoop` loops."""

    _loop_factory = EventLoop


def new_event_loop():
    """A new :class:`EventLoop`."""
    return EventLoop()


def run(main, *, debug=None):
    """:func:`asyncio.run` on an :class:`EventLoop`."""
    with _asyncio.Runner(debug=debug, loop_factory=EventLoop) as runner:
        return runner.run(main)
