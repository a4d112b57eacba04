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

import os as _os
from dataclasses import dataclass as _dataclass

from . import _native
from . import observe, subprocess
from .observe import (
    MemoryInfo,
    ProcessInfo,
    SharedRegion,
    SharedReport,
    memory,
    ps,
    ps_backend,
    shared_regions,
    shared_report,
)
from .subprocess import DEVNULL, PIPE, STDOUT, CompletedProcess, Popen, TimeoutExpired

__all__ = [
    "Command",
    "Options",
    "Popen",
    "PIPE",
    "DEVNULL",
    "STDOUT",
    "INHERIT",
    "RLIM_INFINITY",
    "STRATEGIES",
    "NAMESPACES",
    "PATH_SEARCHES",
    "reap_orphans",
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
uses_clone3 = _native.uses_clone3


@_dataclass(frozen=True)
class Options:
    """What the engine can do beyond ``subprocess.Popen``'s arguments (read by the glue)."""

    rlimits: tuple = ()
    nice: "int | None" = None
    cpus: "tuple | None" = None
    pdeathsig: "int | None" = None
    no_new_privs: bool = False
    fds: tuple = ()
    signal_mask: "tuple | None" = None
    signal_default: tuple = ()
    strategy: "str | None" = None
    kill_on_drop: bool = False
    # isolation (see Command)
    unshare: "str | None" = None  # comma-separated names
    user_map: "str | tuple | None" = None  # "root", "current", or (uid_lines, gid_lines)
    private_tmp: "tuple | None" = None  # (dir or None, nosuid, nodev, noexec)
    ro_binds: tuple = ()  # ((src, dst), ...)
    private_network: bool = False
    hostname: "str | bytes | None" = None
    chroot: "object | None" = None
    keep_caps: bool = False
    lock: "tuple | None" = None  # (path, shared, timeout seconds or None)
    cgroup: "object | None" = None
    path_search: "str | None" = None


def _signum(sig):
    """A signal number from 15, signal.SIGTERM, "TERM" or "SIGTERM"."""
    if isinstance(sig, str):
        import signal

        name = sig.upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        try:
            return int(getattr(signal, name))
        except AttributeError:
            raise ValueError(f"unknown signal {sig!r}") from None
    return int(sig)


class Command:
    """A process to start, built like the Rust ``spawnkit::Command``.

    Every method returns the command, so calls chain. Nothing happens until :meth:`spawn`,
    :meth:`output`, :meth:`status` or :meth:`plan`.
    """

    def __init__(self, program):
        self._program = program
        self._args = []
        self._arg0 = None
        self._env_clear = False
        self._env = {}
        self._cwd = None
        self._stdio = [None, None, None]
        self._fds = {}
        self._close_other_fds = True
        self._signal_mask = None
        self._restore_signals = True
        self._signal_default = []
        self._setsid = False
        self._pgid = None
        self._rlimits = {}
        self._nice = None
        self._cpus = None
        self._uid = None
        self._gid = None
        self._groups = None
        self._umask = None
        self._pdeathsig = None
        self._no_new_privs = False
        self._strategy = None
        self._pre_exec = None
        self._kill_on_drop = False
        self._unshare = set()
        self._user_map = None
        self._private_tmp = None
        self._ro_binds = []
        self._private_network = False
        self._hostname = None
        self._chroot = None
        self._keep_caps = False
        self._lock = None
        self._cgroup = None
        self._path_search = None

    def __repr__(self):
        return f"Command({self._program!r}, args={self._args!r})"

    # argv and environment
    def arg(self, arg):
        """Append one argument."""
        self._args.append(arg)
        return self

    def args(self, args):
        """Append arguments."""
        self._args.extend(args)
        return self

    def arg0(self, arg0):
        """``argv[0]`` as the child sees it (default: the program as given)."""
        self._arg0 = arg0
        return self

    def env(self, key, value):
        """Set an environment variable in the child."""
        self._env[key] = value
        return self

    def envs(self, mapping):
        """Set several environment variables (a mapping or (key, value) pairs)."""
        items = mapping.items() if hasattr(mapping, "items") else mapping
        for k, v in items:
            self._env[k] = v
        return self

    def env_remove(self, key):
        """Remove a variable from the child's environment."""
        self._env[key] = None
        return self

    def env_clear(self):
        """Start from an empty environment (variables set with :meth:`env` still pass)."""
        self._env_clear = True
        self._env = {k: v for k, v in self._env.items() if v is not None}
        return self

    def current_dir(self, path):
        """The child's working directory (str, bytes or os.PathLike)."""
        self._cwd = path
        return self

    # standard streams and fds
    def stdin(self, spec):
        """``PIPE``, ``DEVNULL``, an fd, a file object, or ``None`` to inherit."""
        self._stdio[0] = spec
        return self

    def stdout(self, spec):
        """``PIPE``, ``DEVNULL``, an fd, a file object, or ``None`` to inherit."""
        self._stdio[1] = spec
        return self

    def stderr(self, spec):
        """``PIPE``, ``DEVNULL``, ``STDOUT`` (2>&1), an fd, a file object, or ``None``."""
        self._stdio[2] = spec
        return self

    def fd(self, child_fd, parent_fd):
        """Make the child's fd ``child_fd`` a copy of the parent's ``parent_fd`` (swaps and
        cycles allowed; ``fd(n, n)`` keeps ``n`` even if it is close-on-exec)."""
        self._fds[int(child_fd)] = int(parent_fd)
        return self

    def keep_fd(self, fd):
        """Keep the parent's fd ``fd`` open in the child under the same number."""
        return self.fd(fd, fd)

    def close_other_fds(self, on=True):
        """Close every fd but 0-2 and the mapped ones in the child (default: on)."""
        self._close_other_fds = bool(on)
        return self

    # signals, session
    def signal_mask(self, signals):
        """The child's signal mask at execve (default: the calling thread's, as
        ``subprocess``); an empty iterable unblocks everything. SIGKILL and SIGSTOP cannot be
        blocked: asking for them is a ValueError when the command is spawned or planned."""
        self._signal_mask = tuple(_signum(s) for s in signals)
        return self

    def restore_signals(self, on=True):
        """Reset SIGPIPE and SIGXFSZ to their default action in the child (default: on)."""
        self._restore_signals = bool(on)
        return self

    def signal_default(self, sig):
        """Reset ``sig`` to its default action in the child even if the parent ignores it."""
        self._signal_default.append(_signum(sig))
        return self

    def setsid(self, on=True):
        """Start a new session."""
        self._setsid = bool(on)
        return self

    def process_group(self, pgid):
        """Put the child in process group ``pgid`` (0: a new group led by the child)."""
        self._pgid = int(pgid)
        return self

    # limits and scheduling
    def rlimit(self, resource, soft, hard=None):
        """Set a resource limit: ``resource`` is a name (``"nofile"``, ``"RLIMIT_AS"``) or a
        ``resource.RLIMIT_*`` number; ``RLIM_INFINITY`` (-1, as ``resource.RLIM_INFINITY``)
        for no limit, any other negative value is a ValueError when the command is spawned or
        planned; ``hard`` defaults to ``soft``."""
        self._rlimits[resource] = (soft, soft if hard is None else hard)
        return self

    def nice(self, increment):
        """Add ``increment`` to the niceness, like nice(1)."""
        self._nice = int(increment)
        return self

    def cpu_affinity(self, cpus):
        """Run only on these CPUs."""
        self._cpus = tuple(int(c) for c in cpus)
        return self

    # credentials
    def uid(self, uid):
        """Run as this user (id or name). Supplementary groups are dropped unless
        :meth:`groups` says which to keep."""
        self._uid = uid
        return self

    def gid(self, gid):
        """Run with this group (id or name)."""
        self._gid = gid
        return self

    def groups(self, groups):
        """Supplementary groups (ids or names); an empty list drops them all."""
        self._groups = list(groups)
        return self

    def umask(self, mask):
        """The child's umask."""
        self._umask = int(mask)
        return self

    def parent_death_signal(self, sig):
        """Signal the child gets when the parent *thread* that spawned it exits."""
        self._pdeathsig = _signum(sig)
        return self

    def no_new_privs(self, on=True):
        """Set no_new_privs: execve can never grant privileges."""
        self._no_new_privs = bool(on)
        return self

    # how
    def strategy(self, name):
        """``"clone-vfork"`` (default), ``"posix-spawn"`` or ``"fork-exec"``."""
        if name not in STRATEGIES and name.replace("_", "-") not in STRATEGIES:
            raise ValueError(f"unknown strategy {name!r} (use one of {', '.join(STRATEGIES)})")
        self._strategy = name.replace("_", "-")
        return self

    def pre_exec(self, fn):
        """Call ``fn()`` in the child just before execve (forces the fork-exec strategy;
        the same caveats as ``preexec_fn``)."""
        self._pre_exec = fn
        return self

    def kill_on_drop(self, on=True):
        """SIGKILL and reap the child when its Popen object is collected unwaited."""
        self._kill_on_drop = bool(on)
        return self

    def path_search(self, how):
        """How the child walks PATH when an execve fails: ``"execvp"`` (the default: stop at
        an error other than ENOENT, ENOTDIR, EACCES...) or ``"try-all"`` (CPython's
        ``subprocess``: try every entry, report the first error that is not ENOENT or
        ENOTDIR). The posix-spawn strategy always follows glibc's execvp."""
        how = how.replace("_", "-")
        if how not in PATH_SEARCHES:
            raise ValueError(f"unknown path search {how!r} (use one of {', '.join(PATH_SEARCHES)})")
        self._path_search = how
        return self

    # isolation
    def unshare(self, namespaces):
        """Create these namespaces for the child: names from :data:`NAMESPACES` (``"user"``,
        ``"mount"``, ``"net"``, ``"pid"``, ``"uts"``, ``"ipc"``, ``"cgroup"``; ``"mnt"`` and
        ``"network"`` too), as an iterable or a comma-separated string; adds to earlier
        calls. With the default strategy the clone creates them, so the child starts inside;
        with ``pid`` it is pid 1, and with ``pid`` and ``mount`` a fresh /proc is mounted.
        Without root, a user namespace mapping you to yourself is added. A list naming no
        namespace (``""``, ``[]``) or with an empty item (``"user,,net"``) is a ValueError."""
        names = [namespaces] if isinstance(namespaces, str) else list(namespaces)
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"a namespace name is a str, not {type(name).__name__}")
        # The library's parse, as `spawnkit run --unshare`: at least one name, none empty.
        self._unshare.update(_native.namespaces(",".join(names)))
        return self

    def map_root_user(self):
        """A new user namespace where your effective uid and gid are 0 (``unshare -r``)."""
        self._user_map = "root"
        return self

    def map_current_user(self):
        """A new user namespace where your uid and gid stay the same."""
        self._user_map = "current"
        return self

    def uid_map(self, lines):
        """A new user namespace with this uid_map: ``(inside, outside, count)`` lines. More
        than your own id needs privilege outside; written by the parent (clone-vfork only)."""
        self._user_map = (_id_lines(lines), self._custom_map()[1])
        return self

    def gid_map(self, lines):
        """A new user namespace with this gid_map: ``(inside, outside, count)`` lines."""
        self._user_map = (self._custom_map()[0], _id_lines(lines))
        return self

    def _custom_map(self):
        return self._user_map if isinstance(self._user_map, tuple) else ((), ())

    def private_tmp(self, dir=None, *, nosuid=True, nodev=True, noexec=False):
        """A private /tmp in a new mount namespace: a fresh tmpfs (``dir`` None or True), or
        the directory ``dir`` bound on /tmp; mounted nosuid and nodev by default (``False``
        turns the private /tmp off again)."""
        if dir is False:
            self._private_tmp = None
        else:
            self._private_tmp = (None if dir is True else dir,
                                 bool(nosuid), bool(nodev), bool(noexec))
        return self

    def ro_bind(self, src, dst=None):
        """Bind ``src`` read-only (recursively) on ``dst`` (default: ``src`` itself, which must
        exist) in a new mount namespace."""
        self._ro_binds.append((src, src if dst is None else dst))
        return self

    def private_network(self, on=True):
        """A new network namespace with only the loopback interface, up (127.0.0.1 works)."""
        self._private_network = bool(on)
        return self

    def hostname(self, name):
        """The hostname (1 to 64 bytes), in a new uts namespace: ``str`` (encoded as
        ``os.fsencode`` does, as ``socket.sethostname`` takes it) or ``bytes``."""
        self._hostname = name
        return self

    def chroot(self, dir):
        """chroot into ``dir`` after the mounts, then ``chdir("/")``; :meth:`current_dir` is
        resolved inside it."""
        self._chroot = dir
        return self

    def keep_capabilities(self, on=True):
        """Let a fenced child keep its capabilities. By default a child with a fence (any
        namespace but a user namespace alone, or a chroot) starts with none, so root inside
        cannot undo the fences (umount the private /tmp, remount a read-only bind writable,
        setns out, reach the parent's files through /proc/PID/root). With this it can."""
        self._keep_caps = bool(on)
        return self

    def lock(self, path, *, shared=False, timeout=None, nonblock=False):
        """Hold an flock(2) lock on ``path`` (created if missing, as flock(1)) for the child's
        whole life: the child holds the only fd of it, so it is released when the child (and
        anything it hands the fd to) exits. Exclusive unless ``shared``. Waits as long as it
        takes (``timeout=None``), at most ``timeout`` seconds, or not at all (``nonblock``,
        or ``timeout=0``); the wait releases the GIL and Ctrl-C interrupts it.

        A lock held elsewhere raises ``BlockingIOError`` (errno EWOULDBLOCK) with
        ``nonblock``, and ``TimeoutError`` (errno ETIMEDOUT) once ``timeout`` runs out; both
        have ``filename`` set to ``path`` and ``step == "flock"``."""
        if nonblock:
            if timeout is not None and timeout != 0:
                raise ValueError("nonblock and a timeout exclude each other")
            timeout = 0.0
        elif timeout is not None:
            timeout = float(timeout)
            if not timeout >= 0:
                raise ValueError(f"lock timeout must be a number of seconds >= 0, not {timeout}")
            if timeout == float("inf"):
                timeout = None
        self._lock = (path, bool(shared), timeout)
        return self

    def cgroup(self, path):
        """Start the child in this cgroup v2 directory from its first instruction (clone3
        CLONE_INTO_CGROUP; fork-exec moves it first thing; posix-spawn cannot)."""
        self._cgroup = path
        return self

    # doing it
    def _options(self):
        fds = dict(self._fds)
        return Options(
            rlimits=tuple((r, s, h) for r, (s, h) in self._rlimits.items()),
            nice=self._nice,
            cpus=self._cpus,
            pdeathsig=self._pdeathsig,
            no_new_privs=self._no_new_privs,
            fds=tuple(fds.items()),
            signal_mask=self._signal_mask,
            signal_default=tuple(self._signal_default),
            strategy=self._strategy,
            kill_on_drop=self._kill_on_drop,
            unshare=",".join(n for n in NAMESPACES if n in self._unshare) or None,
            user_map=self._user_map,
            private_tmp=self._private_tmp,
            ro_binds=tuple(self._ro_binds),
            private_network=self._private_network,
            hostname=self._hostname,
            chroot=self._chroot,
            keep_caps=self._keep_caps,
            lock=self._lock,
            cgroup=self._cgroup,
            path_search=self._path_search,
        )

    def _argv(self):
        return [self._program if self._arg0 is None else self._arg0, *self._args]

    def _full_env(self):
        if not self._env_clear and not self._env:
            return None
        env = {} if self._env_clear else dict(_os.environb)
        for k, v in self._env.items():
            k = _os.fsencode(k)
            if v is None:
                env.pop(k, None)
            else:
                env[k] = _os.fsencode(v)
        return env

    def _popen_kwargs(self):
        kwargs = dict(
            executable=self._program,
            stdin=self._stdio[0],
            stdout=self._stdio[1],
            stderr=self._stdio[2],
            close_fds=self._close_other_fds,
            cwd=self._cwd,
            env=self._full_env(),
            restore_signals=self._restore_signals,
            start_new_session=self._setsid,
            user=self._uid,
            group=self._gid,
            extra_groups=self._groups,
            umask=-1 if self._umask is None else self._umask,
            preexec_fn=self._pre_exec,
        )
        if self._pgid is not None:  # Python >= 3.11
            kwargs["process_group"] = self._pgid
        return kwargs

    def spawn(self, **popen_kwargs):
        """Start the child; returns a :class:`spawnkit.subprocess.Popen` (``pidfd``,
        ``wait``, ``poll``, ``communicate``, ``send_signal``...). Keyword arguments go to
        ``Popen`` (``text``, ``encoding``, ``errors``, ``bufsize``, or a stream)."""
        kwargs = self._popen_kwargs()
        kwargs.update(popen_kwargs)
        p = Popen.__new__(Popen)
        p._sk_options = self._options()
        p.__init__(self._argv(), **kwargs)
        return p

    def output(self, input=None, timeout=None, **popen_kwargs):
        """Start the child with stdout and stderr captured (unless set) and stdin from
        ``input`` or /dev/null (unless set), wait, and return a ``CompletedProcess``."""
        kwargs = {}
        if self._stdio[0] is None:
            kwargs["stdin"] = PIPE if input is not None else DEVNULL
        if self._stdio[1] is None:
            kwargs["stdout"] = PIPE
        if self._stdio[2] is None:
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

    def plan(self):
        """The steps the child would run, one per line, without spawning (like
        ``spawnkit run --dry-run``). Pipes show as the pipe they would be. Paths and
        arguments are exact: bytes that are not printable UTF-8 are escaped (``"\\377"``, a
        backslash as ``\\\\``), as ``ls --quoting-style=c`` shows names."""
        kw = self._popen_kwargs()
        codes = []
        for spec in self._stdio:
            if spec is None or isinstance(spec, int):
                codes.append(spec)
            else:
                codes.append(spec.fileno())
        uid, gid, groups = _resolve_ids(self._uid, self._gid, self._groups)
        return _native.plan(
            self._program, self._argv(), kw["env"], self._cwd, *codes,
            self._close_other_fds, (), self._restore_signals, self._setsid,
            self._pgid, uid, gid, groups, self._umask, self._pre_exec, self._options())


def _id_lines(lines):
    """uid_map/gid_map lines as (inside, outside, count) int triples."""
    out = []
    for line in lines:
        line = tuple(line)
        if len(line) != 3:
            raise ValueError(f"an id map line is (inside, outside, count), not {line!r}")
        out.append(tuple(int(x) for x in line))
    return tuple(out)


def _resolve_ids(uid, gid, groups):
    if isinstance(uid, str):
        import pwd

        uid = pwd.getpwnam(uid).pw_uid
    if isinstance(gid, str):
        import grp

        gid = grp.getgrnam(gid).gr_gid
    if groups is not None:
        import grp

        groups = [grp.getgrnam(g).gr_gid if isinstance(g, str) else int(g) for g in groups]
    return uid, gid, groups
