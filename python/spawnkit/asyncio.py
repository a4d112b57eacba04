"""asyncio subprocesses started by spawnkit and waited for through their pidfd.

``spawnkit.asyncio.create_subprocess_exec`` and ``create_subprocess_shell`` take the same
arguments as asyncio's and return the same ``asyncio.subprocess.Process`` (``wait``,
``communicate``, ``send_signal``, ``returncode``, the ``stdin``/``stdout``/``stderr`` streams);
they work on any running event loop. The child is started by :mod:`spawnkit.subprocess`
(``clone3(CLONE_VM|CLONE_VFORK|CLONE_PIDFD)``: the loop's thread is busy for one local spawn,
never for a fork of a large parent), and its exit is learnt with ``loop.add_reader(pidfd)``:
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
import subprocess as _std_subprocess
import time as _time
import weakref as _weakref
from asyncio import base_subprocess as _base_subprocess
from asyncio import events as _events
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
    """asyncio's subprocess transport with the child started by ``spawnkit.subprocess``."""

    def _start(self, args, shell, stdin, stdout, stderr, bufsize, **kwargs):
        self._proc = _sk_subprocess.Popen(
            args, shell=shell, stdin=stdin, stdout=stdout, stderr=stderr,
            universal_newlines=False, bufsize=bufsize, **kwargs)


def _watch(loop, transport):
    """Call ``transport._process_exited`` once the child's pidfd is readable (it exited)."""
    proc = transport._proc
    # The native handle owns the pidfd: holding it keeps the fd open (and so registered only
    # once in the selector) even if something reaps the child through the Popen first.
    child = proc._child
    pidfd = child.pidfd

    def exited():
        loop.remove_reader(pidfd)
        rc = proc.poll()
        if rc is None:  # pragma: no cover - a readable pidfd means the child has exited
            rc = proc.wait()
        if transport._returncode is None:
            transport._process_exited(rc)
        # `child` (and the pidfd) can go now.
        del handle[:]

    handle = [child]
    loop.add_reader(pidfd, exited)


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

# Per loop: [seconds spent spawning in this turn, a reset is scheduled].
_turns = _weakref.WeakKeyDictionary()


def _reset_turn(state):
    state[0] = 0.0
    state[1] = False


async def _take_turn(loop):
    """Wait for the next turn of the loop if this one has had its slice of spawning."""
    state = _turns.get(loop)
    if state is None:
        state = _turns[loop] = [0.0, False]
    while state[0] >= SPAWN_SLICE:
        await _asyncio.sleep(0)
    return state


async def _make_transport(loop, protocol, args, shell, stdin, stdout, stderr, bufsize,
                          extra=None, **kwargs):
    state = await _take_turn(loop)
    waiter = loop.create_future()
    started = _time.perf_counter()
    try:
        transport = _Transport(loop, protocol, args, shell, stdin, stdout, stderr, bufsize,
                               waiter=waiter, extra=extra, **kwargs)
    finally:
        state[0] += _time.perf_counter() - started
        if not state[1]:
            state[1] = True
            loop.call_soon(_reset_turn, state)
    _watch(loop, transport)
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
