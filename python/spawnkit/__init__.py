"""spawnkit: launch Linux processes fast and safely.

Two faces:

* :mod:`spawnkit.subprocess` -- a drop-in for the standard ``subprocess`` module
  (``from spawnkit import subprocess``);
* :class:`Command` -- the native API, for what ``subprocess`` cannot say: resource limits,
  nice, CPU affinity, parent-death signal, no_new_privs, arbitrary fd maps, the signal mask,
  the spawn strategy, and isolation (namespaces, uid/gid maps, private /tmp and network,
  read-only binds, hostname, chroot, a lock held for the child's life, cgroup placement); the
  child it starts is a :class:`spawnkit.subprocess.Popen` with a ``pidfd``.

>>> from spawnkit import Command, PIPE
>>> out = Command("sh").args(["-c", "ulimit -n"]).rlimit("nofile", 64).output()
>>> out.stdout
b'64\\n'
>>> Command("hostname").hostname("box").output().stdout
b'box\\n'
"""

import importlib as _importlib

from . import _native

# Imported on first use (module __getattr__ below), not with the package: the zygote of the
# "spawnkit" multiprocessing start method and its workers import the package for _native and
# need neither; every page they do not import is a page each worker's fork does not copy.
_LAZY = {
    "subprocess": ("subprocess", None),
    "observe": ("observe", None),
    **{name: ("observe", name) for name in (
        "MemoryInfo", "ProcessInfo", "SharedRegion", "SharedReport", "memory", "ps",
        "ps_backend", "shared_regions", "shared_report")},
    **{name: ("subprocess", name) for name in (
        "DEVNULL", "PIPE", "STDOUT", "CompletedProcess", "Popen", "TimeoutExpired")},
}


def __getattr__(name):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = _importlib.import_module(f".{module}", __name__)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "Command",
    "Popen",
    "PIPE",
    "DEVNULL",
    "STDOUT",
    "INHERIT",
    "RLIM_INFINITY",
    "STRATEGIES",
    "NAMESPACES",
    "PATH_SEARCHES",
    "Server",
    "connect",
    "reap_orphans",
    "spawn_many",
    "uses_clone3",
    "subprocess",
    "observe",
    "ps",
    "ps_backend",
    "memory",
    "shared_regions",
    "shared_report",
    "ProcessInfo",
    "MemoryInfo",
    "SharedRegion",
    "SharedReport",
]

#: Leave a standard stream as the parent's (the default).
INHERIT = None
#: No limit, for :meth:`Command.rlimit` (``resource.RLIM_INFINITY`` works too).
RLIM_INFINITY = -1
#: The spawn strategies, by name: ``clone-vfork`` (default), ``posix-spawn``, ``fork-exec``.
STRATEGIES = tuple(_native.STRATEGIES)
#: The namespaces :meth:`Command.unshare` takes, by name (as unshare(1)).
NAMESPACES = tuple(_native.NAMESPACES)
#: How :meth:`Command.path_search` walks PATH: ``execvp`` (default) or ``try-all`` (CPython's).
PATH_SEARCHES = ("execvp", "try-all")
reap_orphans = _native.reap_orphans
#: A spawn server to start children through (``via=``, ``subprocess.use_server``):
#: ``Server()`` forks a private one now, ``Server.connect(path)`` joins ``spawnkit serve``.
Server = _native.Server


def connect(path=None, *, key_file=None):
    """Connect to ``spawnkit serve`` at ``path`` (default: its default socket), with the key
    from ``key_file``, else ``$SPAWNKIT_SERVER_KEY``, else ``PATH.key``."""
    return Server.connect(path, key_file=key_file)

uses_clone3 = _native.uses_clone3


_STREAM_KWARGS = frozenset(
    {"stdin", "stdout", "stderr", "text", "universal_newlines", "encoding", "errors", "bufsize",
     "pipesize"})


