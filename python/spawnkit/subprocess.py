"""A drop-in for the standard :mod:`subprocess` module, built on the spawnkit engine.

Replace ``import subprocess`` with ``from spawnkit import subprocess``: the same functions,
classes, arguments, return values and exceptions, with the child started by spawnkit
(``clone3(CLONE_VM|CLONE_VFORK|CLONE_PIDFD)``, raw system calls in the child) and waited for,
polled and signalled through its pidfd.

How it is made, so that it agrees with the standard module by construction:

* the exceptions, ``CompletedProcess``, ``list2cmdline`` and the constants *are* the standard
  module's objects (``except subprocess.CalledProcessError`` catches ours and theirs);
* :class:`Popen` subclasses the standard ``subprocess.Popen``: argument checking, pipes and
  text wrappers (``bufsize``, ``encoding``, ``errors``, universal newlines), ``communicate``
  (partial output on timeout, retry), the context manager and the ``ResourceWarning`` for an
  unwaited child are CPython's own code; spawnkit replaces how the child is started
  (``_execute_child``), waited for (``_wait``, ``_internal_poll``) and signalled
  (``send_signal``);
* ``run``, ``call``, ``check_call``, ``check_output``, ``getoutput`` and ``getstatusoutput``
  are the standard module's functions re-bound to this module, so they create our ``Popen``.
"""

import builtins as _builtins
import errno as _errno
import io as _io
import os as _os
import subprocess as _std
import sys as _sys
import threading as _threading
import types as _types
from time import monotonic as _time

from . import _native

__all__ = list(_std.__all__) + ["use_server"]

# The standard module's own objects: one exception hierarchy for both modules.
from subprocess import (  # noqa: E402
    DEVNULL,
    PIPE,
    STDOUT,
    CalledProcessError,
    CompletedProcess,
    SubprocessError,
    TimeoutExpired,
    list2cmdline,
)

_mswindows = False
_Command = _native.Command


