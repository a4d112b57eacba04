"""Observation: the process table, per-process memory, shared-memory regions counted once.

>>> import spawnkit
>>> me = spawnkit.ps(pids=[os.getpid()], cmdline=True)[0]       # doctest: +SKIP
>>> me.comm, me.state, me.threads, me.cmdline                     # doctest: +SKIP
('python3', 'R', 1, ['python3'])
>>> [p.pid for p in spawnkit.ps(tree_of=os.getpid())]              # me and my descendants
>>> spawnkit.memory(os.getpid())[0].uss                           # what my exit surely frees
>>> for r in spawnkit.shared_regions():                           # each shmem object once
...     print(r.name, r.resident_bytes, r.pids)

``ps()`` reads the whole table with a BPF task iterator (one read for every task; root or
CAP_BPF+CAP_PERFMON) when it may serve the caller, else with a lean /proc walker (one read of
``stat`` per process); the backend stays loaded between calls, and every call checks the
caller again: the iterator sees every process of the machine, so it serves only a caller to
whom /proc would show every process too (see :func:`ps`). ``memory()`` reads ``smaps_rollup`` only for
the processes asked for, and keeps shared memory (shmem) out of ``uss``. ``shared_regions()``
counts every shared anonymous mapping, SysV segment, memfd and tmpfs file that a process maps
once, with the memory it really holds (pages written by processes that have exited included).
"""

from __future__ import annotations

from collections.abc import Iterable

from . import _native

ProcessInfo = _native.ProcessInfo
MemoryInfo = _native.MemoryInfo
SharedRegion = _native.SharedRegion
SharedReport = _native.SharedReport

__all__ = [
    "ProcessInfo",
    "MemoryInfo",
    "SharedRegion",
    "SharedReport",
    "ps",
    "ps_backend",
    "memory",
    "shared_regions",
    "shared_report",
]


def _pids(value, what, zero_ok=False, check=True):
    """``value`` (a pid or an iterable of pids) as a list of ints; with ``check``, each a
    process id (0 too when ``zero_ok``). ``ps()`` leaves the values to the native
    ``Selection``, which says which of them is no process id."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, Iterable)):
        raise TypeError(f"{what} must be a pid or an iterable of pids, not {type(value).__name__}")
    pids = [value] if isinstance(value, int) else list(value)
    for p in pids:
        if isinstance(p, bool) or not isinstance(p, int):
            raise TypeError(f"{what} must hold ints, not {type(p).__name__}")
        if check and (p < 0 or (p == 0 and not zero_ok)):
            raise ValueError(f"{what}: {p} is not a process id")
    return pids


def ps(*, pids=None, ppid=None, tree_of=None, uid=False, cmdline=False, backend="auto"):
    """The process table: one :class:`ProcessInfo` per process, by increasing pid.

    pids: these processes (a pid or an iterable of pids).
    ppid: the direct children of this process (or these processes); 0 gives the
    processes without a parent (init, kthreadd).
    tree_of: this process (or these) and all its descendants (followed through the whole
    table, whatever the other selectors keep).
    uid: fill ``uid`` (free with the BPF backend; one more read per process with procfs).
    cmdline: fill ``cmdline`` (one more read per process).
    backend: "auto" (BPF when it may serve this caller, else procfs), "bpf" (OSError when it
    may not) or "procfs".

    Selectors add up, as in procps and ``spawnkit ps``: a process is listed when any of
    ``pids``, ``ppid`` and ``tree_of`` selects it (``ps(pids=[a], ppid=a)`` is ``a`` and its
    children); with none of them, every process. Processes that exit while the table is read
    are left out.

    The backend changes how fast the table is read, not what it shows. BPF serves a caller
    only while it could load the program itself (CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON,
    in the initial user namespace), in the initial pid namespace, and with a /proc that hides
    no process from it (not mounted ``hidepid=``, or the caller holds CAP_SYS_PTRACE or is in
    the mount's ``gid=`` group, root's by default). This is checked on every call: after
    ``os.setuid()``, a capability drop, or a new /proc mounted ``hidepid=invisible``, the
    next call lists what /proc shows the caller now (and the BPF program is unloaded).
    """
    return _native.ps(
        pids=_pids(pids, "pids", check=False),
        ppid=_pids(ppid, "ppid", check=False),
        tree_of=_pids(tree_of, "tree_of", check=False),
        uid=bool(uid),
        cmdline=bool(cmdline),
        backend=backend,
    )


def ps_backend(backend="auto"):
    """The backend :func:`ps` uses for ``backend`` now, for this caller ("bpf" or "procfs"),
    and why "auto" fell back to procfs (None when it did not)."""
    return _native.ps_backend(backend)


def memory(pids=None, *, top=None):
    """Memory per process (:class:`MemoryInfo`, bytes), from ``smaps_rollup``.

    pids: these processes (a pid or an iterable; vanished ones are left out), in that order;
    top: else the ``top`` processes by RSS, largest first (those denied last); neither: every
    process, by pid.

    ``status`` says whether the sizes were measured: "measured"; "no-memory" (a kernel
    thread or a zombie: every size 0); "denied" (another user's process without root, or,
    as root, one that holds capabilities the caller lacks or lies outside its user
    namespace): every size ``None``, unknown rather than 0.
    """
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 0):
        raise ValueError(f"top must be a non-negative int, not {top!r}")
    return _native.memory(_pids(pids, "pids"), top=top)


def shared_report(pids=None):
    """Every shared-memory region (or those the given processes map), each counted once,
    with the total and the check against Shmem in /proc/meminfo (:class:`SharedReport`)."""
    return _native.shared_report(_pids(pids, "pids"))


def shared_regions(pids=None):
    """The regions of :func:`shared_report`: a list of :class:`SharedRegion`, largest
    resident first."""
    return shared_report(pids).regions