class Command(_native.Command):
    """A process to start: the engine's ``spawnkit::Command``, one method per option (see
    :class:`spawnkit._native.Command`); every method returns the command, so calls chain.
    Nothing happens until :meth:`spawn`, :meth:`output`, :meth:`status` or :meth:`plan`.
    """

    def spawn(self, *, via=None, _submit_only=False, **popen_kwargs):
        """Start the child; returns a :class:`spawnkit.subprocess.Popen` (``pidfd``,
        ``wait``, ``poll``, ``communicate``, ``send_signal``...). Keyword arguments are
        ``Popen``'s stream arguments (``stdin``, ``stdout``, ``stderr``, ``text``,
        ``encoding``, ``errors``, ``bufsize``...); everything else is set on the command.
        ``via``: a :class:`Server` to start it through (its parent is then the server)."""
        from .subprocess import Popen

        other = set(popen_kwargs) - _STREAM_KWARGS
        if other:
            raise TypeError(
                f"Command.spawn() takes Popen's stream arguments only, not {', '.join(sorted(other))}"
                " (set them on the Command)")
        stdin, stdout, stderr = self.streams()
        kwargs = {"stdin": stdin, "stdout": stdout, "stderr": stderr}
        kwargs.update(popen_kwargs)
        program, argv = self.argv()
        p = Popen.__new__(Popen)
        p._sk_command = self
        p._sk_via = via
        p._sk_submit_only = _submit_only
        p.__init__(argv, executable=program, **kwargs)
        return p

    def output(self, input=None, timeout=None, **popen_kwargs):
        """Start the child with stdout and stderr captured (unless set) and stdin from
        ``input`` or /dev/null (unless set), wait, and return a ``CompletedProcess``."""
        from .subprocess import DEVNULL, PIPE, CompletedProcess, TimeoutExpired

        streams = self.streams()
        kwargs = {}
        if streams[0] is None:
            kwargs["stdin"] = PIPE if input is not None else DEVNULL
        if streams[1] is None:
            kwargs["stdout"] = PIPE
        if streams[2] is None:
            kwargs["stderr"] = PIPE
        kwargs.update(popen_kwargs)
        with self.spawn(**kwargs) as p:
            try:
                out, err = p.communicate(input, timeout=timeout)
            except TimeoutExpired:
                p.kill()
                p.wait()
                raise
            except BaseException:
                p.kill()
                raise
            return CompletedProcess(p.args, p.wait(), out, err)

    def status(self, timeout=None):
        """Start the child and wait for it: its return code (``-N`` for signal N)."""
        with self.spawn() as p:
            try:
                return p.wait(timeout)
            except BaseException:
                p.kill()
                raise


def spawn_many(commands, *, via=None, **popen_kwargs):
    """Start every :class:`Command` in ``commands``, in order: a list with a
    :class:`spawnkit.subprocess.Popen` for each child started and the exception (an
    ``OSError``, ``ValueError``...) for each that failed, so one failure does not hide the
    others. Locally every child is cloned before the first one's exec is awaited
    (``clone3`` without ``CLONE_VFORK``), so they exec at the same time; through a spawn server
    (``via``) every request is sent before the first answer is read, so the server works on
    all of them at once. Keyword arguments go to each :meth:`Command.spawn`."""
    import collections
    import errno

    from .subprocess import Popen

    def finish(i):
        p = started[i]
        if isinstance(p, Popen) and p._sk_pending is not None:
            try:
                p._sk_finish()
            except Exception as e:  # noqa: BLE001 - returned per item, by design
                started[i] = e

    def submit(cmd):
        return cmd.spawn(via=via, _submit_only=True, **popen_kwargs)

    started = []
    local = collections.deque()  # local starts not yet finished: at most _START_WINDOW
    for cmd in commands:
        try:
            try:
                p = submit(cmd)
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE) or not local:
                    raise
                # Each start not yet finished holds a pipe besides its pidfd: finish them
                # and try again, as one spawn after another would have found the fds.
                while local:
                    finish(local.popleft())
                p = submit(cmd)
        except Exception as e:  # noqa: BLE001 - returned per item, by design
            started.append(e)
            continue
        started.append(p)
        if p._sk_pending is not None and p._sk_pending[1] is None:
            local.append(len(started) - 1)
            if len(local) > _START_WINDOW:
                finish(local.popleft())
    for i in range(len(started)):
        finish(i)
    return started


#: At most this many children of a local spawn_many are started and not yet finished (each
#: holds a process before its exec, a pipe and a stack until then).
_START_WINDOW = 64