class Popen(_std.Popen):
    """``subprocess.Popen``, with the child started by spawnkit and held by a pidfd.

    Every argument of the standard ``Popen`` is accepted with the same meaning. ``preexec_fn``
    makes spawnkit use its fork-exec strategy (Python code cannot run in a vfork child); the
    hook runs in the forked child as in CPython.
    """

    # The engine's handle (a pidfd); None before the spawn and once the child is reaped.
    _child = None
    # The spawnkit.Command that Command.spawn() starts; None for plain subprocess use (the
    # command is then built from Popen's arguments).
    _sk_command = None
    # The spawn server to start the child through (Command.spawn(via=...)); None: the
    # process-wide one (use_server, $SPAWNKIT_SERVER), if any.
    _sk_via = None
    # spawnkit.spawn_many and spawnkit.asyncio: submit the request (through a server) or start
    # the child (locally) in _execute_child, take the answer or the exec's outcome in
    # _sk_finish.
    _sk_submit_only = False
    _sk_pending = None

    @property
    def pidfd(self):
        """The child's pidfd (readable once it exits), or None once it has been reaped.

        A child started through a spawn server has its status from the server's reap on,
        when the pidfd also hangs up (``POLLHUP``): ``poll()`` may still answer None for a
        moment after the pidfd turns readable.

        Owned by the Popen object: do not close it."""
        child = self._child
        return None if child is None else child.pidfd

    def _execute_child(self, args, executable, preexec_fn, close_fds,
                       pass_fds, cwd, env,
                       startupinfo, creationflags, shell,
                       p2cread, p2cwrite,
                       c2pread, c2pwrite,
                       errread, errwrite,
                       restore_signals,
                       gid, gids, uid, umask,
                       start_new_session, process_group=-1):
        """Start the child with the spawnkit engine (CPython's argument rules)."""
        if isinstance(args, (str, bytes)):
            args = [args]
        elif isinstance(args, _os.PathLike):
            if shell:
                raise TypeError('path-like args is not allowed when '
                                'shell is true')
            args = [args]
        else:
            args = list(args)

        if shell:
            args = ["/bin/sh", "-c"] + args
            if executable:
                args[0] = executable

        if executable is None:
            executable = args[0]

        _sys.audit("subprocess.Popen", executable, args, cwd, env)
        if preexec_fn is not None and _sys.version_info >= (3, 12) and _sys.is_finalizing():
            # CPython 3.12+ refuses to fork and run Python while the interpreter shuts down.
            raise getattr(_builtins, "PythonFinalizationError", RuntimeError)(
                "preexec_fn not supported at interpreter shutdown")
        if p2cread < -1 or c2pwrite < -1 or errwrite < -1:
            # A negative fd (not PIPE's -1) fails dup2 in CPython's child: EBADF, reported
            # with the cwd like every failure before exec.
            raise OSError(_errno.EBADF, _os.strerror(_errno.EBADF), cwd)
        try:
            cmd = self._sk_command
            if cmd is None:
                # The engine's command for what CPython hands _posixsubprocess.fork_exec.
                cmd = _Command(executable, subprocess_rules=True)
                cmd.arg0(args[0]).args(args[1:])
                if env is not None:
                    cmd.env_clear().envs(env)
                if cwd is not None:
                    cmd.current_dir(cwd)
                if not close_fds:
                    cmd.close_other_fds(False)
                streams = (p2cread, c2pwrite, errwrite)
                for fd in pass_fds:
                    # CPython maps int() over pass_fds and refuses negative values.
                    fd = int(fd)
                    if not 0 <= fd <= 0x7FFFFFFF:
                        raise ValueError("bad value(s) in fds_to_keep")
                    # A redirected standard stream stays redirected.
                    if fd > 2 or streams[fd] == -1:
                        cmd.keep_fd(fd)
                if not restore_signals:
                    cmd.restore_signals(False)
                if start_new_session:
                    cmd.setsid()
                if process_group is not None and process_group != -1:
                    cmd.process_group(process_group)
                if uid is not None and gids is None and _os.geteuid() == 0:
                    # CPython leaves the supplementary groups alone when only `user` is
                    # given; the engine drops them with the uid unless told which to keep.
                    gids = _os.getgroups()
                if gids is not None:
                    cmd.groups(gids)
                if gid is not None:
                    cmd.gid(gid)
                if uid is not None:
                    cmd.uid(uid)
                if umask != -1:
                    cmd.umask(umask)
                if preexec_fn is not None:
                    cmd.pre_exec(preexec_fn)
            via = self._sk_via
            if via is None and _server_state is not None:
                via = _process_server()
            streams = (None if p2cread == -1 else p2cread,
                       None if c2pwrite == -1 else c2pwrite,
                       None if errwrite == -1 else errwrite)
            try:
                if self._sk_submit_only and via is not None:
                    # spawnkit.spawn_many(via=...): the request goes now, the answer later
                    # (_sk_finish), so that every request is in flight at once.
                    self._sk_pending = (cmd, via, cmd.submit_child(*streams, via=via))
                elif self._sk_submit_only:
                    # Locally: cloned now, its exec awaited later (_sk_finish).
                    self._sk_pending = (cmd, None, cmd.start_child(*streams))
                else:
                    self._child = child = cmd.spawn_child(*streams, via=via)
                    self.pid = child.pid
                    self._child_created = True
            except ConnectionError:
                _connection_lost(via)
                raise
        finally:
            # The child's ends of the pipes and /dev/null, as CPython closes them (nothing to
            # close when no stream was redirected: skip the ExitStack).
            if p2cread != -1 or c2pwrite != -1 or errwrite != -1 or hasattr(self, "_devnull"):
                self._close_pipe_fds(p2cread, p2cwrite,
                                     c2pread, c2pwrite,
                                     errread, errwrite)
            else:
                self._closed_child_pipe_fds = True

    def _sk_finish(self):
        """Take the server's answer to the request _execute_child sent (spawn_many), or the
        outcome of the local start it made (the exec awaited)."""
        cmd, via, request = self._sk_pending
        self._sk_pending = None
        try:
            if via is None:
                self._child = child = request.finish()  # a local start (start_child)
            else:
                self._child = child = cmd.receive_child(request, via=via)
        except BaseException as e:
            if isinstance(e, ConnectionError):
                _connection_lost(via)
            for f in (self.stdin, self.stdout, self.stderr):
                if f is not None:
                    f.close()
            raise
        self.pid = child.pid
        self._child_created = True

    def _get_handles(self, stdin, stdout, stderr):
        # Nothing redirected: CPython's answer, without its error-handling context manager.
        if stdin is None and stdout is None and stderr is None:
            return (-1, -1, -1, -1, -1, -1)
        return super()._get_handles(stdin, stdout, stderr)

    def _internal_poll(self, _deadstate=None, _ECHILD=_errno.ECHILD, **_ignored):
        """Reap the child if it has exited (waitid on the pidfd, WNOHANG).

        Called by ``__del__`` and the standard module's ``_cleanup`` (with ``_deadstate``):
        it may use nothing outside its local scope. There a child spawned with
        ``Command.kill_on_drop()`` is killed and reaped."""
        if (_deadstate is not None and self.returncode is None and self._child is not None
                and self._child.kill_on_drop):
            try:
                self._child.send_signal(9)
            except OSError:
                pass
        if self.returncode is None:
            if not self._waitpid_lock.acquire(False):
                # Something else is busy waiting. We know nothing yet.
                return None
            try:
                if self.returncode is not None:
                    return self.returncode  # Another thread waited.
                child = self._child
                if child is None:
                    # Reaped already but returncode was reset by hand: what waitpid's
                    # ECHILD gives in CPython.
                    raise ChildProcessError(_ECHILD, "No child processes")
                if _deadstate is not None and child.kill_on_drop:
                    rc = child.wait()  # SIGKILLed above: ends at once
                else:
                    rc = child.try_wait()
                if rc is not None:
                    self.returncode = rc
                    self._child = None
            except OSError as e:
                if _deadstate is not None:
                    self.returncode = _deadstate
                elif e.errno == _ECHILD:
                    # SIGCHLD ignored, or someone else reaped it: no status (as CPython).
                    self.returncode = 0
            finally:
                self._waitpid_lock.release()
        return self.returncode

    def _wait(self, timeout):
        """Wait on the pidfd (GIL released) instead of CPython's waitpid/sleep loop."""
        if self.returncode is not None:
            return self.returncode
        lock = self._waitpid_lock
        if timeout is None:
            with lock:
                if self.returncode is None:
                    self._reaped(self._child, None)
            return self.returncode
        if timeout != timeout:
            # NaN: CPython's loop never finds the time up (`remaining <= 0` is false), so it
            # waits for the exit.
            with lock:
                if self.returncode is None:
                    self._reaped(self._child, None)
            return self.returncode
        endtime = _time() + timeout
        # A lock cannot wait longer than TIMEOUT_MAX (~292 years; math.inf or 1e10 would
        # overflow): the child's own wait below takes any length.
        acquired = (lock.acquire(True, min(timeout, _threading.TIMEOUT_MAX)) if timeout > 0
                    else lock.acquire(False))
        if acquired:
            try:
                if self.returncode is None:
                    self._reaped(self._child, max(endtime - _time(), 0.0))
            finally:
                lock.release()
        if self.returncode is None:
            raise TimeoutExpired(self.args, timeout)
        return self.returncode

    def _reaped(self, child, timeout):
        """Wait for `child` (at most `timeout` s); set returncode once it is reaped.
        Callers hold _waitpid_lock."""
        try:
            if child is None:
                # Reaped already but returncode was reset by hand: ECHILD, as CPython.
                raise ChildProcessError
            rc = child.wait() if timeout is None else child.wait_timeout(timeout)
        except ChildProcessError:
            rc = 0  # Reaped elsewhere (SIGCHLD ignored): no status, as CPython.
        if rc is not None:
            self.returncode = rc
            self._child = None  # closes the pidfd

    def send_signal(self, sig):
        """Send a signal to the process, through its pidfd (never a recycled pid)."""
        # Like CPython: poll first, and do nothing once the child is known to be gone.
        self.poll()
        if self.returncode is not None:
            return
        child = self._child  # a reference keeps the pidfd open while we use it
        if child is not None:
            child.send_signal(sig)

def _is_plain_stream(s):
    """Whether `_plain` takes `s` as a standard stream: None, PIPE, DEVNULL or an fd."""
    return s is None or (type(s) is int and (s >= 0 or s == PIPE or s == DEVNULL))


def _plain(args, stdin, stdout, stderr, via=None, submit_only=False):
    """``Popen(args, stdin=stdin, stdout=stdout, stderr=stderr, bufsize=0)`` for the case of
    asyncio's faces -- an argv (a list) and nothing else, each stream ``None``, ``PIPE``,
    ``DEVNULL`` or an fd (see `_is_plain_stream`) -- without the standard ``__init__``'s
    generality: the same attributes, streams and child, ~40 us less per spawn. ``DEVNULL``
    is the engine's (no /dev/null opened here). With `submit_only` the request goes to the
    server `via` and its answer is taken later by ``_sk_finish`` (``pid`` is None until then).
    """
    _std._cleanup()
    self = Popen.__new__(Popen)
    # What the standard __init__ sets before it spawns, for these arguments.
    self._waitpid_lock = _threading.Lock()
    self._input = None
    self._communication_started = False
    self.args = args
    self.stdin = self.stdout = self.stderr = None
    self.pid = None
    self.returncode = None
    self.encoding = self.errors = None
    self.pipesize = -1
    self.text_mode = None
    self._sigint_wait_secs = 0.25
    self._closed_child_pipe_fds = False
    theirs = []
    codes = [None, None, None]
    try:
        for i, s in enumerate((stdin, stdout, stderr)):
            if s == PIPE:
                r, w = _os.pipe()
                if i == 0:
                    theirs.append(r)
                    codes[0] = r
                    self.stdin = _io.open(w, "wb", 0)
                else:
                    theirs.append(w)
                    codes[i] = w
                    f = _io.open(r, "rb", 0)
                    if i == 1:
                        self.stdout = f
                    else:
                        self.stderr = f
            elif s is not None:
                codes[i] = s  # an fd, or DEVNULL: the engine's /dev/null
        executable = args[0]
        _sys.audit("subprocess.Popen", executable, args, None, None)
        cmd = _Command(executable, subprocess_rules=True)
        cmd.arg0(executable).args(args[1:])
        if submit_only and via is not None:
            self._sk_pending = (cmd, via, cmd.submit_child(*codes, via=via))
        elif submit_only:
            self._sk_pending = (cmd, None, cmd.start_child(*codes))
        else:
            self._child = child = cmd.spawn_child(*codes, via=via)
            self.pid = child.pid
            self._child_created = True
    except BaseException as e:
        if isinstance(e, ConnectionError):
            _connection_lost(via)
        for f in (self.stdin, self.stdout, self.stderr):
            if f is not None:
                f.close()
        raise
    finally:
        # The child's ends of the pipes, as CPython closes them.
        for fd in theirs:
            _os.close(fd)
        self._closed_child_pipe_fds = True
    return self


# The process-wide spawn server: None (local spawns), or [pid, server or None, path or None,
# key file or None]; set by use_server() or, at import, by $SPAWNKIT_SERVER.
_server_state = None


def use_server(server=None, *, key_file=None):
    """Start every child of this module through a spawn server from now on: a
    :class:`spawnkit.Server` (``spawnkit.Server()`` forks a private one), or the socket path of
    ``spawnkit serve`` (connected on first use, and again in a forked child; the key from
    ``key_file``, else ``$SPAWNKIT_SERVER_KEY``, else ``PATH.key``). ``None`` goes back to
    local spawns. The environment variable ``SPAWNKIT_SERVER`` (a socket path) does the same
    for a whole program without a code change. ``preexec_fn`` is refused through a server
    (``ValueError``): it is Python code of this process."""
    global _server_state
    if server is None:
        _server_state = None
    elif isinstance(server, _native.Server):
        _server_state = [_os.getpid(), server, None, None]
    else:
        _server_state = [None, None, _os.fspath(server), key_file]


def _process_server():
    """The process-wide server's connection, made (again) in this process if need be."""
    state = _server_state
    pid, server, path, key_file = state
    if pid != _os.getpid() or server is None:
        if path is None:
            raise RuntimeError("spawnkit.subprocess.use_server(): the Server belongs to the "
                               "process that started it (this is a fork of it)")
        server = _native.Server.connect(path, key_file=key_file)
        state[0], state[1] = _os.getpid(), server
    return server


def _connection_lost(server):
    """A spawn through `server` failed on its connection (the server closed it, EPIPE,
    ECONNRESET, a broken frame): if it is the process-wide server's cached connection to a
    socket path, forget it, so that the next spawn connects again (a restarted server at the
    same path serves it). The failed request itself is never sent again: the server may have
    started its child."""
    state = _server_state
    if server is not None and state is not None and state[1] is server and state[2] is not None:
        state[1] = None


if _os.environ.get("SPAWNKIT_SERVER"):
    use_server(_os.environ["SPAWNKIT_SERVER"])


def _rebind(name):
    """The standard module's function `name`, with this module's globals (so it creates our
    Popen and raises the same exceptions): exactly the same code as in the standard library."""
    std = getattr(_std, name)
    f = _types.FunctionType(std.__code__, globals(), name, std.__defaults__, std.__closure__)
    f.__kwdefaults__ = std.__kwdefaults__
    f.__doc__ = std.__doc__
    f.__qualname__ = std.__qualname__
    f.__module__ = __name__
    f.__wrapped__ = std
    return f


call = _rebind("call")
check_call = _rebind("check_call")
check_output = _rebind("check_output")
run = _rebind("run")
getstatusoutput = _rebind("getstatusoutput")
getoutput = _rebind("getoutput")

_REBOUND = (call, check_call, check_output, run, getstatusoutput, getoutput)


def _check_rebound():
    """Every global name the re-bound functions use must exist here or in builtins."""
    import builtins

    missing = sorted(
        {n for f in _REBOUND for n in f.__code__.co_names
         if n not in globals() and not hasattr(builtins, n)
         and n in _std.__dict__ and not isinstance(_std.__dict__[n], _types.ModuleType)}
    )
    for name in missing:
        globals()[name] = getattr(_std, name)


_check_rebound()


def __getattr__(name):
    # Anything else the standard module has (private helpers such as
    # _args_from_interpreter_flags, _USE_VFORK...) is the standard module's.
    try:
        return getattr(_std, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None

